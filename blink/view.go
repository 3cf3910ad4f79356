package blink

import (
	"bytes"
	"fmt"
)

// View is a read-only view over the bytes of a node copy that CheckCopy (or
// CopyNode) accepted. It is what one-sided readers outside this package use
// to traverse a meganode with the same logic as the server (paper §3:
// "client-side search requires that the client and server both have logic
// to traverse the tree, this code can be reused"). Methods never allocate;
// on bytes CheckCopy did not accept their results are undefined (but they
// do not panic on accepted copies).
type View []byte

func (v View) n() node { return node(v) }

// Level is the node's local level, 0 for leaves.
func (v View) Level() int { return v.n().level() }

// Count is the number of entries.
func (v View) Count() int { return v.n().count() }

// Extents reports whether entries point to extent records (a leaf of a
// leaf meganode) rather than to nodes or meganodes.
func (v View) Extents() bool { return v.n().extents() }

// RightLink is the node's right sibling (or, at a meganode boundary, a node
// of the next meganode); nil at the right end of the key space.
func (v View) RightLink() Ptr { return v.n().rightLink() }

// Version is the node's (even) version at the time of the copy.
func (v View) Version() uint64 { return v.n().headVersion() }

// Min returns the node's min key; inf means -inf.
func (v View) Min() (key []byte, inf bool) { return v.n().minKey(), v.n().minInf() }

// Max returns the node's max key; inf means +inf.
func (v View) Max() (key []byte, inf bool) { return v.n().maxKey(), v.n().maxInf() }

// Key returns entry i's key.
func (v View) Key(i int) []byte { return v.n().key(i) }

// Find returns the index of the first entry with a key >= key and whether
// it equals key.
func (v View) Find(key []byte) (int, bool) { return v.n().lowerBound(key) }

// Child returns entry i's pointer (inner nodes and leaves of inner
// meganodes).
func (v View) Child(i int) Ptr { return v.n().child(i) }

// Extent returns entry i's record pointer, length and CRC (extent leaves).
// A placeholder's are zero: it has no record.
func (v View) Extent(i int) (Ptr, int, uint64) { return v.n().extent(i) }

// Versioned reports a versioned extent leaf, whose entries carry words.
func (v View) Versioned() bool { return v.n().extents() && v.n().versioned() }

// Word returns entry i's word in a versioned leaf, 0 in a legacy leaf (a
// reader of a region in versioned mode substitutes MakeWord(U, false,
// false), U from the region's metadata) and in pointer nodes.
func (v View) Word(i int) Word { return v.n().rawWord(i) }

// Placeholder reports whether entry i is a placeholder: an entry without
// a record (Word(i).Placeholder()), which reads as absent.
func (v View) Placeholder(i int) bool { return v.n().placeholder(i) }

// Step is one move of Sagiv's search for key from this node, the shared
// traversal rule: Covers says whether the node covers key (OK), key is
// below its min (OutOfRange: restart), or at/above its max (AboveMax:
// continue at Next, the right link). For an inner node that covers key,
// Next is the child to descend to. For a leaf that covers key, Next is nil
// and Index/Found locate the key's entry: in an extent leaf, the first
// entry >= key (Found false for a placeholder, which reads as absent:
// Index then names it, and View.Word(Index) is its word); in a leaf of an
// inner meganode, the entry whose child
// meganode covers key (the last entry <= key; Found when it equals key).
type Step struct {
	Covers Reason
	Next   Ptr
	Index  int
	Found  bool
}

// StepFor computes the search step for key from this node.
func (v View) StepFor(key []byte) Step {
	n := v.n()
	if r := Covers(v, key); r != OK {
		if r == AboveMax {
			return Step{Covers: r, Next: n.rightLink()}
		}
		return Step{Covers: r}
	}
	if n.level() > 0 {
		if n.count() == 0 {
			return Step{Covers: Corrupt}
		}
		i := n.childIndex(key)
		return Step{Covers: OK, Next: n.child(i), Index: i}
	}
	if !n.extents() {
		if n.count() == 0 {
			return Step{Covers: Corrupt}
		}
		i := n.childIndex(key)
		return Step{Covers: OK, Index: i, Found: bytes.Equal(n.key(i), key)}
	}
	i, found := n.lowerBound(key)
	return Step{Covers: OK, Index: i, Found: found && !n.placeholder(i)}
}

// String describes the node (DescribeNode).
func (v View) String() string { return DescribeNode(v) }

// Header is the decoded meganode header (node 0 of a meganode).
type Header struct {
	Version  uint64
	Level    int // level of the meganode in the global tree, 0 = leaf meganode
	Height   int // local height, 1 = the root is a leaf
	Root     Ptr // local root node
	NodeSize int
	Capacity int // nodes in the meganode
	InUse    int // nodes allocated, header included
	Size     uint64
	Bounds   Bounds
	// Versioned is the meganode's mode (word.go); Legacy its legacy
	// version U in versioned mode, 0 in legacy mode.
	Versioned bool
	Legacy    uint64
}

// DecodeHeader decodes a copy of a meganode header made with 8-byte atomic
// loads (atomicmem.Load / a one-sided read of NodeSize bytes). It returns
// Torn for a copy that raced with the writer and Corrupt for bytes that are
// not a header. Key slices in Bounds alias b. It never panics.
func DecodeHeader(b []byte) (Header, Reason) {
	n := node(b)
	if len(n) < MinNodeSize || len(n) > MaxNodeSize || len(n)&(len(n)-1) != 0 {
		return Header{}, Corrupt
	}
	if v := n.headVersion(); v != n.tailVersion() || v&1 != 0 {
		return Header{}, Torn
	}
	if le.Uint32(n[hdrMagic:]) != headerMagic || n.kind() != kindHeader {
		return Header{}, Corrupt
	}
	if !n.valid() {
		return Header{}, Invalid
	}
	log2 := n.u16(hdrNodeLog2)
	if log2 > 13 || 1<<log2 != len(n) {
		return Header{}, Corrupt
	}
	mk := MaxKeySize(len(n))
	ml, xl := n.u16(hdrMinLen), n.u16(hdrMaxLen)
	if ml > mk || xl > mk {
		return Header{}, Corrupt
	}
	h := Header{
		Version:  n.headVersion(),
		Level:    n.u16(hdrGlobalLevel),
		Height:   n.u16(hdrHeight),
		Root:     Ptr(n.u64(hdrRoot)),
		NodeSize: len(n),
		Capacity: int(le.Uint32(n[hdrCapacity:])),
		InUse:    int(le.Uint32(n[hdrNextFresh:])) - int(le.Uint32(n[hdrFreeCount:])),
		Size:     n.u64(hdrSize),
		Bounds: Bounds{
			Min: n[hdrKeys : hdrKeys+ml], Max: n[hdrKeys+mk : hdrKeys+mk+xl],
			MinInf: n.flags()&flagMinInf != 0, MaxInf: n.flags()&flagMaxInf != 0,
		},
	}
	if n.flags()&flagVersioned != 0 {
		h.Versioned, h.Legacy = true, n.u64(len(n)-hdrLegacyFromEnd)
		if h.Legacy < 1 || h.Legacy > MaxVersion {
			return Header{}, Corrupt
		}
	}
	return h, OK
}

// String formats the header for people.
func (h Header) String() string {
	s := fmt.Sprintf("meganode level %d height %d root %v nodes %d/%d", h.Level, h.Height, h.Root, h.InUse, h.Capacity)
	if h.Versioned {
		s += fmt.Sprintf(" versioned (legacy version %d)", h.Legacy)
	}
	return s
}

// Header returns the tree's current header, read lock-free.
func (t *Tree) Header() (Header, error) {
	nb := t.getBuf()
	defer t.putBuf(nb)
	buf := nb.node(t.nodeSize)
	attempts := 0
	for {
		copyNodeRaw(buf, t.nodeBytes(t.headerPtr()))
		h, r := DecodeHeader(buf)
		if r == OK {
			// Bounds alias the pooled buffer: copy them out.
			h.Bounds.Min = append([]byte(nil), h.Bounds.Min...)
			h.Bounds.Max = append([]byte(nil), h.Bounds.Max...)
			return h, nil
		}
		if r != Torn {
			return Header{}, fmt.Errorf("meganode header: %v: %w", r, ErrCorruption)
		}
		if err := t.retry(r, &attempts); err != nil {
			return Header{}, err
		}
	}
}
