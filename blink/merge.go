package blink

import "bytes"

// Merging nodes after deletes (issue 42, "space back after deletes").
//
// A delete that leaves its leaf's entries under a quarter of a node (or
// none) merges it with a neighbour under the same parent when the two fit
// in three quarters of a node (in one node when either is empty): the right one of the two is absorbed by
// the left one, the separator between them leaves the parent, and the
// absorbed node is freed onto the meganode's free list, to be reused by
// later inserts. A parent left below mergeLow merges with its own
// neighbour the same way, up to the level below the root (the root never
// merges and the height never shrinks). Every decision depends on the
// tree's bytes only, so a replica replaying the same deletes makes the
// same merges and ends byte-identical.
//
// The steps, for lock-free readers (paper §2.4, the same paths as a
// meganode split's freed nodes):
//
//  1. The left node L is published holding its entries and then the
//     absorbed node N's, with N's max as its max and N's right link as
//     its own. N is unchanged and valid: a reader holding it reads the
//     same entries there; one that copies L finds them in L.
//  2. The parent is published without N's entry: L's entry now covers
//     N's range.
//  3. N is freed: valid flag cleared, its version word raised again (the
//     version protocol; publish only ever raises it). A reader that
//     reaches N through a stale pointer (an old copy of the parent or of
//     L's right link) finds it invalid and restarts from the root; once N
//     is reused, the reincarnation has a higher version and covers its
//     key only if it is a valid node for that key (§2.4).
//
// Records move with their entries (L's entries hold N's extent pointers,
// lengths, CRCs and words unchanged); no record is freed or written. A
// leaf merge in versioned mode writes L versioned: the entries of a
// legacy leaf get MakeWord(U) as they read before (word.go).
//
// During a meganode split (split.go) a node merges only when its range
// ends at or below the split key: the frozen right half and the nodes
// detached from it never change, and the boundary at the split key stays
// a node boundary at every level below where it is an entry key. A split
// target (frozen whole) never merges.

const (
	// mergeLowDiv: a node whose entries take less than
	// nodeSize/mergeLowDiv bytes after a delete tries to merge.
	mergeLowDiv = 4
	// mergeHighNum/mergeHighDiv: the merged node uses at most that
	// fraction of a node, so an insert does not split it again at once.
	mergeHighNum, mergeHighDiv = 3, 4
)

// underfullLocked reports whether node n is below the merge threshold: its
// entries (with their slots, without the node's header and bounds) take
// less than a quarter of a node, or it has none.
func (t *Tree) underfullLocked(n node) bool {
	entries := n.usedBytes() - (offSlots + tailSize + len(n.minKey()) + len(n.maxKey()))
	return n.count() == 0 || entries < len(n)/mergeLowDiv
}

// mergeAfterDeleteLocked merges the leaf that held key after a delete
// emptied it or left it under the threshold, and then its ancestors in
// turn, as the file comment says. t.mu.path is the delete's descent.
// REQUIRES: t.mu held.
func (t *Tree) mergeAfterDeleteLocked(key []byte) {
	s := &t.mu.split
	if s.role == splitTarget {
		return
	}
	h := t.height()
	if len(t.mu.path) < h {
		return
	}
	for lv := 0; lv+1 < h; lv++ {
		p := t.mu.path[lv]
		if !t.underfullLocked(t.nodeBytes(p)) {
			return
		}
		parent := t.mu.path[lv+1]
		pn := t.nodeBytes(parent)
		if !pn.valid() || pn.level() != lv+1 || !pn.aboveMin(key) || !pn.belowMax(key) {
			return
		}
		i := pn.childIndex(key)
		if pn.child(i) != p {
			return
		}
		// Absorb p into its left neighbour, or, for the parent's first
		// child, its right neighbour into p.
		j := i
		if j == 0 {
			j = 1
		}
		if j >= pn.count() || !t.mergeLocked(parent, j) {
			return
		}
	}
}

// mergeLocked absorbs child j (j >= 1) of the inner node parent into child
// j-1 when their entries fit in one node within mergeHigh and neither is
// frozen; it reports whether it did. REQUIRES: t.mu held.
func (t *Tree) mergeLocked(parent Ptr, j int) bool {
	pn := t.nodeBytes(parent)
	lp, np := pn.child(j-1), pn.child(j)
	if !t.local(lp) || !t.local(np) || lp == np {
		return false
	}
	l, n := t.nodeBytes(lp), t.nodeBytes(np)
	lv := pn.level() - 1
	if !l.valid() || !n.valid() || l.level() != lv || n.level() != lv || l.rightLink() != np {
		return false
	}
	if lv == 0 && !l.extents() {
		// A leaf of an inner meganode maps a key to its last entry at or
		// below it, and its first entry need not be its min: merging
		// could change which child meganode covers a key. Not merged.
		return false
	}
	if s := &t.mu.split; s.role == splitSource && (n.maxInf() || bytes.Compare(n.maxKey(), s.sep) > 0) {
		return false
	}
	// The merged image's format: a leaf in versioned mode is versioned.
	versioned := l.extents() && t.versionedLocked()
	ps := l.payloadSize()
	if versioned {
		ps = versionedPayload
	}
	used := offSlots + tailSize + len(l.minKey()) + len(n.maxKey())
	for _, m := range [2]node{l, n} {
		for e, c := 0, m.count(); e < c; e++ {
			used += slotSize + entrySize(len(m.key(e)), ps)
		}
	}
	limit := len(l) * mergeHighNum / mergeHighDiv
	if l.count() == 0 || n.count() == 0 {
		limit = len(l) // an empty node always goes when the bounds fit
	}
	if used > limit {
		return false
	}
	word := Word(0)
	if versioned {
		_, u := t.Versioning()
		word = MakeWord(u, false, false)
	}
	flags := byte(flagValid) | l.flags()&(flagExtents|flagMinInf) | n.flags()&flagMaxInf
	if versioned {
		flags |= flagVersioned
	}
	img := t.mu.scratch
	initNode(img, kindTree, lv, flags, l.minKey(), n.maxKey(), n.rightLink())
	pl := t.mu.payload[:]
	for _, m := range [2]node{l, n} {
		for e, c := 0, m.count(); e < c; e++ {
			if versioned && !m.versioned() {
				copy(pl, m.payload(e))
				le.PutUint64(pl[extentPayload:], uint64(word))
				img.appendEntry(m.key(e), pl[:versionedPayload])
				continue
			}
			img.appendEntry(m.key(e), m.payload(e))
		}
	}
	t.publish(lp, img)
	pimg := t.mu.scratch
	copy(pimg, pn)
	pimg.removeEntry(j)
	t.publish(parent, pimg)
	t.freeNodeLocked(np)
	return true
}
