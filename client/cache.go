package client

import (
	"sync"

	"github.com/cellstore/cell/blink"
)

// nodeCache is the client's cache of validated node copies (paper §3:
// "Clients cache B-link tree nodes to accelerate future traversals,
// maintaining an LRU cache of up to 128MB of 1KB nodes"), keyed by the
// node's pointer. Only copies that blink.CheckCopy accepted are cached,
// and only of nodes high enough above the leaves (the caller decides, see
// cacheable). Entries are advisory: a copy may be stale, and the traversal
// drops it when it leads somewhere wrong (see clientside.go).
//
// The cache is split into shards, each an LRU list bounded in bytes, so
// that concurrent traversals rarely contend. A cached copy is immutable:
// get hands out the cached slice itself, which stays valid (the garbage
// collector keeps it) after the entry is evicted or dropped.
//
// A nil *nodeCache is a disabled cache: every method is a no-op.
type nodeCache struct {
	ct       *cacheCounters
	maxShard int64 // byte budget per shard
	shards   [nodeShards]nodeShard
}

const (
	nodeShards = 16
	// entryOverhead approximates the bytes an entry costs beyond its
	// copy: the entry struct and its map slot.
	entryOverhead = 96
)

type nodeShard struct {
	mu    sync.Mutex
	m     map[blink.Ptr]*nodeEntry
	lru   nodeEntry // sentinel: lru.next is the most recently used
	bytes int64
	_     [40]byte // keep shards on separate cache lines
}

type nodeEntry struct {
	ptr        blink.Ptr
	data       []byte // immutable validated copy
	prev, next *nodeEntry
}

// newNodeCache returns a cache of at most maxBytes, or nil (disabled) for
// maxBytes <= 0.
func newNodeCache(maxBytes int64, ct *cacheCounters) *nodeCache {
	if maxBytes <= 0 {
		return nil
	}
	c := &nodeCache{ct: ct, maxShard: max(maxBytes/nodeShards, 1)}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[blink.Ptr]*nodeEntry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
	}
	return c
}

func (c *nodeCache) shard(p blink.Ptr) *nodeShard {
	return &c.shards[(uint64(p)*0x9e3779b97f4a7c15)>>60]
}

// get returns the cached copy of the node at p and marks it used.
func (c *nodeCache) get(p blink.Ptr) (blink.View, bool) {
	if c == nil {
		return nil, false
	}
	s := c.shard(p)
	s.mu.Lock()
	e := s.m[p]
	if e == nil {
		s.mu.Unlock()
		c.ct.misses.Add(1)
		return nil, false
	}
	s.moveToFront(e)
	data := e.data
	s.mu.Unlock()
	c.ct.hits.Add(1)
	return blink.View(data), true
}

// put caches a copy of node (a copy CheckCopy accepted) as the node at p,
// replacing an older copy, and evicts least recently used entries beyond
// the shard's budget.
func (c *nodeCache) put(p blink.Ptr, node []byte) {
	if c == nil {
		return
	}
	data := make([]byte, len(node))
	copy(data, node)
	cost := int64(len(data) + entryOverhead)
	s := c.shard(p)
	s.mu.Lock()
	if old := s.m[p]; old != nil {
		s.bytes += int64(len(data) - len(old.data))
		old.data = data
		s.moveToFront(old)
	} else {
		e := &nodeEntry{ptr: p, data: data}
		s.m[p] = e
		s.pushFront(e)
		s.bytes += cost
	}
	evicted := 0
	for s.bytes > c.maxShard && s.lru.prev != &s.lru {
		s.remove(s.lru.prev)
		evicted++
	}
	s.mu.Unlock()
	c.ct.inserts.Add(1)
	if evicted > 0 {
		c.ct.evictions.Add(uint64(evicted))
	}
}

// drop removes the node at p, if cached, and reports whether it was.
func (c *nodeCache) drop(p blink.Ptr) bool {
	if c == nil {
		return false
	}
	s := c.shard(p)
	s.mu.Lock()
	e := s.m[p]
	if e != nil {
		s.remove(e)
	}
	s.mu.Unlock()
	if e != nil {
		c.ct.invalidations.Add(1)
	}
	return e != nil
}

// size returns the number of cached nodes and the bytes they cost.
func (c *nodeCache) size() (entries int, bytes int64) {
	if c == nil {
		return 0, 0
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		entries += len(s.m)
		bytes += s.bytes
		s.mu.Unlock()
	}
	return entries, bytes
}

// clear empties the cache.
func (c *nodeCache) clear() {
	if c == nil {
		return
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.bytes = 0
		s.mu.Unlock()
	}
}

// REQUIRES: s.mu held (all list helpers).

func (s *nodeShard) pushFront(e *nodeEntry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

func (s *nodeShard) unlink(e *nodeEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *nodeShard) moveToFront(e *nodeEntry) {
	if s.lru.next == e {
		return
	}
	s.unlink(e)
	s.pushFront(e)
}

func (s *nodeShard) remove(e *nodeEntry) {
	s.unlink(e)
	delete(s.m, e.ptr)
	s.bytes -= int64(len(e.data) + entryOverhead)
}
