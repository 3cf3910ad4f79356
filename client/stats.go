package client

import (
	"fmt"
	"sync/atomic"

	"github.com/cellstore/cell/locality"
)

// retryCause is why an operation (or one step of it) was retried.
type retryCause uint8

const (
	// causeTorn: a node copy raced with a writer (versions differ or odd).
	causeTorn retryCause = iota
	// causeInvalid: a node or meganode header was free or invalidated.
	causeInvalid
	// causeOutOfRange: a node no longer covers the key (reused).
	causeOutOfRange
	// causeCRC: an extent record did not match its leaf entry's CRC.
	causeCRC
	// causeStaleCache: a cached node or path was dropped as stale.
	causeStaleCache
	// causeConnLost: a connection failed or could not be made.
	causeConnLost
	// causeReadFailed: a one-sided read was refused (revoked or unknown
	// key, out of bounds): the region moved or its server restarted.
	causeReadFailed
	// causeServerBusy: the server answered NeedsRetry, Unavailable,
	// Overloaded or Expired (not executed).
	causeServerBusy
	// causeRedirect: WrongServer, StaleEpoch or UnknownRegion.
	causeRedirect
	// causeRestart: the server answered KeyOutOfRange or OutOfBounds for
	// the meganode the client started at (stale routing).
	causeRestart
	// causeSeqPassed: the server answered Unverifiable to a write's first
	// attempt: its sequence number was below what the region's
	// at-most-once table forgot of this client (many later writes of the
	// client applied first). Not applied; sent again as a new write.
	causeSeqPassed
	numCauses
)

var causeNames = [numCauses]string{
	"torn", "invalid", "out-of-range", "crc", "stale-cache", "conn-lost",
	"read-failed", "server-busy", "redirect", "restart", "seq-passed",
}

func (c retryCause) String() string {
	if c < numCauses {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// opKind is the kind of a client operation, for counters and metrics.
type opKind uint8

const (
	opGet opKind = iota
	opContains
	opPut
	opDelete
	opRange
	numOpKinds
)

var opNames = [numOpKinds]string{"get", "contains", "put", "delete", "range"}

func (k opKind) String() string {
	if k < numOpKinds {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// counters are the client's running totals. Safe for concurrent use.
type counters struct {
	ops       [numOpKinds][2]atomic.Uint64 // by kind and locality.Method
	errors    [numOpKinds]atomic.Uint64
	hops      [2]atomic.Uint64 // by locality.Method
	reads     atomic.Uint64
	readBytes atomic.Uint64
	retries   [numCauses]atomic.Uint64
	node      cacheCounters
	path      cacheCounters
}

// cacheCounters count one cache's traffic.
type cacheCounters struct {
	hits, misses, inserts, evictions, invalidations atomic.Uint64
}

func (c *cacheCounters) snapshot() CacheStats {
	return CacheStats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Inserts: c.inserts.Load(),
		Evictions: c.evictions.Load(), Invalidations: c.invalidations.Load(),
	}
}

// Stats is a snapshot of a client's counters, for tools and tests.
type Stats struct {
	// Ops counts operations by kind ("get", "contains", "put", "delete",
	// "range"); ClientSideOps those whose data was reached client-side;
	// Errors those that failed (ErrNotFound excluded).
	Ops           map[string]uint64 `json:"ops"`
	ClientSideOps map[string]uint64 `json:"client_side_ops"`
	Errors        map[string]uint64 `json:"errors"`
	// ServerHops and ClientHops count meganode hops by search method.
	ServerHops uint64 `json:"server_hops"`
	ClientHops uint64 `json:"client_hops"`
	// Reads and ReadBytes count one-sided reads.
	Reads     uint64 `json:"reads"`
	ReadBytes uint64 `json:"read_bytes"`
	// Retries counts retries by cause: torn, invalid, out-of-range, crc,
	// stale-cache, conn-lost, read-failed, server-busy, redirect, restart.
	Retries map[string]uint64 `json:"retries"`
	// NodeCache and PathCache describe the two caches.
	NodeCache CacheStats `json:"node_cache"`
	PathCache CacheStats `json:"path_cache"`
	// Selector is the locality selector's state.
	Selector locality.Snapshot `json:"selector"`
}

// CacheStats describe one cache.
type CacheStats struct {
	Hits          uint64 `json:"hits"`
	Misses        uint64 `json:"misses"`
	Inserts       uint64 `json:"inserts"`
	Evictions     uint64 `json:"evictions"`
	Invalidations uint64 `json:"invalidations"`
	// Entries and Bytes are the current size (Bytes: node cache only).
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// Retry returns the number of retries for cause name (0 if unknown).
func (s *Stats) Retry(name string) uint64 { return s.Retries[name] }

// TotalRetries sums the retries of every cause.
func (s *Stats) TotalRetries() uint64 {
	var n uint64
	for _, v := range s.Retries {
		n += v
	}
	return n
}

// Stats returns a snapshot of the client's counters. It allocates; call it
// from tools and metrics, not per request.
func (c *Client) Stats() Stats {
	ct := &c.counters
	s := Stats{
		Ops:           make(map[string]uint64, numOpKinds),
		ClientSideOps: make(map[string]uint64, numOpKinds),
		Errors:        make(map[string]uint64, numOpKinds),
		Retries:       make(map[string]uint64, numCauses),
		ServerHops:    ct.hops[locality.ServerSide].Load(),
		ClientHops:    ct.hops[locality.ClientSide].Load(),
		Reads:         ct.reads.Load(),
		ReadBytes:     ct.readBytes.Load(),
		NodeCache:     ct.node.snapshot(),
		PathCache:     ct.path.snapshot(),
		Selector:      c.sel.Snapshot(),
	}
	for k := range numOpKinds {
		cs := ct.ops[k][locality.ClientSide].Load()
		s.Ops[k.String()] = ct.ops[k][locality.ServerSide].Load() + cs
		s.ClientSideOps[k.String()] = cs
		s.Errors[k.String()] = ct.errors[k].Load()
	}
	for r := range numCauses {
		s.Retries[r.String()] = ct.retries[r].Load()
	}
	s.NodeCache.Entries, s.NodeCache.Bytes = c.nodes.size()
	s.PathCache.Entries = c.paths.len()
	return s
}

// countRetry counts one retry for cause.
func (c *Client) countRetry(cause retryCause) { c.counters.retries[cause].Add(1) }
