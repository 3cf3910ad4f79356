package client

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

func nodeBytes(fill byte, n int) []byte { return bytes.Repeat([]byte{fill}, n) }

// TestNodeCacheBasics: put, get (the cached copy is a copy), replace,
// drop, size.
func TestNodeCacheBasics(t *testing.T) {
	var ct cacheCounters
	c := newNodeCache(1<<20, &ct)
	p := blink.MakePtr(1, 4096)
	if _, ok := c.get(p); ok {
		t.Fatal("empty cache hit")
	}
	src := nodeBytes(1, 512)
	c.put(p, src)
	src[0] = 9 // the cache holds its own copy
	v, ok := c.get(p)
	if !ok || v[0] != 1 || len(v) != 512 {
		t.Fatalf("get = %v, %v", ok, v[:4])
	}
	c.put(p, nodeBytes(2, 512))
	if v, _ := c.get(p); v[0] != 2 {
		t.Fatalf("replaced copy = %d, want 2", v[0])
	}
	if n, b := c.size(); n != 1 || b != 512+entryOverhead {
		t.Fatalf("size = %d entries, %d bytes", n, b)
	}
	if !c.drop(p) || c.drop(p) {
		t.Fatal("drop: want true then false")
	}
	if _, ok := c.get(p); ok {
		t.Fatal("hit after drop")
	}
	s := ct.snapshot()
	if s.Hits != 2 || s.Misses != 2 || s.Inserts != 2 || s.Invalidations != 1 {
		t.Fatalf("counters %+v", s)
	}
}

// TestNodeCacheBoundedLRU: the cache never holds more bytes than its
// bound, and evicts least recently used nodes first.
func TestNodeCacheBoundedLRU(t *testing.T) {
	var ct cacheCounters
	const nodeSize = 1024
	const bound = 64 * (nodeSize + entryOverhead) // 4 nodes per shard
	c := newNodeCache(bound, &ct)
	// Pointers of one shard, so that LRU order is observable.
	var ptrs []blink.Ptr
	for off := uint64(0); len(ptrs) < 6; off += nodeSize {
		p := blink.MakePtr(1, off)
		if c.shard(p) == c.shard(blink.MakePtr(1, 0)) {
			ptrs = append(ptrs, p)
		}
	}
	for _, p := range ptrs[:4] {
		c.put(p, nodeBytes(byte(p), nodeSize))
	}
	c.get(ptrs[0]) // most recently used now; ptrs[1] is the oldest
	c.put(ptrs[4], nodeBytes(4, nodeSize))
	if _, ok := c.get(ptrs[1]); ok {
		t.Error("least recently used node survived an eviction")
	}
	for _, p := range []blink.Ptr{ptrs[0], ptrs[2], ptrs[3], ptrs[4]} {
		if _, ok := c.get(p); !ok {
			t.Errorf("%v evicted, want kept", p)
		}
	}
	// Fill far beyond the bound from many goroutines.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				p := blink.MakePtr(uint32(g+2), uint64(i)*nodeSize)
				c.put(p, nodeBytes(byte(i), nodeSize))
				c.get(p)
			}
		})
	}
	wg.Wait()
	if _, b := c.size(); b > bound {
		t.Errorf("cache holds %d bytes, bound %d", b, bound)
	}
	if ct.evictions.Load() == 0 {
		t.Error("no evictions counted")
	}
	var nilCache *nodeCache
	nilCache.put(ptrs[0], nodeBytes(1, nodeSize))
	if _, ok := nilCache.get(ptrs[0]); ok || nilCache.drop(ptrs[0]) {
		t.Error("disabled cache cached")
	}
}

func rng(min, max string) keyRange {
	var r keyRange
	if min != "" {
		r.min = []byte(min)
	}
	if max != "" {
		r.max = []byte(max)
	}
	return r
}

func mega(p uint64, level int, min, max string) meganodeInfo {
	return meganodeInfo{ptr: blink.MakePtr(1, p<<20), level: level, height: 3, rng: rng(min, max)}
}

// TestPathCacheDeepestCovering: lookup returns the lowest-level meganode
// covering the key (paper §3: paths "leading to the leaf-level
// meganodes, indexed by the key range covered by that meganode").
func TestPathCacheDeepestCovering(t *testing.T) {
	var ct cacheCounters
	c := newPathCache(16, &ct)
	c.insert(mega(1, 2, "", ""))
	c.insert(mega(2, 1, "", "m"))
	c.insert(mega(3, 1, "m", ""))
	c.insert(mega(4, 0, "c", "f"))
	c.insert(mega(5, 0, "f", "h"))
	for _, tt := range []struct {
		key  string
		want uint64
	}{
		{"a", 2}, {"c", 4}, {"e", 4}, {"f", 5}, {"g\xff", 5}, {"h", 2}, {"l", 2}, {"m", 3}, {"zz", 3},
	} {
		got, ok := c.lookup([]byte(tt.key))
		if !ok || got.ptr != blink.MakePtr(1, tt.want<<20) {
			t.Errorf("lookup(%q) = %v %v, want meganode %d", tt.key, got.ptr, ok, tt.want)
		}
	}
	c.drop(blink.MakePtr(1, 2<<20))
	c.drop(blink.MakePtr(1, 3<<20))
	if got, _ := c.lookup([]byte("a")); got.ptr != blink.MakePtr(1, 1<<20) {
		t.Errorf("after dropping level 1: lookup(a) = %v, want the root", got.ptr)
	}
	c.clear()
	if _, ok := c.lookup([]byte("a")); ok || c.len() != 0 {
		t.Error("hit after clear")
	}
}

// TestPathCacheReplacesOverlaps: a meganode that split shows up with a
// smaller range, and its new right sibling with the rest: entries of a
// level never overlap, the newest wins.
func TestPathCacheReplacesOverlaps(t *testing.T) {
	var ct cacheCounters
	c := newPathCache(16, &ct)
	c.insert(mega(1, 0, "a", "z"))
	c.insert(mega(2, 0, "m", "z")) // the right half moved to meganode 2
	if got, _ := c.lookup([]byte("q")); got.ptr != blink.MakePtr(1, 2<<20) {
		t.Errorf("lookup(q) = %v, want meganode 2", got.ptr)
	}
	if _, ok := c.lookup([]byte("b")); ok {
		t.Error("the stale [a, z) entry still answers")
	}
	c.insert(mega(1, 0, "a", "m"))
	if got, _ := c.lookup([]byte("b")); got.ptr != blink.MakePtr(1, 1<<20) {
		t.Errorf("lookup(b) = %v, want meganode 1", got.ptr)
	}
	if c.len() != 2 {
		t.Errorf("len = %d, want 2", c.len())
	}
	// The same meganode with a new range replaces its entry.
	c.insert(mega(2, 0, "p", "z"))
	if _, ok := c.lookup([]byte("n")); ok {
		t.Error("old range of meganode 2 still answers")
	}
	// fresh recognises an unchanged entry without allocating, and keeps
	// the local root learnt from a header.
	c.setRoot(blink.MakePtr(1, 2<<20), blink.MakePtr(1, 2<<20+512))
	if !c.fresh(blink.MakePtr(1, 2<<20), 0, 3, &wire.KeyRange{Min: []byte("p"), Max: []byte("z")}) {
		t.Error("fresh = false for an unchanged entry")
	}
	if c.fresh(blink.MakePtr(1, 2<<20), 0, 3, &wire.KeyRange{Min: []byte("p"), MaxInf: true}) {
		t.Error("fresh = true for a changed range")
	}
	c.insert(mega(2, 0, "p", "z")) // same info, no root: the root is kept
	if got, _ := c.lookup([]byte("q")); got.root != blink.MakePtr(1, 2<<20+512) {
		t.Errorf("root = %v after re-insert, want kept", got.root)
	}
	if ct.invalidations.Load() < 2 {
		t.Errorf("invalidations = %d, want the replaced entries counted", ct.invalidations.Load())
	}
}

// TestPathCacheLRU: at most max entries, the least recently used go
// first.
func TestPathCacheLRU(t *testing.T) {
	var ct cacheCounters
	c := newPathCache(4, &ct)
	for i := range 4 {
		c.insert(mega(uint64(i+1), 0, fmt.Sprintf("k%d", i), fmt.Sprintf("k%d~", i)))
	}
	c.lookup([]byte("k0x")) // k0 becomes most recent; k1 is the oldest
	c.insert(mega(9, 0, "z", ""))
	if c.len() != 4 {
		t.Fatalf("len = %d, want 4", c.len())
	}
	if _, ok := c.lookup([]byte("k1x")); ok {
		t.Error("least recently used entry survived")
	}
	for _, k := range []string{"k0x", "k2x", "k3x", "zz"} {
		if _, ok := c.lookup([]byte(k)); !ok {
			t.Errorf("lookup(%q) missed", k)
		}
	}
	if ct.evictions.Load() != 1 {
		t.Errorf("evictions = %d, want 1", ct.evictions.Load())
	}
	var nilCache *pathCache
	nilCache.insert(mega(1, 0, "", ""))
	if _, ok := nilCache.lookup([]byte("a")); ok {
		t.Error("disabled path cache hit")
	}
}

// TestPathCacheConcurrent hammers the cache from several goroutines
// (for the race detector) and checks its invariants afterwards.
func TestPathCacheConcurrent(t *testing.T) {
	var ct cacheCounters
	c := newPathCache(64, &ct)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				lo := fmt.Sprintf("%03d", (i*7+g)%500)
				hi := fmt.Sprintf("%03d", (i*7+g)%500+3)
				c.insert(meganodeInfo{ptr: blink.MakePtr(1, uint64(i%300+1)<<20), level: i % 2, height: 2, rng: rng(lo, hi)})
				c.lookup([]byte(lo))
				if i%10 == 0 {
					c.drop(blink.MakePtr(1, uint64(i%300+1)<<20))
				}
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for lvl, lv := range c.mu.levels {
		for i, e := range lv {
			n++
			if e.info.level != lvl || c.mu.byPtr[e.info.ptr] != e {
				t.Fatalf("entry %v misfiled", e.info.ptr)
			}
			if i > 0 && lv[i-1].info.rng.overlaps(&e.info.rng) {
				t.Fatalf("level %d: overlapping entries %q..%q and %q..%q", lvl,
					lv[i-1].info.rng.min, lv[i-1].info.rng.max, e.info.rng.min, e.info.rng.max)
			}
		}
	}
	if n != len(c.mu.byPtr) || n > 64 {
		t.Fatalf("%d entries in levels, %d by pointer, max 64", n, len(c.mu.byPtr))
	}
}
