package client

import (
	"bytes"
	"slices"
	"sync"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

// meganodeInfo is what the client knows of one meganode: where its header
// is, its level in the global tree (0 = leaf meganode), its local height
// and key range, and, when a client-side search read its header, its
// local root. Key slices are owned and never modified.
type meganodeInfo struct {
	ptr    blink.Ptr
	level  int
	height int
	root   blink.Ptr // local root as last read; 0 when unknown
	rng    keyRange
}

// keyRange is [min, max); a nil min is -inf and a nil max +inf (keys are
// never empty, so nil is free to mean infinity).
type keyRange struct {
	min, max []byte
}

func (r *keyRange) contains(key []byte) bool {
	return (r.min == nil || bytes.Compare(key, r.min) >= 0) && (r.max == nil || bytes.Compare(key, r.max) < 0)
}

// overlaps reports whether r and o share a key.
func (r *keyRange) overlaps(o *keyRange) bool {
	return (r.max == nil || o.min == nil || bytes.Compare(o.min, r.max) < 0) &&
		(o.max == nil || r.min == nil || bytes.Compare(r.min, o.max) < 0)
}

// ownedRange copies a wire key range.
func ownedRange(r *wire.KeyRange) keyRange {
	var k keyRange
	if !r.MinInf {
		k.min = bytes.Clone(r.Min)
		if k.min == nil {
			k.min = []byte{}
		}
	}
	if !r.MaxInf {
		k.max = bytes.Clone(r.Max)
		if k.max == nil {
			k.max = []byte{}
		}
	}
	return k
}

// ownedBounds copies a meganode header's bounds.
func ownedBounds(b *blink.Bounds) keyRange {
	return ownedRange(&wire.KeyRange{Min: b.Min, Max: b.Max, MinInf: b.MinInf, MaxInf: b.MaxInf})
}

// compareMin orders range starts, -inf first.
func compareMin(a, b []byte) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return bytes.Compare(a, b)
}

// pathCache is the meganode path cache of paper §3: "each client maintains
// an LRU cache of up to 4K server-side traversal paths leading to the
// leaf-level meganodes, indexed by the key range covered by that
// meganode". It holds meganodeInfo learned from server-side search
// replies and client-side header reads, and answers which is the deepest
// (lowest level) known meganode covering a key, so that an operation
// starts there instead of at the root.
//
// Entries are advisory: a meganode may have split (its range shrank) or
// been freed since. At most one entry per level covers any key: inserting
// an entry removes the overlapping ones of its level, which are older.
// Callers drop an entry that led them astray.
//
// Per level, entries are kept in a slice sorted by range start (inserts
// are rare next to lookups, and a lookup is a binary search). A nil
// *pathCache is a disabled cache.
type pathCache struct {
	ct  *cacheCounters
	max int

	mu struct {
		sync.Mutex
		levels [][]*pathEntry // by level, sorted by rng.min
		byPtr  map[blink.Ptr]*pathEntry
		lru    pathEntry // sentinel; lru.next is the most recently used
	}
}

type pathEntry struct {
	info       meganodeInfo
	prev, next *pathEntry
}

// newPathCache returns a cache of at most max entries, or nil for max <= 0.
func newPathCache(max int, ct *cacheCounters) *pathCache {
	if max <= 0 {
		return nil
	}
	c := &pathCache{ct: ct, max: max}
	c.mu.byPtr = make(map[blink.Ptr]*pathEntry)
	c.mu.lru.next, c.mu.lru.prev = &c.mu.lru, &c.mu.lru
	return c
}

// lookup returns the lowest-level cached meganode whose range covers key.
func (c *pathCache) lookup(key []byte) (meganodeInfo, bool) {
	if c == nil {
		return meganodeInfo{}, false
	}
	c.mu.Lock()
	for _, lv := range c.mu.levels {
		if e := findCovering(lv, key); e != nil {
			c.moveToFrontLocked(e)
			info := e.info
			c.mu.Unlock()
			c.ct.hits.Add(1)
			return info, true
		}
	}
	c.mu.Unlock()
	c.ct.misses.Add(1)
	return meganodeInfo{}, false
}

// findCovering returns the entry of a sorted level covering key, or nil.
func findCovering(lv []*pathEntry, key []byte) *pathEntry {
	// The last entry whose min <= key.
	i, _ := slices.BinarySearchFunc(lv, key, func(e *pathEntry, k []byte) int {
		if e.info.rng.min == nil {
			return -1
		}
		if c := bytes.Compare(e.info.rng.min, k); c != 0 {
			return c
		}
		return -1 // equal mins sort before key: key >= min
	})
	if i == 0 {
		return nil
	}
	e := lv[i-1]
	if !e.info.rng.contains(key) {
		return nil
	}
	return e
}

// insert records m, replacing the entry for the same meganode and the
// entries of its level whose ranges overlap its range.
func (c *pathCache) insert(m meganodeInfo) {
	if c == nil || m.ptr.IsNil() || m.level < 0 || m.level > 0xffff {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.mu.byPtr[m.ptr]; old != nil {
		if old.info.level == m.level && old.info.height == m.height && sameRange(&old.info.rng, &m.rng) {
			// Unchanged: keep the root we knew unless m brings one.
			if m.root.IsNil() {
				m.root = old.info.root
			}
			old.info = m
			c.moveToFrontLocked(old)
			return
		}
		c.removeLocked(old)
		c.ct.invalidations.Add(1)
	}
	for len(c.mu.levels) <= m.level {
		c.mu.levels = append(c.mu.levels, nil)
	}
	lv := c.mu.levels[m.level]
	// Remove overlapping entries of the level: they describe older states.
	i, _ := slices.BinarySearchFunc(lv, m.rng.min, func(e *pathEntry, k []byte) int { return compareMin(e.info.rng.min, k) })
	if i > 0 && lv[i-1].info.rng.overlaps(&m.rng) {
		i--
	}
	j := i
	for j < len(lv) && lv[j].info.rng.overlaps(&m.rng) {
		j++
	}
	for _, e := range lv[i:j] {
		c.ct.invalidations.Add(1)
		c.unlinkLocked(e)
		delete(c.mu.byPtr, e.info.ptr)
	}
	e := &pathEntry{info: m}
	lv = slices.Replace(lv, i, j, e)
	c.mu.levels[m.level] = lv
	c.mu.byPtr[m.ptr] = e
	c.pushFrontLocked(e)
	c.ct.inserts.Add(1)
	for len(c.mu.byPtr) > c.max {
		c.removeLocked(c.mu.lru.prev)
		c.ct.evictions.Add(1)
	}
}

func sameRange(a, b *keyRange) bool {
	return (a.min == nil) == (b.min == nil) && bytes.Equal(a.min, b.min) &&
		(a.max == nil) == (b.max == nil) && bytes.Equal(a.max, b.max)
}

// fresh reports whether meganode p is cached with this level, height and
// range, and marks it used if so. It does not allocate.
func (c *pathCache) fresh(p blink.Ptr, level, height int, r *wire.KeyRange) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.mu.byPtr[p]
	if e == nil || e.info.level != level || e.info.height != height || !e.info.rng.equals(r) {
		return false
	}
	c.moveToFrontLocked(e)
	return true
}

// freshBounds is fresh for a meganode header's bounds.
func (c *pathCache) freshBounds(p blink.Ptr, level, height int, b *blink.Bounds) bool {
	return c.fresh(p, level, height, &wire.KeyRange{Min: b.Min, Max: b.Max, MinInf: b.MinInf, MaxInf: b.MaxInf})
}

// equals reports whether r is the wire range w.
func (r *keyRange) equals(w *wire.KeyRange) bool {
	return (r.min == nil) == w.MinInf && (w.MinInf || bytes.Equal(r.min, w.Min)) &&
		(r.max == nil) == w.MaxInf && (w.MaxInf || bytes.Equal(r.max, w.Max))
}

// setRoot records the local root of meganode p, if cached.
func (c *pathCache) setRoot(p, root blink.Ptr) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if e := c.mu.byPtr[p]; e != nil {
		e.info.root = root
	}
	c.mu.Unlock()
}

// drop removes meganode p's entry and reports whether there was one.
func (c *pathCache) drop(p blink.Ptr) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	e := c.mu.byPtr[p]
	if e != nil {
		c.removeLocked(e)
	}
	c.mu.Unlock()
	if e != nil {
		c.ct.invalidations.Add(1)
	}
	return e != nil
}

// len returns the number of entries.
func (c *pathCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.byPtr)
}

// clear empties the cache.
func (c *pathCache) clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.mu.levels = nil
	clear(c.mu.byPtr)
	c.mu.lru.next, c.mu.lru.prev = &c.mu.lru, &c.mu.lru
	c.mu.Unlock()
}

// REQUIRES: c.mu held (all helpers below).

func (c *pathCache) removeLocked(e *pathEntry) {
	c.unlinkLocked(e)
	delete(c.mu.byPtr, e.info.ptr)
	lv := c.mu.levels[e.info.level]
	// Ranges of a level do not overlap, so mins are unique.
	i, _ := slices.BinarySearchFunc(lv, e.info.rng.min, func(x *pathEntry, k []byte) int { return compareMin(x.info.rng.min, k) })
	if i >= len(lv) || lv[i] != e {
		i = slices.Index(lv, e)
	}
	if i >= 0 {
		c.mu.levels[e.info.level] = slices.Delete(lv, i, i+1)
	}
}

func (c *pathCache) pushFrontLocked(e *pathEntry) {
	e.prev, e.next = &c.mu.lru, c.mu.lru.next
	c.mu.lru.next.prev = e
	c.mu.lru.next = e
}

func (c *pathCache) unlinkLocked(e *pathEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *pathCache) moveToFrontLocked(e *pathEntry) {
	if c.mu.lru.next == e {
		return
	}
	c.unlinkLocked(e)
	c.pushFrontLocked(e)
}
