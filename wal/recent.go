package wal

import (
	"sync"

	"github.com/hashicorp/raft"
)

// recentLen is how many of a region's newest entries are kept in memory,
// and recentMaxData the largest entry (Data plus Extensions) kept: a
// region holds at most recentLen × recentMaxData bytes here, 2 MiB.
//
// Raft reads an entry back right after storing it: a leader's replication
// goroutine to send it (setupAppendEntries), a follower to apply it once it
// is committed (processLogs). A pebble read of the newest entries costs an
// iterator over the levels whose sstables span the region's log keys (with
// several regions in one store, every file holding older entries of a
// lower region does), which is most of a replicated write's log CPU
// (BenchmarkGetLogTail). recentLen covers raft's largest AppendEntries
// (server.raftConfig's MaxAppendEntries, 256) and then some.
const (
	recentLen     = 512
	recentMaxData = 4 << 10
)

// recentLogs holds the entries of a region's last StoreLogs calls, by
// index modulo recentLen, each with the log's generation (LogStore.gen)
// when it was stored. An entry serves GetLog only while the generation is
// unchanged and even: a deletion or overwrite since then (or in flight)
// may have removed or replaced it. The ring holds the *raft.Log values
// raft handed to StoreLogs (raft never changes a log after storing it);
// get copies Data and Extensions out, so that what GetLog returns is the
// caller's, as an entry read from pebble is (one allocation of at most
// recentMaxData bytes, where a pebble read allocates as much and more).
type recentLogs struct {
	mu   sync.RWMutex
	ring [recentLen]recentEntry
}

type recentEntry struct {
	gen uint64
	l   *raft.Log
}

// add keeps logs, stored at generation gen (even: the caller holds the
// region's write lock, which every generation bump happens under).
func (r *recentLogs) add(logs []*raft.Log, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range logs {
		e := &r.ring[l.Index%recentLen]
		if len(l.Data)+len(l.Extensions) > recentMaxData {
			*e = recentEntry{} // an older entry in the slot is no use either
			continue
		}
		*e = recentEntry{gen: gen, l: l}
	}
}

// get copies the entry at index into l if it is kept and of generation gen
// (the caller loaded gen before it checked index against the bounds, so
// the entry is acknowledged and was not deleted or replaced since).
func (r *recentLogs) get(index, gen uint64, l *raft.Log) bool {
	if gen%2 == 1 {
		return false
	}
	r.mu.RLock()
	e := r.ring[index%recentLen]
	r.mu.RUnlock()
	if e.l == nil || e.l.Index != index || e.gen != gen {
		return false
	}
	src := e.l
	*l = raft.Log{Index: src.Index, Term: src.Term, Type: src.Type, AppendedAt: src.AppendedAt}
	// As decodeLog does: one buffer for both, nil for an empty one.
	if n := len(src.Data) + len(src.Extensions); n > 0 {
		buf := make([]byte, n)
		copy(buf[copy(buf, src.Data):], src.Extensions)
		if len(src.Data) > 0 {
			l.Data = buf[:len(src.Data):len(src.Data)]
		}
		if len(src.Extensions) > 0 {
			l.Extensions = buf[len(src.Data):]
		}
	}
	return true
}

// clear drops every entry (the region's log was dropped).
func (r *recentLogs) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring = [recentLen]recentEntry{}
}
