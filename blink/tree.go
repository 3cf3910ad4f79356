package blink

import (
	"bytes"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cell/internal/atomicmem"
)

// Extents allocates blocks in the extent area of the region a tree lives in.
// Only the tree's writer calls it (under the writer's lock); an
// implementation shared by several meganodes of one region must serialise
// its callers itself. Allocation must be deterministic: the same sequence of
// calls returns the same offsets (raft replicas replay it).
type Extents interface {
	// Alloc returns the region offset of an 8-byte aligned block of at
	// least n bytes, or an error wrapping ErrExtentsFull.
	Alloc(n int) (uint64, error)
	// Free returns a block that Alloc(n) returned.
	Free(off uint64, n int)
}

// Options configure a tree. The zero value of every field means its default.
type Options struct {
	// NodeSize is the size of every node in bytes, a power of two from 512
	// to 8192. Default 1024. Fixed when the meganode is formatted.
	NodeSize int
	// MaxValueSize is the largest value accepted. Default 1 MiB.
	MaxValueSize int
	// FillThreshold is the fraction of the meganode's nodes in use at
	// which inserts of new keys return ErrNeedsSplit. Default 0.9.
	FillThreshold float64
	// MaxRestarts bounds how often a lock-free reader restarts or retries
	// a torn copy before giving up with ErrRestart. Default 1<<20.
	MaxRestarts int
	// BeforeWrite, when set, is called with the writer's lock held before
	// the tree changes bytes [off, off+n) of mem: every node it publishes
	// and every extent record it stores. Whoever owns mem learns of every
	// change before it happens (meganode's copy-on-write images save the
	// old bytes there). The tree's extent allocator reports its own.
	BeforeWrite func(off, n uint64)
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.NodeSize == 0 {
		o.NodeSize = DefaultNodeSize
	}
	if o.MaxValueSize == 0 {
		o.MaxValueSize = 1 << 20
	}
	if o.FillThreshold == 0 {
		o.FillThreshold = 0.9
	}
	if o.MaxRestarts == 0 {
		o.MaxRestarts = 1 << 20
	}
}

// Validate reports whether the options are usable.
func (o *Options) Validate() error {
	if o.NodeSize < MinNodeSize || o.NodeSize > MaxNodeSize || o.NodeSize&(o.NodeSize-1) != 0 {
		return fmt.Errorf("blink: node size %d is not a power of two in [%d, %d]", o.NodeSize, MinNodeSize, MaxNodeSize)
	}
	if o.MaxValueSize < 1 || o.MaxValueSize > 1<<30 {
		return fmt.Errorf("blink: max value size %d out of range", o.MaxValueSize)
	}
	if o.FillThreshold <= 0 || o.FillThreshold > 1 {
		return fmt.Errorf("blink: fill threshold %v not in (0, 1]", o.FillThreshold)
	}
	return nil
}

// TestingKnobs are hooks for tests. Each is nil in production.
type TestingKnobs struct {
	// MidNodeWrite fires while the writer is publishing a node, after the
	// head and tail versions were set odd and half of the body words were
	// stored. Readers copying the node meanwhile must reject their copy.
	MidNodeWrite func(p Ptr)
}

// Bounds is a key range [Min, Max); MinInf and MaxInf stand for -inf and
// +inf (Min or Max is then ignored).
type Bounds struct {
	Min, Max       []byte
	MinInf, MaxInf bool
}

// Full is the bounds of the whole key space.
var Full = Bounds{MinInf: true, MaxInf: true}

// Contains reports whether key lies in [Min, Max).
func (b Bounds) Contains(key []byte) bool {
	return (b.MinInf || bytes.Compare(key, b.Min) >= 0) && (b.MaxInf || bytes.Compare(key, b.Max) < 0)
}

func (b Bounds) flags() byte {
	var f byte
	if b.MinInf {
		f |= flagMinInf
	}
	if b.MaxInf {
		f |= flagMaxInf
	}
	return f
}

func (b Bounds) keys() (min, max []byte) {
	if !b.MinInf {
		min = b.Min
	}
	if !b.MaxInf {
		max = b.Max
	}
	return min, max
}

// Stats counts what readers had to retry, by cause. Safe for concurrent use.
type Stats struct {
	Torn, Invalid, OutOfRange, CRC, Restarts atomic.Uint64
}

// Tree is the B-link tree inside one meganode. See doc.go for the
// concurrency contract: one writer at a time (Put, Delete and the other
// mutators serialise on an internal lock), any number of lock-free readers.
type Tree struct {
	mem      []byte // the whole region
	region   uint32
	base     uint64 // offset of the meganode (its header node) in the region
	size     uint64 // bytes in the meganode
	nodeSize int
	maxKey   int
	leafKind byte // flagExtents for a leaf meganode, 0 for inner meganodes
	opts     Options
	ext      Extents
	knobs    TestingKnobs

	// Stats are retry counters of lock-free readers.
	Stats Stats

	// mode is the versioning mode as readers load it: modeVersioned|U in
	// versioned mode, 0 in legacy mode (word.go). Written under mu.
	mode atomic.Uint64

	bufs  sync.Pool // *nodeBuf for readers
	iters sync.Pool // closed *Iter

	mu struct {
		sync.Mutex
		hdr      node // the header image; published when dirty
		dirty    bool
		scratch  node // image being edited
		tmp      node // copy of an old image during splits and compaction
		right    node // right half of a split
		path     []Ptr
		splitBuf []entryRef
		split    splitState // the meganode split in progress (split.go)
		// Writer-owned buffers that split entries may reference (on the
		// stack they would escape to the heap on every insert).
		sep     [MaxNodeSize / 8]byte
		payload [versionedPayload]byte
		childPl [pointerPayload]byte
		// words holds the versioned payloads of a legacy leaf being
		// rewritten versioned (upgradeLocked).
		words []byte
		// upgradeRefused: a write was refused ErrNeedsSplit because
		// rewriting a legacy leaf versioned needed nodes the meganode
		// did not have, below the fill threshold; NeedsSplit reports it
		// until a split frees the right half. Not part of the image:
		// only the decision to split reads it.
		upgradeRefused bool
	}
}

// Config places a new meganode in a region.
type Config struct {
	Region uint32
	// Base is the byte offset of the meganode in the region, a multiple of
	// the node size.
	Base uint64
	// Size is the meganode's size in bytes, a multiple of the node size
	// holding at least 8 nodes.
	Size uint64
	// Level is the meganode's level in the global tree: 0 for a leaf
	// meganode (entries point to extents), higher for inner meganodes
	// (entries point to child meganodes).
	Level int
	// Bounds is the key range of the meganode.
	Bounds Bounds
	// Versioned formats the meganode in versioned mode (word.go) with
	// legacy version Legacy, in [1, MaxVersion]; false (legacy mode)
	// requires Legacy 0. Every leaf of a versioned leaf meganode is
	// versioned from the start.
	Versioned bool
	Legacy    uint64
}

func (c *Config) validate(mem []byte, nodeSize int) error {
	ns := uint64(nodeSize)
	switch {
	case c.Region > MaxRegionID:
		return fmt.Errorf("blink: region %d out of range", c.Region)
	case c.Base%ns != 0 || c.Size%ns != 0:
		return fmt.Errorf("blink: meganode at %d size %d not aligned to node size %d", c.Base, c.Size, nodeSize)
	case c.Size/ns < 8 || c.Size/ns > 1<<32-1:
		return fmt.Errorf("blink: meganode of %d nodes out of range", c.Size/ns)
	case c.Base+c.Size > uint64(len(mem)) || c.Base+c.Size > MaxOffset:
		return fmt.Errorf("blink: meganode [%d, %d) outside region of %d bytes", c.Base, c.Base+c.Size, len(mem))
	case !atomicmem.Aligned(mem):
		return fmt.Errorf("blink: region memory not 8-byte aligned")
	case c.Level < 0 || c.Level > 0xffff:
		return fmt.Errorf("blink: level %d out of range", c.Level)
	}
	maxKey := MaxKeySize(nodeSize)
	if !c.Bounds.MinInf && (len(c.Bounds.Min) == 0 || len(c.Bounds.Min) > maxKey) ||
		!c.Bounds.MaxInf && (len(c.Bounds.Max) == 0 || len(c.Bounds.Max) > maxKey) {
		return fmt.Errorf("blink: meganode bounds keys must be 1..%d bytes", maxKey)
	}
	if !c.Bounds.MinInf && !c.Bounds.MaxInf && bytes.Compare(c.Bounds.Min, c.Bounds.Max) >= 0 {
		return fmt.Errorf("blink: empty meganode range [%q, %q)", c.Bounds.Min, c.Bounds.Max)
	}
	if c.Versioned && (c.Legacy < 1 || c.Legacy > MaxVersion) || !c.Versioned && c.Legacy != 0 {
		return fmt.Errorf("blink: versioned %v with legacy version %d: %w", c.Versioned, c.Legacy, ErrVersioning)
	}
	return nil
}

func newTree(mem []byte, region uint32, base uint64, ext Extents, opts Options) *Tree {
	t := &Tree{mem: mem, region: region, base: base, ext: ext, opts: opts}
	t.nodeSize = opts.NodeSize
	t.maxKey = MaxKeySize(opts.NodeSize)
	t.mu.hdr = node(atomicmem.Alloc(t.nodeSize))
	t.mu.scratch = node(atomicmem.Alloc(t.nodeSize))
	t.mu.tmp = node(atomicmem.Alloc(t.nodeSize))
	t.mu.right = node(atomicmem.Alloc(t.nodeSize))
	// A leaf holds at most nodeSize/(slot+keyLen+1+extentPayload) entries.
	t.mu.words = make([]byte, t.nodeSize/(slotSize+keyLenSize+1+extentPayload)*versionedPayload+versionedPayload)
	return t
}

// Format writes an empty meganode (a header node and an empty root leaf)
// into mem as cfg describes and returns its tree. Whatever was in the
// meganode's memory is overwritten; version words keep increasing so that
// readers of a previous incarnation detect the change.
func Format(mem []byte, cfg Config, ext Extents, opts Options) (*Tree, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.validate(mem, opts.NodeSize); err != nil {
		return nil, err
	}
	t := newTree(mem, cfg.Region, cfg.Base, ext, opts)
	t.size = cfg.Size
	if cfg.Level == 0 {
		t.leafKind = flagExtents
	}
	t.mu.Lock()
	defer t.mu.Unlock()

	h := t.mu.hdr
	copy(h, t.nodeBytes(t.headerPtr()))
	clear(h[8 : len(h)-tailSize])
	h[offFlags] = flagValid | cfg.Bounds.flags()
	h[offKind] = kindHeader
	h.putU16(hdrGlobalLevel, cfg.Level)
	le.PutUint32(h[hdrMagic:], headerMagic)
	h.putU16(hdrNodeLog2, bits.TrailingZeros(uint(opts.NodeSize)))
	le.PutUint32(h[hdrCapacity:], uint32(cfg.Size/uint64(opts.NodeSize)))
	le.PutUint32(h[hdrNextFresh:], 1) // node 0 is the header
	h.putU64(hdrSize, cfg.Size)
	min, max := cfg.Bounds.keys()
	h.putU16(hdrMinLen, len(min))
	h.putU16(hdrMaxLen, len(max))
	copy(h[hdrKeys:], min)
	copy(h[hdrKeys+t.maxKey:], max)
	leafFlags := t.leafKind
	if cfg.Versioned {
		h[offFlags] |= flagVersioned
		h.putU64(len(h)-hdrLegacyFromEnd, cfg.Legacy)
		t.mode.Store(modeVersioned | cfg.Legacy)
		if t.leafKind == flagExtents {
			leafFlags |= flagVersioned
		}
	}

	root, err := t.allocNodeLocked()
	if err != nil {
		return nil, err
	}
	img := t.mu.scratch
	initNode(img, kindTree, 0, flagValid|leafFlags|cfg.Bounds.flags(), min, max, 0)
	t.publish(root, img)
	h.putU64(hdrRoot, uint64(root))
	h.putU16(hdrHeight, 1)
	t.publish(t.headerPtr(), h)
	t.mu.dirty = false
	return t, nil
}

// Open returns the tree of the meganode formatted at base in mem.
func Open(mem []byte, region uint32, base uint64, ext Extents, opts Options) (*Tree, error) {
	opts.EnsureDefaults()
	if base+MinNodeSize > uint64(len(mem)) || base%8 != 0 || !atomicmem.Aligned(mem) {
		return nil, fmt.Errorf("blink: no meganode at offset %d of a %d-byte region", base, len(mem))
	}
	h := node(mem[base : base+MinNodeSize])
	if le.Uint32(h[hdrMagic:]) != headerMagic || h.kind() != kindHeader {
		return nil, fmt.Errorf("blink: no meganode header at offset %d: %w", base, ErrCorruption)
	}
	opts.NodeSize = 1 << h.u16(hdrNodeLog2)
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("blink: meganode header at %d: %w: %w", base, err, ErrCorruption)
	}
	size := h.u64(hdrSize)
	// The bounds are the header's own; only placement is validated here.
	cfg := Config{Region: region, Base: base, Size: size, Bounds: Full}
	if err := cfg.validate(mem, opts.NodeSize); err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrCorruption)
	}
	t := newTree(mem, region, base, ext, opts)
	t.size = size
	t.mu.Lock()
	defer t.mu.Unlock()
	copy(t.mu.hdr, t.nodeBytes(t.headerPtr()))
	if t.mu.hdr.u16(hdrGlobalLevel) == 0 {
		t.leafKind = flagExtents
	}
	if h := t.mu.hdr; h.flags()&flagVersioned != 0 {
		u := h.u64(len(h) - hdrLegacyFromEnd)
		if u < 1 || u > MaxVersion {
			return nil, fmt.Errorf("blink: meganode header at %d: legacy version %d: %w", base, u, ErrCorruption)
		}
		t.mode.Store(modeVersioned | u)
	}
	return t, nil
}

// NodeSize returns the tree's node size in bytes.
func (t *Tree) NodeSize() int { return t.nodeSize }

// MaxKeySize returns the largest key the tree accepts.
func (t *Tree) MaxKeySize() int { return t.maxKey }

// HeaderPtr returns the pointer to the meganode's header node.
func (t *Tree) HeaderPtr() Ptr { return t.headerPtr() }

func (t *Tree) headerPtr() Ptr { return MakePtr(t.region, t.base) }

// Root returns the local root and is safe for concurrent use.
func (t *Tree) Root() Ptr {
	return Ptr(atomicmem.LoadUint64(t.mem, int(t.base)+hdrRoot))
}

// local reports whether p points to a node inside this meganode.
func (t *Tree) local(p Ptr) bool {
	off := p.Offset()
	return p.Region() == t.region && off >= t.base && off < t.base+t.size && (off-t.base)%uint64(t.nodeSize) == 0
}

// nodeBytes returns the live memory of the node at p, which must be local.
func (t *Tree) nodeBytes(p Ptr) node {
	off := p.Offset()
	return node(t.mem[off : off+uint64(t.nodeSize) : off+uint64(t.nodeSize)])
}

// checkKey validates a user key.
func (t *Tree) checkKey(key []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if len(key) > t.maxKey {
		return fmt.Errorf("key of %d bytes, limit %d: %w", len(key), t.maxKey, ErrKeyTooLarge)
	}
	return nil
}

// publish writes img into the live node at p under the version protocol of
// docs/design.md §3: head and tail to the same odd value, the body with atomic
// stores, then tail and head to the next even value. Only words that differ
// are stored. REQUIRES: t.mu held.
func (t *Tree) publish(p Ptr, img node) {
	live := t.nodeBytes(p)
	n := len(live)
	if t.opts.BeforeWrite != nil {
		t.opts.BeforeWrite(p.Offset(), uint64(n))
	}
	v := live.headVersion()
	if v&1 != 0 {
		v++ // a node torn by a crash of an earlier incarnation: start even
	}
	atomicmem.StoreUint64(live, offHeadVersion, v+1)
	atomicmem.StoreUint64(live, n-tailSize, v+1)
	if hook := t.knobs.MidNodeWrite; hook != nil {
		half := n / 2
		atomicmem.StoreChanged(live[8:half], img[8:half])
		hook(p)
		atomicmem.StoreChanged(live[half:n-tailSize], img[half:n-tailSize])
	} else {
		atomicmem.StoreChanged(live[8:n-tailSize], img[8:n-tailSize])
	}
	atomicmem.StoreUint64(live, n-tailSize, v+2)
	atomicmem.StoreUint64(live, offHeadVersion, v+2)
}

// SetTestingKnobs installs test hooks. Call it before any concurrent use.
func (t *Tree) SetTestingKnobs(k TestingKnobs) { t.knobs = k }

// Usage describes how full a meganode is.
type Usage struct {
	Nodes    int // nodes in use, the header included
	Capacity int // nodes in the meganode
	Height   int // local height (1 = the root is a leaf)
	Level    int // level in the global tree
}

// Fill is the fraction of nodes in use.
func (u Usage) Fill() float64 { return float64(u.Nodes) / float64(u.Capacity) }

// Fill returns the fraction of the meganode's nodes in use, read from the
// live header without the writer's lock: a cheap estimate (it may mix two
// moments of a concurrent write) for deciding when to split.
func (t *Tree) Fill() float64 {
	w32 := atomicmem.LoadUint64(t.mem, int(t.base)+hdrCapacity)  // capacity | next fresh
	w40 := atomicmem.LoadUint64(t.mem, int(t.base)+hdrFreeCount) // free count | reserved
	capa, fresh, free := uint32(w32), uint32(w32>>32), uint32(w40)
	if capa == 0 || free > fresh {
		return 0
	}
	return float64(fresh-free) / float64(capa)
}

// Usage returns the meganode's node usage. It takes the writer's lock.
func (t *Tree) Usage() Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Usage{Nodes: t.nodesInUse(), Capacity: t.capacity(), Height: t.height(), Level: t.mu.hdr.u16(hdrGlobalLevel)}
}
