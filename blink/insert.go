package blink

import (
	"fmt"

	"github.com/cellstore/cell/internal/atomicmem"
)

// The write path. Every mutator takes t.mu, so there is one writer per
// meganode at a time; the writer reads live nodes with plain loads (it is
// their only writer) and changes them only through publish.

// entryRef is one entry of a node being split: slices into an old image or
// the caller's key and payload.
type entryRef struct{ key, payload []byte }

// descendLocked walks from the local root to the leaf covering key,
// recording the node visited at each level in t.mu.path. REQUIRES: t.mu held.
func (t *Tree) descendLocked(key []byte) (Ptr, error) {
	p := Ptr(t.mu.hdr.u64(hdrRoot))
	h := t.height()
	if cap(t.mu.path) < h+1 {
		t.mu.path = make([]Ptr, h+1)
	}
	t.mu.path = t.mu.path[:h]
	rn := t.nodeBytes(p)
	if !rn.aboveMin(key) || !rn.belowMax(key) && !t.local(rn.rightLink()) {
		return 0, fmt.Errorf("key %q: %w", key, ErrKeyOutOfRange)
	}
	for {
		if !t.local(p) {
			return 0, fmt.Errorf("writer reached pointer %v outside the meganode for key %q: %w", p, key, ErrCorruption)
		}
		n := t.nodeBytes(p)
		if !n.belowMax(key) {
			// Sagiv's move right. With one writer that updates parents
			// at once this only happens past a meganode boundary.
			p = n.rightLink()
			continue
		}
		lv := n.level()
		if lv >= len(t.mu.path) {
			return 0, fmt.Errorf("node %v at level %d in a tree of height %d: %w", p, lv, len(t.mu.path), ErrCorruption)
		}
		t.mu.path[lv] = p
		if lv == 0 {
			return p, nil
		}
		p = n.child(n.childIndex(key))
	}
}

// Put inserts key with value, or replaces the value of an existing key.
// A new key returns ErrNeedsSplit when the meganode is at its fill
// threshold, and ErrExtentsFull when the region has no room for the record;
// nothing changes then. Replacing a value never needs a new node. A key in
// the frozen range of a meganode split returns ErrFrozen.
func (t *Tree) Put(key, value []byte) error {
	if err := t.checkKey(key); err != nil {
		return err
	}
	if len(value) > t.opts.MaxValueSize {
		return fmt.Errorf("value of %d bytes, limit %d: %w", len(value), t.opts.MaxValueSize, ErrValueTooLarge)
	}
	if t.leafKind != flagExtents {
		return fmt.Errorf("put of a value into an inner meganode: %w", ErrKeyOutOfRange)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.versionedLocked() {
		return fmt.Errorf("put of %q without an entry word (PutWord): %w", key, ErrNeedsWord)
	}
	if t.frozenLocked(key) {
		return t.errFrozen(key)
	}
	leaf, err := t.descendLocked(key)
	if err != nil {
		return err
	}
	ln := t.nodeBytes(leaf)
	i, found := ln.lowerBound(key)
	if !found {
		if err := t.roomForInsertLocked(); err != nil {
			return err
		}
	}
	ext, n, crc, err := t.writeExtentLocked(key, value)
	if err != nil {
		return err
	}
	payload := t.mu.payload[:extentPayload]
	le.PutUint64(payload[0:], uint64(ext))
	le.PutUint32(payload[8:], uint32(n))
	le.PutUint64(payload[12:], crc)
	if found {
		old, oldLen, _ := ln.extent(i)
		img := t.mu.scratch
		copy(img, ln)
		copy(img.payload(i), payload)
		t.publish(leaf, img)
		t.ext.Free(old.Offset(), roundUp8(oldLen))
		return nil
	}
	t.insertLocked(0, leaf, i, key, payload, false)
	t.flushHeaderLocked()
	return nil
}

// InsertChild records child as the meganode covering keys from key up to the
// next entry, in a leaf of an inner meganode (the parent side of a meganode
// split), or repoints an existing entry. Same errors as Put.
func (t *Tree) InsertChild(key []byte, child Ptr) error {
	if err := t.checkKey(key); err != nil {
		return err
	}
	if t.leafKind == flagExtents {
		return fmt.Errorf("child pointer into a leaf meganode: %w", ErrKeyOutOfRange)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.frozenLocked(key) {
		return t.errFrozen(key)
	}
	leaf, err := t.descendLocked(key)
	if err != nil {
		return err
	}
	ln := t.nodeBytes(leaf)
	payload := t.mu.payload[:pointerPayload]
	le.PutUint64(payload, uint64(child))
	i, found := ln.lowerBound(key)
	if found {
		img := t.mu.scratch
		copy(img, ln)
		copy(img.payload(i), payload)
		t.publish(leaf, img)
		return nil
	}
	if err := t.roomForInsertLocked(); err != nil {
		return err
	}
	t.insertLocked(0, leaf, i, key, payload, false)
	t.flushHeaderLocked()
	return nil
}

// roomForInsertLocked returns ErrNeedsSplit unless the meganode is below its
// fill threshold and has enough free nodes for an insert that splits every
// level and grows a new root. REQUIRES: t.mu held.
func (t *Tree) roomForInsertLocked() error {
	inUse, capa := t.nodesInUse(), t.capacity()
	worst := t.height() + 1
	if inUse+worst > capa || float64(inUse+worst) > t.opts.FillThreshold*float64(capa) {
		return fmt.Errorf("%d of %d nodes in use, threshold %.2f: %w", inUse, capa, t.opts.FillThreshold, ErrNeedsSplit)
	}
	return nil
}

// writeExtentLocked allocates a record for key and value and writes it with
// atomic stores. REQUIRES: t.mu held.
func (t *Tree) writeExtentLocked(key, value []byte) (Ptr, int, uint64, error) {
	n := ExtentLen(len(key), len(value))
	padded := roundUp8(n)
	off, err := t.ext.Alloc(padded)
	if err != nil {
		return 0, 0, 0, err
	}
	if off%8 != 0 || off+uint64(padded) > uint64(len(t.mem)) {
		return 0, 0, 0, fmt.Errorf("extent allocator returned [%d, +%d) outside the region: %w", off, padded, ErrCorruption)
	}
	// Encode small records on the stack, large ones through a temporary.
	var small [512]byte
	var rec []byte
	if padded <= len(small) {
		rec = small[:padded]
	} else {
		rec = atomicmem.Alloc(padded)
	}
	crc := EncodeExtent(rec, key, value)
	clear(rec[n:])
	if t.opts.BeforeWrite != nil {
		t.opts.BeforeWrite(off, uint64(padded))
	}
	atomicmem.Store(t.mem[off:off+uint64(padded)], rec)
	return MakePtr(t.region, off), n, crc, nil
}

// insertLocked inserts (key, payload) as entry i of node p at local level
// lv, splitting it if it is full, and carries the separator of each split
// up to the parent as a decoupled insert (Sagiv), growing a new root when
// the root splits. With pack, an entry appended after the last one of the
// rightmost node of a level splits that node by leaving it full and
// starting a new node (the loading pattern of a meganode split's copy,
// which appends in key order). REQUIRES: t.mu held; room for a cascade.
func (t *Tree) insertLocked(lv int, p Ptr, i int, key, payload []byte, pack bool) {
	if t.insertIfFitsLocked(p, t.nodeBytes(p), i, key, payload) {
		return
	}
	sep, right := t.splitLocked(p, i, key, payload, pack)
	t.carryLocked(lv, p, sep, right, pack)
}

// insertIfFitsLocked inserts (key, payload) as entry i of node p (whose
// bytes are n) and publishes it, if the entry fits; it reports whether it
// did. REQUIRES: t.mu held.
func (t *Tree) insertIfFitsLocked(p Ptr, n node, i int, key, payload []byte) bool {
	if !n.fits(len(key)) {
		return false
	}
	img := t.mu.scratch
	copy(img, n)
	img.insertEntry(i, key, payload, t.mu.tmp)
	t.publish(p, img)
	return true
}

// carryLocked carries the split of node p at local level lv (sep, the new
// right sibling right) up: the separator goes into the parent found
// through t.mu.path, which may split in turn, up to a new root.
// REQUIRES: t.mu held; room for the cascade.
func (t *Tree) carryLocked(lv int, p Ptr, sep []byte, right Ptr, pack bool) {
	sepBuf := t.mu.sep[:]
	childPayload := t.mu.childPl[:]
	for {
		key := sepBuf[:copy(sepBuf, sep)]
		le.PutUint64(childPayload, uint64(right))
		payload := childPayload

		if lv+1 >= t.height() {
			t.growRootLocked(p, key, right)
			return
		}
		lv++
		p = t.mu.path[lv]
		pn := t.nodeBytes(p)
		for !pn.belowMax(key) {
			p = pn.rightLink()
			pn = t.nodeBytes(p)
		}
		i, _ := pn.lowerBound(key)
		if t.insertIfFitsLocked(p, pn, i, key, payload) {
			return
		}
		sep, right = t.splitLocked(p, i, key, payload, pack)
	}
}

// splitLocked splits node p as if (key, payload) were inserted at index i:
// it writes the upper half into a new right sibling, publishes that sibling
// first (it is unreachable until the left half links to it), then publishes
// the lower half with its max lowered to the separator and its right link
// pointing to the sibling. It returns the separator (valid until the next
// split) and the sibling. With pack (see insertLocked) an append at the
// end of a level keeps every old entry left. REQUIRES: t.mu held; a free
// node exists.
func (t *Tree) splitLocked(p Ptr, i int, key, payload []byte, pack bool) ([]byte, Ptr) {
	old := t.mu.tmp
	copy(old, t.nodeBytes(p))
	c := old.count()
	ents := t.mu.splitBuf[:0]
	for j := 0; j < c; j++ {
		if j == i {
			ents = append(ents, entryRef{key, payload})
		}
		ents = append(ents, entryRef{old.key(j), old.payload(j)})
	}
	if i == c {
		ents = append(ents, entryRef{key, payload})
	}
	t.mu.splitBuf = ents
	k := -1
	if pack && i == c && !t.local(old.rightLink()) {
		// Move as few entries right as fit: the left node's max grows
		// from +inf (or the old max) to the separator.
		for k = c; k > 0 && !splitFits(ents, k, len(old), old.minKey(), old.maxKey()); k-- {
		}
		if k == 0 || c-k > c/4 {
			k = -1
		}
	}
	if k < 0 {
		k = chooseSplit(ents, len(old), old.minKey(), old.maxKey())
	}
	return t.writeSplitLocked(p, old, ents, k, old.flags())
}

// writeSplitLocked publishes the split of node p, whose old image is old,
// into ents[:k] (left, in place) and ents[k:] (a new right sibling, first),
// with the extent and versioned flags of flags. REQUIRES: t.mu held; a
// free node exists.
func (t *Tree) writeSplitLocked(p Ptr, old node, ents []entryRef, k int, flags byte) ([]byte, Ptr) {
	right, err := t.allocNodeLocked()
	if err != nil {
		// roomForInsertLocked reserved enough nodes for a full cascade.
		panic(fmt.Sprintf("blink: node allocation failed after reservation: %v", err))
	}
	sep := ents[k].key
	lv := old.level()
	kindFlags := flagValid | flags&(flagExtents|flagVersioned)

	r := t.mu.right
	initNode(r, kindTree, lv, kindFlags|old.flags()&flagMaxInf, sep, old.maxKey(), old.rightLink())
	for _, e := range ents[k:] {
		r.appendEntry(e.key, e.payload)
	}
	l := t.mu.scratch
	initNode(l, kindTree, lv, kindFlags|old.flags()&flagMinInf, old.minKey(), sep, right)
	for _, e := range ents[:k] {
		l.appendEntry(e.key, e.payload)
	}
	t.publish(right, r)
	t.publish(p, l)
	return r.minKey(), right
}

// splitFits reports whether splitting ents before entry k gives two halves
// that fit in a node with their bounds (the separator is ents[k]'s key).
func splitFits(ents []entryRef, k, nodeSize int, min, max []byte) bool {
	left, right := 0, 0
	for j, e := range ents {
		sz := slotSize + entrySize(len(e.key), len(e.payload))
		if j < k {
			left += sz
		} else {
			right += sz
		}
	}
	fixed, sep := offSlots+tailSize, len(ents[k].key)
	return k > 0 && k < len(ents) && fixed+len(min)+sep+left <= nodeSize && fixed+sep+len(max)+right <= nodeSize
}

// chooseSplit picks the index of the first entry of the right half so that
// both halves fit in a node with their bounds and are as close to equal in
// bytes as possible. Entry 0 always stays left, so the separator is never
// the empty -inf key of a leftmost inner node.
func chooseSplit(ents []entryRef, nodeSize int, min, max []byte) int {
	k := splitPoint(ents, nodeSize, min, max)
	if k < 0 {
		panic("blink: no split point fits; key size limit violated")
	}
	return k
}

// splitPoint is chooseSplit returning -1 when no split point fits.
func splitPoint(ents []entryRef, nodeSize int, min, max []byte) int {
	total := 0
	for _, e := range ents {
		total += slotSize + entrySize(len(e.key), len(e.payload))
	}
	fixed := offSlots + tailSize
	best, bestDiff := -1, 0
	left := 0
	for k := 1; k < len(ents); k++ {
		e := ents[k-1]
		left += slotSize + entrySize(len(e.key), len(e.payload))
		sep := len(ents[k].key)
		right := total - left
		if fixed+len(min)+sep+left > nodeSize || fixed+sep+len(max)+right > nodeSize {
			continue
		}
		diff := left - right
		if diff < 0 {
			diff = -diff
		}
		if best < 0 || diff < bestDiff {
			best, bestDiff = k, diff
		}
	}
	return best
}

// entsFit reports whether ents fit in one node with the bounds min, max.
func entsFit(ents []entryRef, nodeSize int, min, max []byte) bool {
	used := offSlots + tailSize + len(min) + len(max)
	for _, e := range ents {
		used += slotSize + entrySize(len(e.key), len(e.payload))
	}
	return used <= nodeSize
}

// growRootLocked makes a new root above the old root p, which just split
// into p and right at sep. REQUIRES: t.mu held.
func (t *Tree) growRootLocked(p Ptr, sep []byte, right Ptr) {
	left := t.nodeBytes(p)
	rn := t.nodeBytes(right)
	root, err := t.allocNodeLocked()
	if err != nil {
		panic(fmt.Sprintf("blink: root allocation failed after reservation: %v", err))
	}
	img := t.mu.scratch
	flags := byte(flagValid) | left.flags()&flagMinInf | rn.flags()&flagMaxInf
	initNode(img, kindTree, left.level()+1, flags, left.minKey(), rn.maxKey(), rn.rightLink())
	var pl [pointerPayload]byte
	le.PutUint64(pl[:], uint64(p))
	img.appendEntry(left.minKey(), pl[:])
	le.PutUint64(pl[:], uint64(right))
	img.appendEntry(sep, pl[:])
	t.publish(root, img)
	h := t.mu.hdr
	h.putU64(hdrRoot, uint64(root))
	h.putU16(hdrHeight, t.height()+1)
	t.mu.dirty = true
	t.flushHeaderLocked()
}

// Delete removes key and reports whether it was present. A leaf the
// delete leaves under a quarter full merges with a neighbour under the
// same parent when both fit in three quarters of a node, and the freed
// node goes to the free list; parents merge in turn (merge.go).
//
// In versioned mode it also removes a placeholder, and first rewrites a
// legacy leaf versioned (word.go), which may split it: ErrNeedsSplit,
// nothing changed, only in a meganode with no node left for that.
func (t *Tree) Delete(key []byte) (bool, error) {
	if err := t.checkKey(key); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.frozenLocked(key) {
		return false, t.errFrozen(key)
	}
	leaf, err := t.descendLocked(key)
	if err != nil {
		return false, err
	}
	ln := t.nodeBytes(leaf)
	i, found := ln.lowerBound(key)
	if !found {
		return false, nil
	}
	if t.needsUpgradeLocked(ln) {
		if err := t.roomForUpgradeLocked(ln, 0); err != nil {
			return false, err
		}
		if leaf, err = t.upgradeLocked(leaf, key); err != nil {
			return false, err
		}
		defer t.flushHeaderLocked()
		ln = t.nodeBytes(leaf)
		i, _ = ln.lowerBound(key)
	}
	var old Ptr
	var oldLen int
	if ln.extents() && !ln.placeholder(i) {
		old, oldLen, _ = ln.extent(i)
	}
	img := t.mu.scratch
	copy(img, ln)
	img.removeEntry(i)
	t.publish(leaf, img)
	if !old.IsNil() {
		t.ext.Free(old.Offset(), roundUp8(oldLen))
	}
	t.mergeAfterDeleteLocked(key)
	t.flushHeaderLocked()
	return true, nil
}
