package meganode

// This file fixes the byte layout of a region. The constants below are part
// of Cell's memory format AND of its wire format: region images are shipped
// as raft snapshots, mapped read-only by same-host clients and read one-sided
// by remote ones. A change here is a format change (bump formatVersion; the
// golden dump in testdata/ pins the bytes).
//
// All integers are little-endian at fixed offsets. A region is one file:
//
//	offset 0  +----------------------------+
//	          | region header (4 KiB)      |  see below
//	NodeOff   +----------------------------+  4 KiB, aligned up to NodeSize
//	          | meganode slot 0            |  MeganodeSize bytes each; slot i
//	          | meganode slot 1            |  starts at NodeOff+i*MeganodeSize,
//	          | ...                        |  a multiple of NodeSize; node 0 of
//	          | meganode slot Slots-1      |  a meganode is its blink header
//	ExtentOff +----------------------------+  end of node area, aligned to 4 KiB
//	          | control bytes              |  one per atom, zero padded to 4 KiB
//	HeapOff   +----------------------------+
//	          | extent heap                |  Atoms × AtomSize bytes of buddy
//	          |                            |  blocks holding extent records
//	          +----------------------------+  HeapOff + Atoms*AtomSize <= Size
//	          | unused tail (< 4 KiB+atom) |
//	Size      +----------------------------+  (hugetlbfs files are longer: the
//	                                           mapping rounds up to a huge page)
//
// Region header:
//
//	 0          8       12        16        20        24             32
//	 +----------+-------+---------+---------+---------+--------------+
//	 | root Ptr | magic | version | regionID| nodeSize| region size  |
//	 |   u64    | "CELR"|   u32   |   u32   |   u32   |     u64      |
//	 +----------+-------+---------+---------+---------+--------------+
//	 32 meganode size u64         40 slots u32        44 atom size u32
//	 48 node area offset u64      56 node area size u64
//	 64 extent area offset u64    72 extent area size u64
//	 80 heap offset u64           88 atom count u64
//	 96 flags u32 (version 3; zero before): bit 0 size-class extents
//	100 reserved, zero (4 bytes)  104 slab directory offset u64 (version 3
//	    with size classes; zero before)
//	112 reserved, zero (12 bytes) 124 CRC-32C (Castagnoli) of bytes [8, 124) u32
//	128 free list heads: 47 × u64, head k = region offset of the first free
//	    block of 2^k atoms, 0 when the list is empty
//	504 applied index u64: the raft log index of the last record applied to
//	    the region (0 before the first; version 1 headers hold 0 here)
//	512 slot bitmap: 3584 bytes; bit i%64 of word i/64 is set when slot i
//	    holds a meganode
//	4096 end of header
//
// Bytes [8, 128) are written once, when the region is formatted. The root
// pointer (word 0: the root meganode, meaningful in the region that
// holds it, docs/design.md §4), the free list heads, the applied index and
// the slot bitmap change while the region is live, always with 8-byte atomic
// stores.
//
// Version 2 added the applied index, in what was the head of free list 47
// (a list no region can use: 2^47 atoms of at least 16 bytes exceed
// MaxRegionSize, and version 1 decoders refused a non-zero head there).
// Version 1 regions are read as well, their applied index 0, and a
// region restored from a version 1 image is rewritten as version 2.
//
// Version 3 is a region made with size-class extents (Options.SizeClasses,
// slab.go): the flags word at 96 has bit 0 set and the word at 104 holds
// the offset of the slab directory, a block of the heap taken at format
// time. Regions without size classes are still written as version 2, byte
// for byte as before; a version 2 decoder refuses a version 3 region.
//
// Extent control byte (one per atom, at ExtentOff + atom index):
//
//	bit 7  head: the atom starts a block (0 for atoms inside a block)
//	bit 6  free: the block is on free list k
//	0-5    k: the block is 2^k atoms long, and its atom index is a multiple
//	       of 2^k (buddy alignment)
//
// A free block starts with two words: next and prev, region offsets of the
// neighbours on its free list (0 = none). An allocated block holds one
// extent record (blink/extent.go); bytes after the record are undefined.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
)

// Header offsets.
const (
	offRoot         = 0
	offMagic        = 8
	offVersion      = 12
	offRegionID     = 16
	offNodeSize     = 20
	offRegionSize   = 24
	offMeganodeSize = 32
	offSlots        = 40
	offAtomSize     = 44
	offNodeArea     = 48
	offNodeAreaLen  = 56
	offExtentArea   = 64
	offExtentLen    = 72
	offHeap         = 80
	offAtoms        = 88
	offReserved     = 96
	offFlags        = 96
	offSlabDir      = 104
	offHeaderCRC    = 124
	offFreeLists    = 128
	offApplied      = 504
	offSlotBitmap   = 512

	// staticEnd ends the part of the header written once at format time.
	staticEnd = 128
	// headerSize is the size of the region header.
	headerSize = 4096

	// maxBins is the number of free lists: blocks of 2^0 .. 2^46 atoms.
	maxBins = (offApplied - offFreeLists) / 8
	// MaxSlots is the largest number of meganode slots a region can have.
	MaxSlots = (headerSize - offSlotBitmap) * 8

	regionMagic   = 0x524c4543 // "CELR" little-endian
	formatVersion = 2
	// formatVersion1 is the format before the applied index, still read.
	formatVersion1 = 1
	// formatVersion3 is the format of a region with size-class extents.
	formatVersion3 = 3

	// flagSizeClasses (region header flags, version 3): small extents are
	// slots of slabs (slab.go).
	flagSizeClasses = 1 << 0
	knownFlags      = flagSizeClasses

	// pageAlign aligns the region size, the node area and the extent area.
	pageAlign = 4096
)

// Control byte bits.
const (
	ctrlHead    = 0x80
	ctrlFree    = 0x40
	ctrlLogMask = 0x3f
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Layout is where things are in a region. It is a pure function of the
// region size, meganode size, node size, atom size and slot count, and it is
// recorded in the region header.
type Layout struct {
	// Size is the region size in bytes (a multiple of 4 KiB).
	Size uint64
	// NodeSize is the size of a B-link node.
	NodeSize uint64
	// MeganodeSize is the size of one meganode slot.
	MeganodeSize uint64
	// Slots is the number of meganode slots.
	Slots uint64
	// NodeOff and NodeLen delimit the node area: Slots meganodes.
	NodeOff, NodeLen uint64
	// ExtentOff and ExtentLen delimit the extent area: control bytes,
	// padding, then the heap.
	ExtentOff, ExtentLen uint64
	// HeapOff is the offset of the first atom of the heap.
	HeapOff uint64
	// AtomSize is the smallest extent block.
	AtomSize uint64
	// Atoms is the number of atoms in the heap.
	Atoms uint64
}

// SlotBase returns the offset of meganode slot i. REQUIRES: i < Slots.
func (l Layout) SlotBase(i int) uint64 { return l.NodeOff + uint64(i)*l.MeganodeSize }

// maxLog returns the largest k such that a block of 2^k atoms fits.
func (l Layout) maxLog() int { return bits.Len64(l.Atoms) - 1 }

// MaxBlock returns the largest extent block in bytes: the largest power of
// two atoms that fits in the heap.
func (l Layout) MaxBlock() uint64 { return l.AtomSize << l.maxLog() }

func isPow2(v uint64) bool { return v != 0 && v&(v-1) == 0 }

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// computeLayout places the header, node area and extent area in a region.
// It never panics or overflows, whatever its arguments (the header decoder
// feeds it untrusted values).
func computeLayout(size, megaSize, nodeSize, atom, slots uint64) (Layout, error) {
	switch {
	case size == 0 || size%pageAlign != 0 || size > MaxRegionSize:
		return Layout{}, fmt.Errorf("meganode: region size %d is not a multiple of %d in (0, %d]", size, pageAlign, uint64(MaxRegionSize))
	case !isPow2(nodeSize) || nodeSize < blink.MinNodeSize || nodeSize > blink.MaxNodeSize:
		return Layout{}, fmt.Errorf("meganode: node size %d is not a power of two in [%d, %d]", nodeSize, blink.MinNodeSize, blink.MaxNodeSize)
	case megaSize%nodeSize != 0 || megaSize/nodeSize < 8 || megaSize > size:
		return Layout{}, fmt.Errorf("meganode: meganode size %d is not a multiple of node size %d holding at least 8 nodes within the region", megaSize, nodeSize)
	case !isPow2(atom) || atom < MinAtomSize || atom > MaxAtomSize:
		return Layout{}, fmt.Errorf("meganode: atom size %d is not a power of two in [%d, %d]", atom, MinAtomSize, MaxAtomSize)
	case slots < 1 || slots > MaxSlots:
		return Layout{}, fmt.Errorf("meganode: %d meganode slots, want 1..%d", slots, MaxSlots)
	}
	l := Layout{Size: size, NodeSize: nodeSize, MeganodeSize: megaSize, Slots: slots, AtomSize: atom}
	l.NodeOff = alignUp(headerSize, max(pageAlign, nodeSize))
	l.NodeLen = slots * megaSize // <= 2^15 * 2^40: no overflow
	if l.NodeOff+l.NodeLen > size {
		return Layout{}, fmt.Errorf("meganode: %d meganodes of %d bytes do not fit in a region of %d bytes", slots, megaSize, size)
	}
	l.ExtentOff = alignUp(l.NodeOff+l.NodeLen, pageAlign)
	if l.ExtentOff >= size {
		return Layout{}, fmt.Errorf("meganode: no room for extents in a region of %d bytes after %d meganodes of %d bytes", size, slots, megaSize)
	}
	l.ExtentLen = size - l.ExtentOff
	// The most atoms n such that n control bytes padded to a page, plus n
	// atoms, fit in the extent area.
	n := l.ExtentLen / (atom + 1)
	for n > 0 && alignUp(n, pageAlign)+n*atom > l.ExtentLen {
		n--
	}
	if n == 0 {
		return Layout{}, fmt.Errorf("meganode: extent area of %d bytes holds no atom of %d bytes", l.ExtentLen, atom)
	}
	l.Atoms = n
	l.HeapOff = l.ExtentOff + alignUp(n, pageAlign)
	return l, nil
}

// header is the decoded static part of a region header.
type header struct {
	Layout
	ID uint32
	// version is the format version decoded (0 in a header to be
	// written: encode writes formatVersion, or formatVersion3 when flags
	// are set).
	version uint32
	// flags are the region header flags (version 3; 0 before).
	flags uint32
	// slabDir is the offset of the slab directory (flagSizeClasses).
	slabDir uint64
}

// sizeClasses reports whether the region has size-class extents.
func (h *header) sizeClasses() bool { return h.flags&flagSizeClasses != 0 }

// encode writes the static part of the header, bytes [8, 128), into b (at
// least 128 bytes) with plain stores, CRC included. It leaves the root word
// and everything from offset 128 alone.
func (h *header) encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[offMagic:], regionMagic)
	v := h.version
	if v == 0 {
		v = formatVersion
		if h.flags != 0 {
			v = formatVersion3
		}
	}
	le.PutUint32(b[offVersion:], v)
	le.PutUint32(b[offRegionID:], h.ID)
	le.PutUint32(b[offNodeSize:], uint32(h.NodeSize))
	le.PutUint64(b[offRegionSize:], h.Size)
	le.PutUint64(b[offMeganodeSize:], h.MeganodeSize)
	le.PutUint32(b[offSlots:], uint32(h.Slots))
	le.PutUint32(b[offAtomSize:], uint32(h.AtomSize))
	le.PutUint64(b[offNodeArea:], h.NodeOff)
	le.PutUint64(b[offNodeAreaLen:], h.NodeLen)
	le.PutUint64(b[offExtentArea:], h.ExtentOff)
	le.PutUint64(b[offExtentLen:], h.ExtentLen)
	le.PutUint64(b[offHeap:], h.HeapOff)
	le.PutUint64(b[offAtoms:], h.Atoms)
	clear(b[offReserved:offHeaderCRC])
	if v == formatVersion3 {
		le.PutUint32(b[offFlags:], h.flags)
		le.PutUint64(b[offSlabDir:], h.slabDir)
	}
	le.PutUint32(b[offHeaderCRC:], crc32.Checksum(b[offMagic:offHeaderCRC], castagnoli))
}

// store writes the static part of the header into live region memory with
// 8-byte atomic stores.
func (h *header) store(mem []byte) {
	buf := atomicmem.Alloc(staticEnd)
	h.encode(buf)
	atomicmem.Store(mem[offMagic:staticEnd], buf[offMagic:staticEnd])
}

// decodeHeader decodes and validates the header at the start of a region
// image b (at least the header page). Errors wrap ErrCorruption. It never
// panics, whatever b holds.
func decodeHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("meganode: region of %d bytes is smaller than its %d-byte header: %w", len(b), headerSize, ErrCorruption)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[offMagic:]); m != regionMagic {
		return header{}, fmt.Errorf("meganode: bad region magic %#08x: %w", m, ErrCorruption)
	}
	if v := le.Uint32(b[offVersion:]); v != formatVersion && v != formatVersion1 && v != formatVersion3 {
		return header{}, fmt.Errorf("meganode: region format version %d, want %d to %d: %w", v, formatVersion1, formatVersion3, ErrCorruption)
	}
	if got, want := le.Uint32(b[offHeaderCRC:]), crc32.Checksum(b[offMagic:offHeaderCRC], castagnoli); got != want {
		return header{}, fmt.Errorf("meganode: region header CRC %#08x, computed %#08x: %w", got, want, ErrCorruption)
	}
	h := header{version: le.Uint32(b[offVersion:])}
	reserved := b[offReserved:offHeaderCRC]
	if h.version == formatVersion3 {
		h.flags = le.Uint32(b[offFlags:])
		h.slabDir = le.Uint64(b[offSlabDir:])
		if h.flags == 0 || h.flags&^knownFlags != 0 {
			return header{}, fmt.Errorf("meganode: region format version 3 with flags %#x: %w", h.flags, ErrCorruption)
		}
		reserved = append(bytes.Clone(b[offFlags+4:offSlabDir]), b[offSlabDir+8:offHeaderCRC]...)
	}
	for _, c := range reserved {
		if c != 0 {
			return header{}, fmt.Errorf("meganode: reserved region header bytes are not zero: %w", ErrCorruption)
		}
	}
	h.ID = le.Uint32(b[offRegionID:])
	if h.ID > blink.MaxRegionID {
		return header{}, fmt.Errorf("meganode: region ID %d out of range: %w", h.ID, ErrCorruption)
	}
	l, err := computeLayout(le.Uint64(b[offRegionSize:]), le.Uint64(b[offMeganodeSize:]),
		uint64(le.Uint32(b[offNodeSize:])), uint64(le.Uint32(b[offAtomSize:])), uint64(le.Uint32(b[offSlots:])))
	if err != nil {
		return header{}, fmt.Errorf("meganode: region header: %w: %w", err, ErrCorruption)
	}
	stored := Layout{
		Size: l.Size, NodeSize: l.NodeSize, MeganodeSize: l.MeganodeSize, Slots: l.Slots, AtomSize: l.AtomSize,
		NodeOff:   le.Uint64(b[offNodeArea:]),
		NodeLen:   le.Uint64(b[offNodeAreaLen:]),
		ExtentOff: le.Uint64(b[offExtentArea:]),
		ExtentLen: le.Uint64(b[offExtentLen:]),
		HeapOff:   le.Uint64(b[offHeap:]),
		Atoms:     le.Uint64(b[offAtoms:]),
	}
	if stored != l {
		return header{}, fmt.Errorf("meganode: region header layout %+v, computed %+v: %w", stored, l, ErrCorruption)
	}
	h.Layout = l
	if h.sizeClasses() {
		if d := h.slabDir; d < l.HeapOff || d >= l.HeapOff+l.Atoms*l.AtomSize || (d-l.HeapOff)%l.AtomSize != 0 {
			return header{}, fmt.Errorf("meganode: slab directory %#x is not an atom of the heap: %w", d, ErrCorruption)
		}
	} else if h.slabDir != 0 {
		return header{}, fmt.Errorf("meganode: slab directory %#x without size classes: %w", h.slabDir, ErrCorruption)
	}
	if err := checkDynamicHeader(b, l); err != nil {
		return header{}, err
	}
	return h, nil
}

// checkDynamicHeader checks what can be checked of the live part of a
// header without walking the heap: slot bits beyond Slots are clear, and
// free list heads are zero or point at an atom of the heap (and are zero
// for bins that cannot hold a block). Errors wrap ErrCorruption.
func checkDynamicHeader(b []byte, l Layout) error {
	le := binary.LittleEndian
	for i := l.Slots; i < MaxSlots; i++ {
		if b[offSlotBitmap+i/8]&(1<<(i%8)) != 0 {
			return fmt.Errorf("meganode: slot %d of %d marked in use: %w", i, l.Slots, ErrCorruption)
		}
	}
	heapEnd := l.HeapOff + l.Atoms*l.AtomSize
	for k := range maxBins {
		off := le.Uint64(b[offFreeLists+8*k:])
		if off == 0 {
			continue
		}
		if k > l.maxLog() || off < l.HeapOff || off >= heapEnd || (off-l.HeapOff)%(l.AtomSize<<k) != 0 {
			return fmt.Errorf("meganode: free list %d head %#x is not a block of the heap [%#x, %#x): %w", k, off, l.HeapOff, heapEnd, ErrCorruption)
		}
	}
	return nil
}
