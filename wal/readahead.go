package wal

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// readAheadLen is how many entries one read of a sequential reader
// fetches: raft reads the log in index order when it restarts (NewRaft's
// scan for configuration entries, then the replay of committed entries)
// and when a leader catches a follower up. One pebble iterator pass over
// readAheadLen entries costs a fraction of readAheadLen point reads
// (BenchmarkGetLogSequential).
const readAheadLen = 128

// readAhead holds entries read ahead of a sequential reader of one
// region's log. Each entry is handed out once (its Data is then the
// caller's). Its entries are of generation gen of the log: a deletion or
// overwrite of log entries (LogStore.gen) drops them.
type readAhead struct {
	mu   sync.Mutex
	gen  uint64
	last uint64 // the index GetLog was last asked for (0: none)
	// buf[pos:n] are the entries from index first on.
	buf    []raft.Log
	pos, n int
	first  uint64
}

// reset empties the cache for generation gen.
func (ra *readAhead) reset(gen uint64) {
	clear(ra.buf[ra.pos:ra.n])
	ra.gen, ra.pos, ra.n, ra.first = gen, 0, 0, 0
}

// fromReadAhead serves GetLog(index) from the read-ahead cache if it can:
// an entry read ahead, or, for a reader that asked for index-1 last, a
// fresh read of up to readAheadLen entries from index on (within b, the
// bounds GetLog checked). It reports whether it filled l. Concurrent
// readers do not wait for each other here: one that finds the cache busy
// makes a point read.
// REQUIRES: the DB acquired, b.contains(index).
func (s *LogStore) fromReadAhead(index uint64, l *raft.Log, b bounds) (bool, error) {
	ra := &s.ahead
	if !ra.mu.TryLock() {
		return false, nil
	}
	defer ra.mu.Unlock()
	if gen := s.gen.Load(); gen != ra.gen {
		ra.reset(gen)
	}
	sequential := ra.last != 0 && index == ra.last+1
	ra.last = index
	if ra.pos < ra.n && index == ra.first {
		s.handOut(l)
		return true, nil
	}
	ra.reset(ra.gen)
	if !sequential {
		return false, nil
	}
	if err := s.fill(index, min(b.last, index+readAheadLen-1)); err != nil {
		ra.reset(ra.gen)
		return false, err
	}
	if ra.pos == ra.n || s.gen.Load() != ra.gen {
		ra.reset(ra.gen)
		return false, nil
	}
	s.handOut(l)
	return true, nil
}

// handOut moves the first entry read ahead into l.
// REQUIRES: s.ahead.mu held, an entry read ahead.
func (s *LogStore) handOut(l *raft.Log) {
	ra := &s.ahead
	*l = ra.buf[ra.pos]
	ra.buf[ra.pos] = raft.Log{}
	ra.pos++
	ra.first++
}

// fill reads the entries [lo, hi] into the empty cache, stopping early at
// one that is missing (deleted meanwhile: GetLog then makes its point
// read and decides).
// REQUIRES: s.ahead.mu held, the cache empty, the DB acquired.
func (s *LogStore) fill(lo, hi uint64) error {
	ra := &s.ahead
	it, err := s.db.pdb.NewIter(&pebble.IterOptions{LowerBound: logKey(s.region, lo), UpperBound: logKey(s.region, hi+1)})
	if err != nil {
		return fmt.Errorf("wal: region %d: read log [%d, %d]: %w", s.region, lo, hi, err)
	}
	if cap(ra.buf) < readAheadLen {
		ra.buf = make([]raft.Log, readAheadLen)
	}
	ra.buf = ra.buf[:cap(ra.buf)]
	ra.first = lo
	want := lo
	for ok := it.First(); ok && ra.n < len(ra.buf); ok = it.Next() {
		_, idx, err := parseLogKey(it.Key())
		if err == nil && idx != want {
			break // a gap: not read ahead
		}
		v, verr := it.ValueAndErr()
		if err == nil {
			err = verr
		}
		if err == nil {
			err = decodeLog(v, &ra.buf[ra.n])
		}
		if err == nil && ra.buf[ra.n].Index != idx {
			err = fmt.Errorf("%w: log key %d holds the record of index %d", ErrCorruption, idx, ra.buf[ra.n].Index)
		}
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("region %d, log index %d: %w", s.region, want, err)
		}
		ra.n++
		want++
	}
	return it.Close()
}
