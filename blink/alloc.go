package blink

import "fmt"

// Node allocation inside a meganode. The header counts nodes handed out
// from a bump pointer (next fresh index) and keeps a free list of released
// nodes linked through their right-link words. A free node is invalid
// (kind free, valid flag clear) and keeps its version words, which only ever
// grow, so a reader holding a stale pointer to a reused node sees a new
// version or a min/max range that does not cover its key.

func (t *Tree) capacity() int  { return int(le.Uint32(t.mu.hdr[hdrCapacity:])) }
func (t *Tree) nextFresh() int { return int(le.Uint32(t.mu.hdr[hdrNextFresh:])) }
func (t *Tree) freeCount() int { return int(le.Uint32(t.mu.hdr[hdrFreeCount:])) }
func (t *Tree) height() int    { return t.mu.hdr.u16(hdrHeight) }

// nodesInUse returns the nodes allocated, header included.
func (t *Tree) nodesInUse() int { return t.nextFresh() - t.freeCount() }

// allocNodeLocked takes a node from the free list or the fresh area. The
// caller publishes its first image. REQUIRES: t.mu held.
func (t *Tree) allocNodeLocked() (Ptr, error) {
	h := t.mu.hdr
	if head := Ptr(h.u64(hdrFreeHead)); !head.IsNil() {
		next := t.nodeBytes(head).rightLink()
		h.putU64(hdrFreeHead, uint64(next))
		le.PutUint32(h[hdrFreeCount:], uint32(t.freeCount()-1))
		t.mu.dirty = true
		return head, nil
	}
	i := t.nextFresh()
	if i >= t.capacity() {
		return 0, fmt.Errorf("all %d nodes in use: %w", t.capacity(), ErrNeedsSplit)
	}
	le.PutUint32(h[hdrNextFresh:], uint32(i+1))
	t.mu.dirty = true
	return MakePtr(t.region, t.base+uint64(i)*uint64(t.nodeSize)), nil
}

// freeNodeLocked invalidates the node at p and puts it on the free list.
// REQUIRES: t.mu held.
func (t *Tree) freeNodeLocked(p Ptr) {
	h := t.mu.hdr
	img := t.mu.tmp
	initNode(img, kindFree, 0, 0, nil, nil, Ptr(h.u64(hdrFreeHead)))
	t.publish(p, img)
	h.putU64(hdrFreeHead, uint64(p))
	le.PutUint32(h[hdrFreeCount:], uint32(t.freeCount()+1))
	t.mu.dirty = true
}

// flushHeaderLocked publishes the header image if it changed.
// REQUIRES: t.mu held.
func (t *Tree) flushHeaderLocked() {
	if t.mu.dirty {
		t.publish(t.headerPtr(), t.mu.hdr)
		t.mu.dirty = false
	}
}
