package blink

import (
	"bytes"

	"fmt"
	"strings"
)

// Violation is one broken invariant, located by node pointer and by the
// path of entry indexes from the local root ("root/3/0").
type Violation struct {
	Node Ptr
	Path string
	Msg  string
}

func (v Violation) String() string { return fmt.Sprintf("node %v at %s: %s", v.Node, v.Path, v.Msg) }

// Check verifies every invariant of the meganode and reports every
// violation found (nil if none): the header; keys sorted and inside
// [min, max) in every node; each child's bounds equal to its parent entry's
// range; entry 0 of inner nodes equal to their min; levels decreasing by one
// down the tree; right links joining each level left to right with the right
// sibling's min equal to this node's max, and the rightmost nodes of all
// levels linking to one place (the meganode's right link); every node
// reachable once and allocated, or detached by a meganode split and not
// freed yet; free nodes invalid and unreachable; versions even and equal at
// rest; node counts adding up; records' CRCs, lengths and keys matching
// their leaf entries, and no record shared by two entries.
//
// Check takes the writer's lock, so it sees a state at rest.
func (t *Tree) Check() []Violation {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := checker{t: t, seen: map[Ptr]string{}, extents: map[Ptr]string{}}
	c.run()
	return c.out
}

// CheckErr is Check as one error wrapping ErrCorruption, nil if none.
func (t *Tree) CheckErr() error {
	vs := t.Check()
	if len(vs) == 0 {
		return nil
	}
	msgs := make([]string, len(vs))
	for i, v := range vs {
		msgs[i] = v.String()
	}
	return fmt.Errorf("%d invariant violations:\n%s: %w", len(vs), strings.Join(msgs, "\n"), ErrCorruption)
}

type checker struct {
	t       *Tree
	out     []Violation
	seen    map[Ptr]string
	extents map[Ptr]string
	last    []Ptr // last node visited at each level, for right links
}

func (c *checker) bad(p Ptr, path, format string, args ...any) {
	c.out = append(c.out, Violation{Node: p, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// bound is one side of a key range; inf means -inf for a min, +inf for a max.
type bound struct {
	key []byte
	inf bool
}

func (b bound) String() string {
	if b.inf {
		return "inf"
	}
	return fmt.Sprintf("%q", b.key)
}

func sameBound(a, b bound) bool { return a.inf == b.inf && (a.inf || bytes.Equal(a.key, b.key)) }

func (c *checker) run() {
	t := c.t
	h := t.mu.hdr
	hp := t.headerPtr()
	live := t.nodeBytes(hp)
	if !bytes.Equal(live[8:len(live)-tailSize], h[8:len(h)-tailSize]) {
		c.bad(hp, "header", "live header differs from the writer's image")
	}
	if v := live.headVersion(); v != live.tailVersion() || v&1 != 0 {
		c.bad(hp, "header", "versions %d/%d not equal and even", v, live.tailVersion())
	}
	if le.Uint32(h[hdrMagic:]) != headerMagic || h.kind() != kindHeader || !h.valid() {
		c.bad(hp, "header", "bad magic, kind or valid flag")
	}
	if versioned, u := t.Versioning(); h.flags()&flagVersioned != 0 != versioned ||
		versioned && h.u64(len(h)-hdrLegacyFromEnd) != u || !versioned && h.u64(len(h)-hdrLegacyFromEnd) != 0 {
		c.bad(hp, "header", "versioning flag %v legacy version %d, the tree says %v %d",
			h.flags()&flagVersioned != 0, h.u64(len(h)-hdrLegacyFromEnd), versioned, u)
	}
	capa, fresh := t.capacity(), t.nextFresh()
	if fresh > capa || fresh < 2 {
		c.bad(hp, "header", "next fresh node %d outside [2, %d]", fresh, capa)
	}
	height := t.height()
	if height < 1 || height > 64 {
		c.bad(hp, "header", "height %d", height)
		return
	}
	c.last = make([]Ptr, height)
	min := bound{h[hdrKeys : hdrKeys+h.u16(hdrMinLen)], h.flags()&flagMinInf != 0}
	max := bound{h[hdrKeys+t.maxKey : hdrKeys+t.maxKey+h.u16(hdrMaxLen)], h.flags()&flagMaxInf != 0}
	root := Ptr(h.u64(hdrRoot))
	c.node(root, "root", height-1, min, max)
	var right Ptr
	for lv, p := range c.last {
		if p.IsNil() {
			c.bad(root, "root", "no node reached at level %d", lv)
			continue
		}
		n := t.nodeBytes(p)
		if t.local(n.rightLink()) {
			c.bad(p, c.seen[p], "rightmost node at level %d links to %v inside the meganode", lv, n.rightLink())
		}
		// Every level goes on at the same place: the meganode's right
		// link (nil, or a node of the next meganode of its level).
		if lv == 0 {
			right = n.rightLink()
		} else if n.rightLink() != right {
			c.bad(p, c.seen[p], "rightmost node at level %d links to %v, the leaf level to %v", lv, n.rightLink(), right)
		}
	}
	c.freeList()
	detached := c.detached()
	if got := len(c.seen) + t.freeCount() + detached + 1; got != fresh {
		c.bad(hp, "header", "%d reachable + %d free + %d detached + header = %d nodes, header says %d allocated",
			len(c.seen), t.freeCount(), detached, got, fresh)
	}
}

// detached checks the right half a meganode split detached and has not
// freed yet (split.go): unreachable, valid nodes of their level at or
// above the split key. It returns how many there are.
func (c *checker) detached() int {
	t := c.t
	s := &t.mu.split
	if s.role != splitSource || !s.linked {
		return 0
	}
	count := 0
	for lv, p := range s.heads {
		for ; t.local(p); p = t.nodeBytes(p).rightLink() {
			where := fmt.Sprintf("detached level %d", lv)
			if count > t.capacity() {
				c.bad(p, where, "cycle in the detached right half")
				return count
			}
			count++
			if path, ok := c.seen[p]; ok {
				c.bad(p, where, "detached node reachable at %s", path)
			}
			n := t.nodeBytes(p)
			if !n.valid() || n.kind() != kindTree || n.level() != lv || n.minInf() || bytes.Compare(n.minKey(), s.sep) < 0 {
				c.bad(p, where, "not a valid node of level %d at or above split key %q", lv, s.sep)
			}
		}
	}
	return count
}

func (c *checker) node(p Ptr, path string, level int, min, max bound) {
	t := c.t
	if !t.local(p) {
		c.bad(p, path, "pointer outside the meganode")
		return
	}
	if prev, dup := c.seen[p]; dup {
		c.bad(p, path, "reachable twice (also at %s)", prev)
		return
	}
	c.seen[p] = path
	idx := int((p.Offset() - t.base) / uint64(t.nodeSize))
	if idx == 0 || idx >= t.nextFresh() {
		c.bad(p, path, "node index %d not allocated (next fresh %d)", idx, t.nextFresh())
	}
	n := t.nodeBytes(p)
	if v := n.headVersion(); v != n.tailVersion() || v&1 != 0 {
		c.bad(p, path, "versions %d/%d not equal and even at rest", v, n.tailVersion())
	}
	if !n.valid() || n.kind() != kindTree {
		c.bad(p, path, "not a valid tree node (kind %d, flags %#x)", n.kind(), n.flags())
		return
	}
	if !wellFormed(n) {
		c.bad(p, path, "does not decode (offsets, key lengths or order)")
		return
	}
	if n.level() != level {
		c.bad(p, path, "level %d, expected %d", n.level(), level)
	}
	if wantExt := level == 0 && t.leafKind == flagExtents; n.extents() != wantExt {
		c.bad(p, path, "extent flag %v at level %d", n.extents(), level)
	}
	if n.versioned() && !t.versionedLocked() {
		c.bad(p, path, "versioned leaf in a meganode in legacy mode")
	}
	nmin, nmax := bound{n.minKey(), n.minInf()}, bound{n.maxKey(), n.maxInf()}
	if !sameBound(nmin, min) {
		c.bad(p, path, "min %v, parent says %v", nmin, min)
	}
	if !sameBound(nmax, max) {
		c.bad(p, path, "max %v, parent says %v", nmax, max)
	}
	// Right links: the previous node at this level links here.
	if lv := n.level(); lv < len(c.last) {
		if prev := c.last[lv]; !prev.IsNil() {
			pn := t.nodeBytes(prev)
			if pn.rightLink() != p {
				c.bad(prev, c.seen[prev], "right link %v, next node at level %d is %v", pn.rightLink(), lv, p)
			}
			if !sameBound(bound{pn.maxKey(), pn.maxInf()}, nmin) {
				c.bad(prev, c.seen[prev], "max %q differs from right sibling's min %v", pn.maxKey(), nmin)
			}
		}
		c.last[lv] = p
	}
	cnt := n.count()
	for i := 1; i < cnt; i++ {
		if bytes.Compare(n.key(i-1), n.key(i)) >= 0 {
			c.bad(p, path, "entry %d key %q not above entry %d key %q", i, n.key(i), i-1, n.key(i-1))
		}
	}
	for i := 0; i < cnt; i++ {
		k := n.key(i)
		if !n.aboveMin(k) && !(i == 0 && level > 0 && len(k) == 0 && n.minInf()) || !n.belowMax(k) {
			c.bad(p, path, "entry %d key %q outside [%v, %v)", i, k, nmin, nmax)
		}
	}
	if level == 0 {
		if n.extents() {
			c.records(p, path, n)
		}
		return
	}
	if cnt == 0 {
		c.bad(p, path, "inner node without entries")
		return
	}
	if !sameBound(bound{n.key(0), n.minInf() && len(n.key(0)) == 0}, nmin) {
		c.bad(p, path, "entry 0 key %q differs from min %v", n.key(0), nmin)
	}
	for i := 0; i < cnt; i++ {
		cmin := bound{n.key(i), i == 0 && nmin.inf}
		cmax := nmax
		if i+1 < cnt {
			cmax = bound{n.key(i + 1), false}
		}
		c.node(n.child(i), fmt.Sprintf("%s/%d", path, i), level-1, cmin, cmax)
	}
}

func (c *checker) records(p Ptr, path string, n node) {
	t := c.t
	for i, cnt := 0, n.count(); i < cnt; i++ {
		ext, l, crc := n.extent(i)
		where := fmt.Sprintf("%s[%d]", path, i)
		if w := n.rawWord(i); w.Placeholder() {
			if ext != 0 || l != 0 || crc != 0 {
				c.bad(p, where, "placeholder with record %v of %d bytes, crc %#x", ext, l, crc)
			}
			continue
		} else if n.versioned() && w.Version() == 0 {
			c.bad(p, where, "entry with a record and version 0 (word %v)", w)
		}
		if prev, dup := c.extents[ext]; dup {
			c.bad(p, where, "record %v also referenced at %s", ext, prev)
			continue
		}
		c.extents[ext] = where
		off := ext.Offset()
		if ext.Region() != t.region || off%8 != 0 || off+uint64(l) > uint64(len(t.mem)) || l < extentHeader {
			c.bad(p, where, "record %v of %d bytes outside the region", ext, l)
			continue
		}
		k, _, err := DecodeExtent(t.mem[off:off+uint64(l)], crc)
		switch {
		case err != nil:
			c.bad(p, where, "record %v: %v", ext, err)
		case !bytes.Equal(k, n.key(i)):
			c.bad(p, where, "record %v holds key %q, entry says %q", ext, k, n.key(i))
		}
	}
}

func (c *checker) freeList() {
	t := c.t
	hp := t.headerPtr()
	free := map[Ptr]bool{}
	p := Ptr(t.mu.hdr.u64(hdrFreeHead))
	for !p.IsNil() {
		if !t.local(p) {
			c.bad(p, "free list", "free node outside the meganode")
			return
		}
		if free[p] {
			c.bad(p, "free list", "cycle in the free list")
			return
		}
		free[p] = true
		if path, ok := c.seen[p]; ok {
			c.bad(p, "free list", "free node reachable at %s", path)
		}
		n := t.nodeBytes(p)
		if n.valid() || n.kind() != kindFree {
			c.bad(p, "free list", "free node valid or of kind %d", n.kind())
		}
		if v := n.headVersion(); v != n.tailVersion() || v&1 != 0 {
			c.bad(p, "free list", "versions %d/%d not equal and even at rest", v, n.tailVersion())
		}
		p = n.rightLink()
	}
	if len(free) != t.freeCount() {
		c.bad(hp, "header", "free list holds %d nodes, header says %d", len(free), t.freeCount())
	}
}
