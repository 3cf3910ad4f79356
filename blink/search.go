package blink

import (
	"bytes"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cellstore/cell/internal/atomicmem"
)

// nodeBuf is an 8-byte aligned buffer for one node copy.
type nodeBuf [MaxNodeSize / 8]uint64

func (b *nodeBuf) node(size int) node {
	return node(unsafe.Slice((*byte)(unsafe.Pointer(b)), size))
}

// getBuf returns a node-sized copy buffer from the tree's pool (zeroing an
// 8 KiB stack array per search cost a quarter of a lookup); putBuf returns
// it. Steady state does not allocate.
func (t *Tree) getBuf() *nodeBuf {
	if b, ok := t.bufs.Get().(*nodeBuf); ok {
		return b
	}
	return new(nodeBuf)
}

func (t *Tree) putBuf(b *nodeBuf) { t.bufs.Put(b) }

// Result is the outcome of one search inside this meganode.
type Result struct {
	// Next is set when the search must continue in another meganode (a
	// right link or child pointer that leaves this one): continue at Next.
	Next Ptr
	// Found reports that a leaf entry with the key exists.
	Found bool
	// Leaf is the leaf node where the search ended.
	Leaf Ptr
	// Child is the entry's pointer in a leaf of an inner meganode: the
	// child meganode whose range covers the key (set even if !Found).
	Child Ptr
	// Extent, Len and CRC locate the key's record in a leaf meganode.
	Extent Ptr
	Len    int
	CRC    uint64
	// Version is the leaf's version when the search copied it: Value
	// reads the record only while the leaf still has it.
	Version uint64
	// Word is the entry's word in a leaf meganode (see GetWord): set when
	// Found, and when key has a placeholder (Found false then, and
	// Word.Placeholder() true: the lock of an absent key).
	Word Word
}

// retry accounts one restart or torn retry of a lock-free reader and
// reports whether the reader may go on. It yields the processor now and
// then, so a reader never spins against a writer it shares a CPU with.
func (t *Tree) retry(r Reason, attempts *int) error {
	switch r {
	case Torn:
		t.Stats.Torn.Add(1)
	case Invalid:
		t.Stats.Invalid.Add(1)
	case OutOfRange:
		t.Stats.OutOfRange.Add(1)
	default:
		t.Stats.Restarts.Add(1)
	}
	*attempts++
	if *attempts > t.opts.MaxRestarts {
		return fmt.Errorf("%d attempts, last %v: %w", *attempts, r, ErrRestart)
	}
	if *attempts%16 == 0 {
		runtime.Gosched()
	}
	return nil
}

// findLeaf copies the leaf covering key into buf, descending lock-free from
// the local root with Sagiv's search: follow right links while key >= max,
// restart from the root when a copy is invalid or does not cover key. It
// returns a non-nil Ptr if the search leaves the meganode there.
func (t *Tree) findLeaf(key []byte, buf node) (leaf, next Ptr, err error) {
	attempts := 0
restart:
	root := t.Root()
	p := root
	for {
		if !t.local(p) {
			if p.IsNil() {
				// The rightmost node's max is the meganode's; nothing
				// lies beyond it here.
				return 0, 0, fmt.Errorf("key %q: %w", key, ErrKeyOutOfRange)
			}
			return 0, p, nil
		}
		r := CopyNodeFor(buf, t.nodeBytes(p), key)
		switch r {
		case OK:
			if buf.level() == 0 {
				return p, 0, nil
			}
			p = buf.child(buf.childIndex(key))
			continue
		case AboveMax:
			p = buf.rightLink()
			continue
		case OutOfRange:
			if p == root && t.Root() == root {
				return 0, 0, fmt.Errorf("key %q: %w", key, ErrKeyOutOfRange)
			}
		case Corrupt:
			return 0, 0, fmt.Errorf("node %v: consistent copy does not decode: %w", p, ErrCorruption)
		}
		if err := t.retry(r, &attempts); err != nil {
			return 0, 0, err
		}
		if r != Torn {
			goto restart
		}
	}
}

// Search finds key in this meganode without taking the writer's lock. It
// reads every node in place and validates it by its version afterwards
// (inplace.go).
func (t *Tree) Search(key []byte) (Result, error) {
	if err := t.checkKey(key); err != nil {
		return Result{}, err
	}
	return t.searchInPlace(key)
}

// Contains reports whether key is in the tree, without taking the writer's
// lock or reading the record. A placeholder is not in the tree.
func (t *Tree) Contains(key []byte) (bool, error) {
	res, err := t.Search(key)
	return res.Found, err
}

// Get appends the value of key to dst and returns the extended slice,
// without taking the writer's lock. It copies nodes and the record with
// atomic loads, validates every copy, checks the record's CRC, and restarts
// when anything changed under it. With enough capacity in dst it does not
// allocate. A placeholder is ErrNotFound.
func (t *Tree) Get(key, dst []byte) ([]byte, error) {
	out, _, err := t.get(key, dst)
	return out, err
}

// get is Get and GetWord: the in-place search (inplace.go), then the
// record, validated by the leaf's version.
func (t *Tree) get(key, dst []byte) ([]byte, Word, error) {
	if err := t.checkKey(key); err != nil {
		return dst, 0, err
	}
	if t.leafKind != flagExtents {
		return dst, 0, fmt.Errorf("get in an inner meganode: %w", ErrKeyOutOfRange)
	}
	attempts := 0
	for {
		res, err := t.searchInPlace(key)
		if err != nil {
			return dst, 0, err
		}
		if !res.Next.IsNil() {
			return dst, 0, fmt.Errorf("key %q continues in meganode at %v: %w", key, res.Next, ErrKeyOutOfRange)
		}
		if !res.Found {
			return dst, 0, ErrNotFound
		}
		out, ok, err := t.loadRecord(dst, res.Extent, res.Len, key, recordCheck{leaf: res.Leaf, version: res.Version})
		if err != nil {
			return dst, 0, err
		}
		if ok {
			return out, res.Word, nil
		}
		// The record changed after we read the leaf: start again.
		t.Stats.CRC.Add(1)
		if err := t.retry(Torn, &attempts); err != nil {
			return dst, 0, err
		}
	}
}

// getCopied is get through validated node copies (findLeaf, CopyNodeFor)
// instead of the in-place search: the way every lock-free reader read
// before inplace.go, kept as the reference the in-place reader is tested
// and measured against (GetCopied in tests).
func (t *Tree) getCopied(key, dst []byte) ([]byte, Word, error) {
	if err := t.checkKey(key); err != nil {
		return dst, 0, err
	}
	nb := t.getBuf()
	defer t.putBuf(nb)
	buf := nb.node(t.nodeSize)
	attempts := 0
	for {
		leaf, next, err := t.findLeaf(key, buf)
		if err != nil {
			return dst, 0, err
		}
		if !next.IsNil() {
			return dst, 0, fmt.Errorf("key %q continues in meganode at %v: %w", key, next, ErrKeyOutOfRange)
		}
		if !buf.extents() {
			return dst, 0, fmt.Errorf("get in an inner meganode: %w", ErrKeyOutOfRange)
		}
		i, found := buf.lowerBound(key)
		if !found || buf.placeholder(i) {
			return dst, 0, ErrNotFound
		}
		ext, n, _ := buf.extent(i)
		out, ok, err := t.loadRecord(dst, ext, n, key, recordCheck{leaf: leaf, version: buf.headVersion()})
		if err != nil {
			return dst, 0, err
		}
		if ok {
			return out, t.wordOf(buf, i), nil
		}
		t.Stats.CRC.Add(1)
		if err := t.retry(Torn, &attempts); err != nil {
			return dst, 0, err
		}
	}
}

// Value appends to dst the value of the record that res, a Search of key
// in this leaf meganode, found, without searching again: the record is
// validated as Get validates its own (the leaf must still have the version
// the search copied it at), so a reader that searched first (a server-side
// search that then wants the value) pays one descent, not two. ok is false,
// with dst unchanged, when the leaf changed since the search: search again
// (or call Get). A res that found nothing is ErrNotFound.
func (t *Tree) Value(res Result, key, dst []byte) (out []byte, ok bool, err error) {
	if !res.Found || res.Extent.IsNil() {
		return dst, false, ErrNotFound
	}
	if !t.local(res.Leaf) {
		return dst, false, fmt.Errorf("leaf %v of a search result is not in this meganode: %w", res.Leaf, ErrCorruption)
	}
	return t.loadRecord(dst, res.Extent, res.Len, key, recordCheck{leaf: res.Leaf, version: res.Version})
}

// recordCheck says how a record copied lock-free is validated. With leaf
// set, the leaf the entry came from must still have version: the writer
// frees a record only after publishing the leaf without it (a version
// change) and writes a record before the leaf that points to it, so an
// unchanged leaf version after the copy means the record was not reused
// during it. This is cheaper than a CRC and serves readers in this
// process. Without leaf, the record's CRC-64 must equal crc (paper §2.3),
// for readers that cannot read the leaf's version again cheaply.
type recordCheck struct {
	leaf    Ptr
	version uint64
	crc     uint64
}

// loadRecord copies the record at ext (n bytes) into dst's spare capacity
// with atomic loads, validates it as check says and that it holds key, and
// appends the value to dst. ok is false when the record changed under the
// reader (re-read the leaf).
func (t *Tree) loadRecord(dst []byte, ext Ptr, n int, key []byte, check recordCheck) (out []byte, ok bool, err error) {
	off := ext.Offset()
	padded := uint64(roundUp8(n))
	if ext.Region() != t.region || n < extentHeader || off%8 != 0 || off+padded > uint64(len(t.mem)) {
		return dst, false, fmt.Errorf("extent %v of %d bytes outside region: %w", ext, n, ErrCorruption)
	}
	base := len(dst)
	dst = grow(dst, int(padded))
	rec := dst[base : base+int(padded)]
	atomicmem.LoadTo(rec, t.mem[off:off+padded])
	rec = rec[:n]
	if !check.leaf.IsNil() {
		if atomicmem.LoadUint64(t.mem, int(check.leaf.Offset())+offHeadVersion) != check.version {
			return dst[:base], false, nil
		}
	} else if ExtentCRC(rec) != check.crc {
		return dst[:base], false, nil
	}
	k, v, err := parseExtent(rec)
	if err != nil {
		return dst[:base], false, fmt.Errorf("extent %v: %w", ext, err)
	}
	if !bytes.Equal(k, key) {
		if check.leaf.IsNil() {
			return dst[:base], false, nil // a CRC collision with another record: re-read
		}
		return dst[:base], false, fmt.Errorf("extent %v holds key %q, leaf entry says %q: %w", ext, k, key, ErrCorruption)
	}
	copy(dst[base:], v)
	return dst[:base+len(v)], true, nil
}

func roundUp8(n int) int { return (n + 7) &^ 7 }

// grow returns b with room for n more bytes beyond len(b), keeping len(b).
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*len(b)+n)
	copy(nb, b)
	return nb
}
