package blink

import (
	"bytes"
	"fmt"
)

// Meganode split primitives (paper §2.2, docs/design.md §4; the protocol is in
// doc.go, "Meganode split"). The layer above sequences them:
//
//	X.SplitKey → X.Freeze(sep) → Y.BeginCopy(X.Right()) →
//	CopyRight(X, Y, ...)* → X.LinkRight(Y.Root()) → X.FreeRight(...)* →
//	X.Thaw(), Y.Thaw()
//
// and then inserts the separator into the parent meganode. Every step
// takes the tree's writer lock for a bounded time only; writes to the left
// half go on between them.

// RecordRef locates a key-value record in the region's extent area, as a
// leaf entry of a leaf meganode holds it.
type RecordRef struct {
	Extent Ptr
	Len    int
	CRC    uint64
}

// Entry is one leaf entry of a meganode's local tree: in a leaf meganode a
// record (Ref), in an inner meganode a child meganode (Child, its header).
// An entry copied to another region carries its value instead of a Ref
// (FrozenRecords; AppendEntries then writes a new record).
//
// Word is the entry's word (GetWord's: a legacy leaf's entries in a
// versioned tree carry MakeWord(U, false, false)), 0 in legacy mode and
// in inner meganodes. Every copy carries it unchanged. A placeholder
// (Word.Placeholder()) has neither Ref nor Value.
type Entry struct {
	Key   []byte
	Child Ptr
	Ref   RecordRef
	Value []byte
	Word  Word
}

// splitRole is the tree's part in a meganode split.
type splitRole uint8

const (
	splitNone   splitRole = iota
	splitSource           // X: keys >= sep are frozen, then moved out
	splitTarget           // Y: a new meganode being filled, frozen whole
)

// splitState is the tree's split in progress. Guarded by t.mu. It lives in
// memory only: recovery of an interrupted split works from the split
// records of the layer above.
type splitState struct {
	role   splitRole
	sep    []byte // source: the split key (owned)
	linked bool   // source: LinkRight published the boundary
	// remote: the source linked to a meganode of another region, which
	// holds copies of the right half's records: FreeRight frees them.
	remote bool
	// heads are, per local level, the next node of the detached right
	// half to free (nil when the level is done); set by LinkRight.
	heads []Ptr
}

// frozenLocked reports whether writes to key must wait for the split.
// REQUIRES: t.mu held.
func (t *Tree) frozenLocked(key []byte) bool {
	s := &t.mu.split
	return s.role == splitTarget || s.role == splitSource && bytes.Compare(key, s.sep) >= 0
}

func (t *Tree) errFrozen(key []byte) error {
	return fmt.Errorf("key %q is in a range a meganode split moves: %w", key, ErrFrozen)
}

// Right returns the meganode's right link: the node of the next meganode
// of the same global level where every level of this local tree continues
// (the right link of the rightmost node of each level), nil at the right
// end of the key space.
func (t *Tree) Right() Ptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nodeBytes(Ptr(t.mu.hdr.u64(hdrRoot))).rightLink()
}

// NeedsSplit reports whether an insert of a new key would fail with
// ErrNeedsSplit now (the fill threshold, or the nodes left for a cascade),
// or a write was refused since the last split because rewriting a legacy
// leaf versioned needed nodes the meganode did not have.
func (t *Tree) NeedsSplit() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.roomForInsertLocked() != nil || t.mu.upgradeRefused
}

// SplitKey chooses where to split the meganode: the middle entry, by
// position, of the highest local level holding at least splitFanout
// entries (subtrees of one level are within a small factor of each other
// in size, so the halves come out close to even), if the boundary at that
// key can be published (LinkRight's fit rules); else the middle entry key
// of the topmost node with two entries or more, which always can. An
// entry key of an inner node is a node boundary at every level below it,
// so the right half is a set of whole subtrees and leaves. It changes
// nothing. A tree whose keys all sit in one leaf cannot split
// (ErrSplitTooSmall); one already splitting returns ErrSplitState.
func (t *Tree) SplitKey() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.split.role != splitNone {
		return nil, fmt.Errorf("split key: %w", ErrSplitState)
	}
	root := Ptr(t.mu.hdr.u64(hdrRoot))
	var top []byte // the fallback: the middle of the topmost node with two entries
	for p, lv := root, 0; lv < t.height(); lv++ {
		n := t.nodeBytes(p)
		switch c := n.count(); {
		case n.level() == 0:
			return nil, fmt.Errorf("%d keys in a single leaf: %w", c, ErrSplitTooSmall)
		case c == 0:
			return nil, fmt.Errorf("inner node %v without entries: %w", p, ErrCorruption)
		case c >= 2:
			top = bytes.Clone(n.key(c / 2))
		}
		if top != nil {
			break
		}
		p = n.child(0)
	}
	if top == nil {
		return nil, fmt.Errorf("no leaf below the root within the height: %w", ErrCorruption)
	}
	// The finer choice: walk the levels top down, each from its leftmost
	// node, to the first with splitFanout entries.
	for first := root; ; {
		n := t.nodeBytes(first)
		if n.level() == 0 {
			break
		}
		total := 0
		for q := first; t.local(q); q = t.nodeBytes(q).rightLink() {
			total += t.nodeBytes(q).count()
		}
		if total >= splitFanout {
			mid := total / 2
			for q := first; t.local(q); q = t.nodeBytes(q).rightLink() {
				qn := t.nodeBytes(q)
				if mid < qn.count() {
					key := bytes.Clone(qn.key(mid))
					if _, err := t.linkPassLocked(key, 0, false); err == nil {
						return key, nil
					}
					break
				}
				mid -= qn.count()
			}
			break
		}
		first = n.child(0)
	}
	return top, nil
}

// splitFanout is how many subtrees SplitKey wants to choose the middle of:
// enough for halves within a few percent of each other, from a level high
// enough to walk in well under a millisecond.
const splitFanout = 256

// Freeze starts a split of the meganode at sep: from now on Put, Delete
// and InsertChild of keys >= sep return ErrFrozen, writes below sep go on,
// and reads never block. sep must lie strictly inside the meganode's range
// and be a leaf boundary (the leaf covering it starts at sep), as a key
// from SplitKey is. Writes below sep cannot take the boundary away: they
// only create nodes whose max is at most sep.
func (t *Tree) Freeze(sep []byte) error {
	if err := t.checkKey(sep); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.split.role != splitNone {
		return fmt.Errorf("freeze at %q: %w", sep, ErrSplitState)
	}
	rn := t.nodeBytes(Ptr(t.mu.hdr.u64(hdrRoot)))
	if !rn.aboveMin(sep) || !rn.minInf() && bytes.Equal(rn.minKey(), sep) || !rn.belowMax(sep) {
		return fmt.Errorf("split key %q not strictly inside the meganode's range: %w", sep, ErrKeyOutOfRange)
	}
	leaf, err := t.descendLocked(sep)
	if err != nil {
		return err
	}
	if ln := t.nodeBytes(leaf); ln.minInf() || !bytes.Equal(ln.minKey(), sep) {
		return fmt.Errorf("split key %q is not a leaf boundary (leaf %v starts at %q): %w", sep, leaf, ln.minKey(), ErrSplitState)
	}
	t.mu.split = splitState{role: splitSource, sep: bytes.Clone(sep)}
	return nil
}

// BeginCopy makes this meganode, new and empty, the target of a split: it
// is frozen whole until Thaw (only AppendEntries writes to it), and its
// right link is set to right, the source's Right(), so that its levels go
// on where the source's did.
func (t *Tree) BeginCopy(right Ptr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.split.role != splitNone {
		return fmt.Errorf("begin copy: %w", ErrSplitState)
	}
	if t.local(right) {
		return fmt.Errorf("right link %v inside the meganode: %w", right, ErrSplitState)
	}
	root := Ptr(t.mu.hdr.u64(hdrRoot))
	rn := t.nodeBytes(root)
	if t.height() != 1 || rn.count() != 0 {
		return fmt.Errorf("copy target holds %d entries at height %d: %w", rn.count(), t.height(), ErrSplitState)
	}
	img := t.mu.scratch
	copy(img, rn)
	img.putU64(offRightLink, uint64(right))
	t.publish(root, img)
	t.mu.split = splitState{role: splitTarget}
	return nil
}

// FrozenEntries appends to buf the leaf entries of the frozen right half
// from key from on, leaf by leaf along right links, for at most maxLeaves
// leaves, and returns them with the key to continue from (the max of the
// last leaf read; nil when the right half is done). from is the split key
// or a key FrozenEntries returned, hence a leaf boundary. The entries' keys
// are copies. It takes the writer's lock for one batch.
func (t *Tree) FrozenEntries(from []byte, maxLeaves int, buf []Entry) (ents []Entry, next []byte, err error) {
	return t.frozenEntries(from, maxLeaves, 0, false, buf)
}

// FrozenRecords is FrozenEntries for a copy into another region: a leaf
// meganode's entries carry copies of their values (Value, Ref zero), read
// from the records and checked against their CRCs. A batch ends after the
// leaf that brings its keys and values to maxBytes or more (a leaf at
// least), or after maxLeaves leaves.
func (t *Tree) FrozenRecords(from []byte, maxLeaves, maxBytes int, buf []Entry) (ents []Entry, next []byte, err error) {
	return t.frozenEntries(from, maxLeaves, maxBytes, true, buf)
}

func (t *Tree) frozenEntries(from []byte, maxLeaves, maxBytes int, values bool, buf []Entry) (ents []Entry, next []byte, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.mu.split
	if s.role != splitSource || s.linked || bytes.Compare(from, s.sep) < 0 {
		return buf, nil, fmt.Errorf("frozen entries from %q: %w", from, ErrSplitState)
	}
	leaf, err := t.descendLocked(from)
	if err != nil {
		return buf, nil, err
	}
	ents = buf
	var arena []byte
	for n := 1; ; n++ {
		ln := t.nodeBytes(leaf)
		i, _ := ln.lowerBound(from)
		for ; i < ln.count(); i++ {
			k := ln.key(i)
			start := len(arena)
			arena = append(arena, k...)
			e := Entry{Key: arena[start:len(arena):len(arena)]}
			if ln.extents() {
				e.Word = t.wordOf(ln, i)
			}
			switch {
			case !ln.extents():
				e.Child = ln.child(i)
			case e.Word.Placeholder():
			case values:
				ext, l, crc := ln.extent(i)
				if e.Value, arena, err = t.copyValueLocked(arena, ext, l, crc, k); err != nil {
					return buf, nil, err
				}
			default:
				ext, l, crc := ln.extent(i)
				e.Ref = RecordRef{Extent: ext, Len: l, CRC: crc}
			}
			ents = append(ents, e)
		}
		rl := ln.rightLink()
		if ln.maxInf() || !t.local(rl) {
			return ents, nil, nil
		}
		if n >= maxLeaves || maxBytes > 0 && len(arena) >= maxBytes {
			return ents, bytes.Clone(ln.maxKey()), nil
		}
		leaf = rl
	}
}

// copyValueLocked appends the value of the record at ext (l bytes, CRC
// crc, key key) to arena and returns it (aliasing arena's new tail).
// REQUIRES: t.mu held (the record cannot change under the writer's lock,
// so a record that does not check out is corrupt).
func (t *Tree) copyValueLocked(arena []byte, ext Ptr, l int, crc uint64, key []byte) (value, grown []byte, err error) {
	start := len(arena)
	grown, ok, err := t.loadRecord(arena, ext, l, key, recordCheck{crc: crc})
	if err == nil && !ok {
		err = fmt.Errorf("record %v for %q does not match its leaf entry: %w", ext, key, ErrCorruption)
	}
	if err != nil {
		return nil, arena, err
	}
	return grown[start:len(grown):len(grown)], grown, nil
}

// AppendEntries inserts entries into the target of a split (BeginCopy),
// past its freeze. A leaf meganode takes the records by reference: the
// entries share them with the source, and ownership moves here when the
// source's right half is freed (the records themselves are never freed by
// a local split). An entry without a Ref (a copy from another region,
// FrozenRecords) gets a new record here holding its Value. Entries
// appended in key order fill nodes completely (see insertLocked's pack).
// It fails with ErrNeedsSplit when the meganode runs out of nodes, and
// with ErrSplitState on a key already present.
//
// Words: in versioned mode every entry of a leaf meganode must carry a
// word (ErrNeedsWord for 0, or for version 0 on an entry that is not a
// placeholder) and the entries are written into versioned leaves with
// their words; a placeholder entry is appended as a placeholder. In
// legacy mode, and for child entries, words must be 0 (ErrNotVersioned).
// The caller supplies the words: the source's FrozenEntries and
// FrozenRecords give them.
func (t *Tree) AppendEntries(ents []Entry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.split.role != splitTarget {
		return fmt.Errorf("append entries: %w", ErrSplitState)
	}
	defer t.flushHeaderLocked()
	versioned := t.versionedLocked()
	for _, e := range ents {
		if err := t.checkKey(e.Key); err != nil {
			return err
		}
		switch {
		case e.Word != 0 && (!versioned || t.leafKind != flagExtents):
			return fmt.Errorf("append of %q with word %v: %w", e.Key, e.Word, ErrNotVersioned)
		case versioned && t.leafKind == flagExtents && (e.Word == 0 || e.Word.Version() == 0 && !e.Word.Placeholder()):
			return fmt.Errorf("append of %q with word %v: %w", e.Key, e.Word, ErrNeedsWord)
		}
		if versioned && t.leafKind == flagExtents {
			// A target formatted legacy and switched since: rewrite the
			// leaf first (no other leaf of it can be legacy then).
			leaf, err := t.descendLocked(e.Key)
			if err != nil {
				return err
			}
			if ln := t.nodeBytes(leaf); t.needsUpgradeLocked(ln) {
				if err := t.roomForUpgradeLocked(ln, t.height()+2); err != nil {
					return err
				}
				if _, err := t.upgradeLocked(leaf, e.Key); err != nil {
					return err
				}
			}
		}
		var payload []byte
		if e.Word.Placeholder() {
			payload = t.mu.payload[:extentPayload]
			clear(payload)
		} else if t.leafKind == flagExtents && e.Ref.Extent.IsNil() {
			if len(e.Value) > t.opts.MaxValueSize {
				return fmt.Errorf("value of %d bytes for %q, limit %d: %w", len(e.Value), e.Key, t.opts.MaxValueSize, ErrValueTooLarge)
			}
			if t.nodesInUse()+t.height()+1 > t.capacity() {
				return fmt.Errorf("all %d nodes in use: %w", t.capacity(), ErrNeedsSplit)
			}
			leaf, err := t.descendLocked(e.Key)
			if err != nil {
				return err
			}
			if _, found := t.nodeBytes(leaf).lowerBound(e.Key); found {
				return fmt.Errorf("append of %q, already present: %w", e.Key, ErrSplitState)
			}
			ext, n, crc, err := t.writeExtentLocked(e.Key, e.Value)
			if err != nil {
				return err
			}
			payload = t.mu.payload[:extentPayload]
			le.PutUint64(payload[0:], uint64(ext))
			le.PutUint32(payload[8:], uint32(n))
			le.PutUint64(payload[12:], crc)
		} else if t.leafKind == flagExtents {
			r := e.Ref
			off := r.Extent.Offset()
			if r.Extent.Region() != t.region || off%8 != 0 || r.Len < extentHeader || off+uint64(roundUp8(r.Len)) > uint64(len(t.mem)) {
				return fmt.Errorf("record %v of %d bytes for %q outside region %d: %w", r.Extent, r.Len, e.Key, t.region, ErrCorruption)
			}
			payload = t.mu.payload[:extentPayload]
			le.PutUint64(payload[0:], uint64(r.Extent))
			le.PutUint32(payload[8:], uint32(r.Len))
			le.PutUint64(payload[12:], r.CRC)
		} else {
			if e.Child.IsNil() {
				return fmt.Errorf("nil child for %q: %w", e.Key, ErrCorruption)
			}
			payload = t.mu.payload[:pointerPayload]
			le.PutUint64(payload, uint64(e.Child))
		}
		leaf, err := t.descendLocked(e.Key)
		if err != nil {
			return err
		}
		ln := t.nodeBytes(leaf)
		i, found := ln.lowerBound(e.Key)
		if found {
			return fmt.Errorf("append of %q, already present: %w", e.Key, ErrSplitState)
		}
		if t.nodesInUse()+t.height()+1 > t.capacity() {
			return fmt.Errorf("all %d nodes in use: %w", t.capacity(), ErrNeedsSplit)
		}
		if versioned && t.leafKind == flagExtents {
			payload = t.mu.payload[:versionedPayload]
			le.PutUint64(payload[extentPayload:], uint64(e.Word))
		}
		t.insertLocked(0, leaf, i, e.Key, payload, true)
	}
	return nil
}

// CopyRight copies one batch of a local split: the leaf entries of src's
// frozen right half from key from on, at most maxLeaves leaves of them,
// into dst (BeginCopy'ed, same region and global level), and returns the
// key to continue from, nil when the copy is complete. It holds src's
// writer lock while it reads the batch and dst's while it appends, never
// both.
func CopyRight(src, dst *Tree, from []byte, maxLeaves int) (next []byte, err error) {
	if src.region != dst.region || src.leafKind != dst.leafKind || src.nodeSize != dst.nodeSize {
		return nil, fmt.Errorf("copy between meganodes of regions %d and %d, kinds %d and %d: %w",
			src.region, dst.region, src.leafKind, dst.leafKind, ErrSplitState)
	}
	if sv, su := src.Versioning(); src.leafKind == flagExtents {
		if dv, du := dst.Versioning(); sv != dv || su != du {
			return nil, fmt.Errorf("copy from versioning (%v, %d) to (%v, %d): %w", sv, su, dv, du, ErrSplitState)
		}
	}
	ents, next, err := src.FrozenEntries(from, max(maxLeaves, 1), nil)
	if err != nil {
		return nil, err
	}
	if err := dst.AppendEntries(ents); err != nil {
		return nil, err
	}
	return next, nil
}

// LinkRight publishes the split (paper §2.2: "it locks X_left long enough
// to update the right-link pointers of X_left along the split boundary to
// point to the root of the new meganode"): at every local level, the node
// whose range ends at or straddles the split key gets right as its right
// link and the split key as its max, losing its entries at or above it
// (only nodes above the level where the split key is an entry key
// straddle it); then the header's max becomes the split key. Readers of
// keys at or above it now follow the right links into the new meganode;
// the old right-half nodes stay valid, unreachable, until FreeRight. right
// is the new meganode's local root. It is the split's point of no return.
//
// A straddling node that could not take the split key as its max (the
// left half's writes filled it during the copy) makes LinkRight fail with
// ErrSplitState before changing anything: abort the split and try again.
func (t *Tree) LinkRight(right Ptr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.mu.split
	if s.role != splitSource || s.linked {
		return fmt.Errorf("link right: %w", ErrSplitState)
	}
	if right.IsNil() || t.local(right) {
		return fmt.Errorf("right link %v is not a node of another meganode: %w", right, ErrSplitState)
	}
	// Two passes over the boundary: the first checks every image fits,
	// the second publishes, top down.
	if _, err := t.linkPassLocked(s.sep, right, false); err != nil {
		return err
	}
	heads, err := t.linkPassLocked(s.sep, right, true)
	if err != nil {
		return err
	}
	s.heads = heads
	s.remote = right.Region() != t.region
	h := t.mu.hdr
	h[offFlags] &^= flagMaxInf
	clear(h[hdrKeys+t.maxKey : hdrKeys+2*t.maxKey])
	copy(h[hdrKeys+t.maxKey:], s.sep)
	h.putU16(hdrMaxLen, len(s.sep))
	t.mu.dirty = true
	t.flushHeaderLocked()
	s.linked = true
	return nil
}

// linkPassLocked walks the boundary at sep from the local root down: at
// every level the node covering the keys just below sep. Without apply it
// only checks that LinkRight can publish it (a leaf boundary at sep, and
// every node straddling sep able to take it as its max); with apply it
// publishes each node with right as its right link and returns, per level,
// the first node right of the boundary (the detached right half).
// REQUIRES: t.mu held.
func (t *Tree) linkPassLocked(sep []byte, right Ptr, apply bool) ([]Ptr, error) {
	var heads []Ptr
	if apply {
		heads = make([]Ptr, t.height())
	}
	p := Ptr(t.mu.hdr.u64(hdrRoot))
	for lv := t.height() - 1; lv >= 0; lv-- {
		n := t.nodeBytes(p)
		for !n.maxInf() && bytes.Compare(n.maxKey(), sep) < 0 {
			if p = n.rightLink(); !t.local(p) {
				return nil, fmt.Errorf("level %d ends below split key %q: %w", lv, sep, ErrCorruption)
			}
			n = t.nodeBytes(p)
		}
		if n.level() != lv || !n.aboveMin(sep) || !n.minInf() && bytes.Equal(n.minKey(), sep) {
			return nil, fmt.Errorf("node %v at level %d (%d) does not start below split key %q: %w", p, lv, n.level(), sep, ErrCorruption)
		}
		j, _ := n.lowerBound(sep) // entries [0, j) stay
		boundary := !n.maxInf() && bytes.Equal(n.maxKey(), sep)
		if lv == 0 && !boundary {
			return nil, fmt.Errorf("leaf %v straddles split key %q: %w", p, sep, ErrSplitState)
		}
		if !boundary {
			used := offSlots + tailSize + len(n.minKey()) + len(sep)
			for e := 0; e < j; e++ {
				used += slotSize + entrySize(len(n.key(e)), n.payloadSize())
			}
			if used > len(n) {
				return nil, fmt.Errorf("node %v cannot take split key %q as its max: %w", p, sep, ErrSplitState)
			}
		}
		var child Ptr
		if lv > 0 {
			if j == 0 {
				return nil, fmt.Errorf("inner node %v has no entry below split key %q: %w", p, sep, ErrCorruption)
			}
			child = n.child(j - 1)
		}
		if apply {
			if rl := n.rightLink(); t.local(rl) {
				heads[lv] = rl
			}
			img := t.mu.scratch
			if boundary {
				copy(img, n)
				img.putU64(offRightLink, uint64(right))
			} else {
				initNode(img, kindTree, lv, n.flags()&^flagMaxInf, n.minKey(), sep, right)
				for e := 0; e < j; e++ {
					img.appendEntry(n.key(e), n.payload(e))
				}
			}
			t.publish(p, img)
		}
		p = child
	}
	return heads, nil
}

// FreeRight invalidates and frees up to maxNodes nodes of the right half
// that LinkRight detached (paper §2.2: "the server invalidates the old
// X_right by setting a boolean flag in each node, indicating that the
// nodes can be reused"), and reports whether none is left. Freed nodes go
// to the meganode's free list; their versions keep growing, so a reader
// holding a stale pointer to one that is reused sees a new node whose
// range does not cover its key (§2.4). The records the right half pointed
// to belong to the new meganode now and are not freed, unless it is in
// another region (a remote split), which holds copies: then they are
// freed with their leaves.
func (t *Tree) FreeRight(maxNodes int) (done bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.mu.split
	if s.role != splitSource || !s.linked {
		return false, fmt.Errorf("free right: %w", ErrSplitState)
	}
	defer t.flushHeaderLocked()
	freed := 0
	for lv, p := range s.heads {
		for t.local(p) && freed < max(maxNodes, 1) {
			n := t.nodeBytes(p)
			if !n.valid() || n.kind() != kindTree || n.level() != lv || n.minInf() || bytes.Compare(n.minKey(), s.sep) < 0 {
				return false, fmt.Errorf("detached node %v is not a right-half node of level %d: %w", p, lv, ErrCorruption)
			}
			next := n.rightLink()
			if s.remote && lv == 0 && n.extents() {
				for i := range n.count() {
					if n.placeholder(i) {
						continue
					}
					ext, l, _ := n.extent(i)
					t.ext.Free(ext.Offset(), roundUp8(l))
				}
			}
			t.freeNodeLocked(p)
			freed++
			p = next
		}
		if !t.local(p) {
			p = 0
		}
		s.heads[lv] = p
	}
	for _, p := range s.heads {
		if !p.IsNil() {
			return false, nil
		}
	}
	t.mu.upgradeRefused = false // the split gave nodes back
	return true, nil
}

// DropRecords frees the records of every entry of a split target in a
// leaf meganode (one filled from another region, whose records are its
// own), before the target is dropped: an aborted remote split. The tree
// must not be used afterwards but to free its meganode.
func (t *Tree) DropRecords() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.split.role != splitTarget {
		return fmt.Errorf("drop records: %w", ErrSplitState)
	}
	if t.leafKind != flagExtents {
		return nil
	}
	p := Ptr(t.mu.hdr.u64(hdrRoot))
	for n := t.nodeBytes(p); n.level() > 0; n = t.nodeBytes(p) {
		if n.count() == 0 {
			return fmt.Errorf("inner node %v without entries: %w", p, ErrCorruption)
		}
		p = n.child(0)
	}
	for seen := 0; t.local(p); seen++ {
		if seen > t.capacity() {
			return fmt.Errorf("leaf level longer than the meganode: %w", ErrCorruption)
		}
		n := t.nodeBytes(p)
		for i := range n.count() {
			if n.placeholder(i) {
				continue
			}
			ext, l, _ := n.extent(i)
			t.ext.Free(ext.Offset(), roundUp8(l))
		}
		p = n.rightLink()
	}
	return nil
}

// Thaw ends the tree's part in a split: writes to the frozen range are
// accepted again. On the source before LinkRight it aborts the split
// (nothing was changed); after LinkRight it requires FreeRight to be done,
// and keys at or above the split key are then outside the meganode. On
// the target it opens the meganode to ordinary writes. Without a split it
// returns ErrSplitState.
func (t *Tree) Thaw() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.mu.split
	switch {
	case s.role == splitNone:
		return fmt.Errorf("thaw: %w", ErrSplitState)
	case s.role == splitSource && s.linked:
		for _, p := range s.heads {
			if !p.IsNil() {
				return fmt.Errorf("thaw with detached nodes left: %w", ErrSplitState)
			}
		}
	}
	t.mu.split = splitState{}
	return nil
}

// SplitInfo describes the tree's part in a split in progress.
type SplitInfo struct {
	Source, Target bool   // the meganode being split, or the new one
	Sep            []byte // source: the split key
	Linked         bool   // source: LinkRight done
}

// Split returns the tree's split in progress (zero when none).
func (t *Tree) Split() SplitInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.mu.split
	return SplitInfo{Source: s.role == splitSource, Target: s.role == splitTarget, Sep: bytes.Clone(s.sep), Linked: s.linked}
}

// CheckLinks verifies the link between two meganodes of one global level
// that are neighbours, left then right (after a split, X and Y): their
// levels are equal, left's max equals right's min, and left's right link
// (the right link of the rightmost node of each of its levels, which Check
// verifies to be one pointer) is a valid node of right on its leftmost
// spine: its local root when the split published, or a node below the
// root once right grew taller. Each tree's own invariants are Check's. It
// takes one tree's writer lock at a time, so the trees should be at rest.
func CheckLinks(left, right *Tree) []Violation {
	var out []Violation
	bad := func(p Ptr, format string, args ...any) {
		out = append(out, Violation{Node: p, Path: "link", Msg: fmt.Sprintf(format, args...)})
	}
	left.mu.Lock()
	lh := left.mu.hdr
	lLevel := lh.u16(hdrGlobalLevel)
	lMaxInf := lh.flags()&flagMaxInf != 0
	lMax := bytes.Clone(lh[hdrKeys+left.maxKey : hdrKeys+left.maxKey+lh.u16(hdrMaxLen)])
	link := left.nodeBytes(Ptr(lh.u64(hdrRoot))).rightLink()
	left.mu.Unlock()

	right.mu.Lock()
	defer right.mu.Unlock()
	rh := right.mu.hdr
	if l := rh.u16(hdrGlobalLevel); l != lLevel {
		bad(right.headerPtr(), "global level %d, left neighbour %v has %d", l, left.headerPtr(), lLevel)
	}
	rMin := rh[hdrKeys : hdrKeys+rh.u16(hdrMinLen)]
	if lMaxInf || rh.flags()&flagMinInf != 0 || !bytes.Equal(lMax, rMin) {
		bad(right.headerPtr(), "min %q differs from left neighbour's max %q (inf %v)", rMin, lMax, lMaxInf)
	}
	if !right.local(link) {
		bad(left.headerPtr(), "right link %v is not a node of %v", link, right.headerPtr())
		return out
	}
	for p := Ptr(rh.u64(hdrRoot)); right.local(p); {
		n := right.nodeBytes(p)
		if !n.valid() || n.kind() != kindTree || n.count() == 0 && n.level() > 0 {
			break
		}
		if p == link {
			if n.minInf() || !bytes.Equal(n.minKey(), rMin) {
				bad(link, "link target's min %q differs from %q", n.minKey(), rMin)
			}
			return out
		}
		if n.level() == 0 {
			break
		}
		p = n.child(0)
	}
	bad(left.headerPtr(), "right link %v is not on %v's leftmost spine", link, right.headerPtr())
	return out
}
