package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// LogStore is one region's raft log: a raft.LogStore over the region's log
// keys in the shared pebble store. Get it with DB.Log.
//
// Invariant: the region's log is the contiguous run of indexes
// [first, last] (both 0 when empty), every one of them stored. StoreLogs
// and DeleteRange keep it so (IsMonotonic is true), and Check verifies it.
//
// Concurrency: all methods are safe for concurrent use. Writes of one
// region are serialised (mu is held across the synced commit); writes of
// different regions proceed in parallel and share WAL fsyncs (commit.go).
// Reads take no lock: they use the published bounds and pebble's own
// snapshot of the key.
type LogStore struct {
	db     *DB
	region uint32

	// mu serialises writes and the first load of bounds.
	mu sync.Mutex
	// b holds the acknowledged bounds once loaded (nil before). Writes
	// publish a shrunk range before their commit (a delete or an
	// overwrite) and a grown one after it, so a reader never returns an
	// entry outside what was acknowledged, nor calls a deleted entry
	// corruption.
	b atomic.Pointer[bounds]

	// gen counts the deletions and overwrites of log entries, twice each:
	// bumped before the shrunk bounds are published and after the commit,
	// so it is odd while one is in flight. The entries read ahead (ahead)
	// of an older generation are dropped, and GetLog tells a deleted entry
	// from a lost one by it.
	gen   atomic.Uint64
	ahead readAhead
	// recent holds the newest entries stored, for raft's reads of what it
	// just stored (recent.go).
	recent recentLogs

	// staged is the commit index raft staged for the next StoreLogs (0 if
	// none); commitIndex the last one a StoreLogs made durable (loaded
	// with the bounds).
	staged, commitIndex atomic.Uint64

	// recentOff, for this package's tests, makes GetLog read pebble only
	// (set before the store is used).
	recentOff bool

	// afterMiss, for this package's tests, runs when getPoint's Get finds
	// no entry, before it decides what that means; nil otherwise.
	afterMiss func()
}

// bounds are a log's first and last index; the zero value is the empty log.
type bounds struct{ first, last uint64 }

func (b bounds) empty() bool { return b.last == 0 }

func (b bounds) contains(i uint64) bool { return !b.empty() && i >= b.first && i <= b.last }

var (
	_ raft.LogStore               = (*LogStore)(nil)
	_ raft.MonotonicLogStore      = (*LogStore)(nil)
	_ raft.CommitTrackingLogStore = (*LogStore)(nil)
)

// Region returns the region ID of the store.
func (s *LogStore) Region() uint32 { return s.region }

// IsMonotonic implements raft.MonotonicLogStore: the store keeps the log
// contiguous, so raft deletes the whole log after installing or restoring a
// snapshot instead of relying on a gap (one range deletion here).
func (s *LogStore) IsMonotonic() bool { return true }

// FirstIndex returns the first index of the log, 0 if it is empty.
func (s *LogStore) FirstIndex() (uint64, error) {
	b, err := s.bounds()
	return b.first, err
}

// LastIndex returns the last index of the log, 0 if it is empty.
func (s *LogStore) LastIndex() (uint64, error) {
	b, err := s.bounds()
	return b.last, err
}

// bounds returns the published bounds, loading them on first use.
func (s *LogStore) bounds() (bounds, error) {
	if s.db.isClosed.Load() {
		return bounds{}, ErrClosed
	}
	if b := s.b.Load(); b != nil {
		return *b, nil
	}
	if err := s.db.acquire(); err != nil {
		return bounds{}, err
	}
	defer s.db.life.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadLocked()
}

// loadLocked returns the bounds, reading them from pebble (with an iterator
// bounded to the region's log keys) if not loaded yet.
// REQUIRES: s.mu held, the DB acquired.
func (s *LogStore) loadLocked() (bounds, error) {
	if b := s.b.Load(); b != nil {
		return *b, nil
	}
	it, err := s.db.pdb.NewIter(&pebble.IterOptions{LowerBound: logKey(s.region, 0), UpperBound: logUpper(s.region)})
	if err != nil {
		return bounds{}, fmt.Errorf("wal: region %d: load log bounds: %w", s.region, err)
	}
	var b bounds
	if it.First() {
		if _, b.first, err = parseLogKey(it.Key()); err == nil && it.Last() {
			_, b.last, err = parseLogKey(it.Key())
		}
	}
	if cerr := it.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && !b.empty() && b.first > b.last {
		err = fmt.Errorf("%w: first index %d above last %d", ErrCorruption, b.first, b.last)
	}
	if err == nil {
		err = s.loadCommitIndexLocked()
	}
	if err != nil {
		return bounds{}, fmt.Errorf("wal: region %d: load log bounds: %w", s.region, err)
	}
	s.b.Store(&b)
	return b, nil
}

// loadCommitIndexLocked reads the durable commit index.
// REQUIRES: s.mu held, the DB acquired.
func (s *LogStore) loadCommitIndexLocked() error {
	v, closer, err := s.db.pdb.Get(commitKey(s.region))
	if errors.Is(err, pebble.ErrNotFound) {
		s.commitIndex.Store(0)
		return nil
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	if len(v) != 8 {
		return fmt.Errorf("%w: commit index value %x", ErrCorruption, v)
	}
	s.commitIndex.Store(binary.LittleEndian.Uint64(v))
	return nil
}

// StageCommitIndex implements raft.CommitTrackingLogStore (used by raft
// when Config.RestoreCommittedLogs is set): idx is written with, and only
// with, the next StoreLogs batch of the region.
func (s *LogStore) StageCommitIndex(idx uint64) error {
	s.staged.Store(idx)
	return nil
}

// GetCommitIndex implements raft.CommitTrackingLogStore: the commit index
// that the last acknowledged StoreLogs carried, at most LastIndex; 0 if
// none.
func (s *LogStore) GetCommitIndex() (uint64, error) {
	b, err := s.bounds()
	if err != nil {
		return 0, err
	}
	return min(s.commitIndex.Load(), b.last), nil
}

// publish makes b the bounds readers see.
func (s *LogStore) publish(b bounds) { s.b.Store(&b) }

// GetLog reads the entry at index into l (whose Data and Extensions are
// then fresh slices owned by the caller): one of the newest entries stored
// from memory (recent.go), an older one from pebble. It returns raft.ErrLogNotFound
// (unwrapped, as raft compares it) for an index outside the acknowledged
// log, and an error wrapping ErrCorruption for a record that does not
// decode or does not carry its key's index.
func (s *LogStore) GetLog(index uint64, l *raft.Log) error {
	gen := s.gen.Load() // before the bounds: see getPoint
	b, err := s.bounds()
	if err != nil {
		return err
	}
	if !b.contains(index) {
		return raft.ErrLogNotFound
	}
	if !s.recentOff && s.recent.get(index, gen, l) {
		return nil
	}
	return s.getStored(index, l, b, gen)
}

// getStored is GetLog's read from pebble: from the read-ahead cache, or a
// point read. gen and b are what GetLog loaded.
func (s *LogStore) getStored(index uint64, l *raft.Log, b bounds, gen uint64) error {
	if err := s.db.acquire(); err != nil {
		return err
	}
	defer s.db.life.RUnlock()
	if ok, err := s.fromReadAhead(index, l, b); ok || err != nil {
		return err
	}
	return s.getPoint(index, l, b, gen)
}

// getPoint reads the entry at index with one pebble Get (GetLog's read
// when nothing was read ahead). gen is the log's generation loaded before
// b: a missing entry is corruption only if no deletion or overwrite was in
// flight then (gen even) or has started since (gen unchanged). Comparing
// with the bounds published now would not do: an overwrite that cut the
// log below index and an append that grew it back can both land between
// b and the Get, so the entry is missing and yet inside the bounds again.
// REQUIRES: the DB acquired, b.contains(index).
func (s *LogStore) getPoint(index uint64, l *raft.Log, b bounds, gen uint64) error {
	v, closer, err := s.db.pdb.Get(logKey(s.region, index))
	if errors.Is(err, pebble.ErrNotFound) {
		if s.afterMiss != nil {
			s.afterMiss()
		}
		// Deleted since b was read (deletes bump gen before they shrink the
		// bounds and again after they commit), or hidden by a write that
		// failed: not found either way.
		if gen%2 == 1 || s.gen.Load() != gen || s.db.Err() != nil {
			return raft.ErrLogNotFound
		}
		return fmt.Errorf("%w: region %d: log index %d missing inside [%d, %d]", ErrCorruption, s.region, index, b.first, b.last)
	}
	if err != nil {
		return fmt.Errorf("wal: region %d: get log %d: %w", s.region, index, err)
	}
	defer closer.Close()
	if err := decodeLog(v, l); err != nil {
		return fmt.Errorf("region %d, log index %d: %w", s.region, index, err)
	}
	if l.Index != index {
		return fmt.Errorf("%w: region %d: log key %d holds the record of index %d", ErrCorruption, s.region, index, l.Index)
	}
	return nil
}

// StoreLog stores one entry; see StoreLogs.
func (s *LogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores logs, whose indexes must be consecutive and non-zero
// (else ErrOutOfOrder, nothing written), in one batch, synced before it
// returns nil. It truncates and appends, as a raft follower needs, so the
// log stays contiguous:
//
//   - logs[0].Index == last+1 (or the log is empty): append.
//   - first <= logs[0].Index <= last: the entries from logs[0].Index on are
//     replaced (a conflicting suffix).
//   - otherwise (a gap after last, or below first): the old log is deleted
//     and the log restarts at logs[0].Index. Raft only does this after a
//     snapshot covers the gap, e.g. a follower that crashed between
//     installing a snapshot and deleting its old log.
//
// On error nothing is acknowledged; the entries from logs[0].Index on are
// then hidden from GetLog (see doc.go).
func (s *LogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	lo := logs[0].Index
	for i, l := range logs {
		if l.Index == 0 || l.Index != lo+uint64(i) {
			return fmt.Errorf("%w: region %d: entry %d of StoreLogs has index %d, want %d",
				ErrOutOfOrder, s.region, i, l.Index, lo+uint64(i))
		}
		if _, err := encodedLogLen(l); err != nil {
			return fmt.Errorf("region %d: %w", s.region, err)
		}
	}
	hi := lo + uint64(len(logs)) - 1
	if err := s.db.acquire(); err != nil {
		return err
	}
	defer s.db.life.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.db.Err(); err != nil { // refused before anything is hidden
		return fmt.Errorf("wal: region %d: store logs [%d, %d]: %w", s.region, lo, hi, err)
	}
	cur, err := s.loadLocked()
	if err != nil {
		return err
	}

	batch := s.db.pdb.NewBatch()
	defer batch.Close()
	next := bounds{first: lo, last: hi}
	overwrite := false
	switch {
	case cur.empty() || lo == cur.last+1:
		if !cur.empty() {
			next.first = cur.first
		}
	case lo >= cur.first && lo <= cur.last:
		overwrite = true
		s.gen.Add(1)
		_ = batch.DeleteRange(logKey(s.region, lo), logUpper(s.region), nil)
		next.first = cur.first
		if lo > cur.first {
			s.publish(bounds{first: cur.first, last: lo - 1})
		} else {
			s.publish(bounds{})
		}
	default:
		s.db.log.Info("wal: log does not connect to the stored one; starting over",
			"region", s.region, "first", cur.first, "last", cur.last, "append", lo)
		overwrite = true
		s.gen.Add(1)
		_ = batch.DeleteRange(regionPrefix(kindLog, s.region), logUpper(s.region), nil)
		s.publish(bounds{})
	}
	var key []byte
	for _, l := range logs {
		n, _ := encodedLogLen(l) // checked above
		key = appendLogKey(key[:0], s.region, l.Index)
		op := batch.SetDeferred(len(key), n)
		copy(op.Key, key)
		encodeLog(op.Value, l)
		if err := op.Finish(); err != nil {
			if overwrite {
				s.gen.Add(1) // nothing in flight any more; the bounds stay shrunk
			}
			return fmt.Errorf("wal: region %d: batch set: %w", s.region, err)
		}
	}
	commit := min(s.staged.Load(), hi)
	if commit > 0 {
		_ = batch.Set(commitKey(s.region), putUint64(commit), nil)
	}
	err = s.db.commit(batch, 1)
	if overwrite {
		s.gen.Add(1) // entries read ahead during the commit are stale
	}
	if err != nil {
		return fmt.Errorf("wal: region %d: store logs [%d, %d]: %w", s.region, lo, hi, err)
	}
	if commit > 0 {
		s.commitIndex.Store(commit)
	}
	s.recent.add(logs, s.gen.Load())
	s.publish(next)
	return nil
}

// DeleteRange deletes the entries [min, max], durably. The range must
// cover a prefix or a suffix of the log (or all of it, or none of it: a
// no-op that writes nothing); a hole in the middle is refused with
// ErrOutOfOrder. Raft deletes prefixes after a snapshot, suffixes when a
// follower's log conflicts with the leader's, and everything after
// installing a snapshot (IsMonotonic).
//
// A prefix (or the whole log) goes with pebble's Excise: those entries
// are old, flushed and compacted into the lower levels by the time a
// snapshot lets raft drop them, and a range deletion over them would make
// pebble read them back to compact it away (seconds of CPU after a log
// that grew to a gigabyte between two snapshots), while Excise drops the
// files inside the range and cuts the others into virtual sstables. A
// suffix is young, mostly still in the memtable, and goes with one synced
// range deletion.
//
// The deleted entries are hidden from GetLog before the commit starts; if
// it fails they stay hidden (not acknowledged either way).
func (s *LogStore) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	if err := s.db.acquire(); err != nil {
		return err
	}
	defer s.db.life.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.db.Err(); err != nil {
		return fmt.Errorf("wal: region %d: delete range [%d, %d]: %w", s.region, min, max, err)
	}
	cur, err := s.loadLocked()
	if err != nil {
		return err
	}
	if cur.empty() || max < cur.first || min > cur.last {
		return nil
	}
	var next bounds
	var start, end []byte
	excise := !s.db.truncateByRangeDeletion
	switch {
	case min <= cur.first && max >= cur.last:
		start, end = regionPrefix(kindLog, s.region), logUpper(s.region)
	case min <= cur.first:
		next = bounds{first: max + 1, last: cur.last}
		start, end = regionPrefix(kindLog, s.region), logKey(s.region, max+1)
	case max >= cur.last:
		next = bounds{first: cur.first, last: min - 1}
		start, end = logKey(s.region, min), logUpper(s.region)
		excise = false
	default:
		return fmt.Errorf("%w: region %d: DeleteRange(%d, %d) would cut a hole in the log [%d, %d]",
			ErrOutOfOrder, s.region, min, max, cur.first, cur.last)
	}
	s.gen.Add(1)
	s.publish(next)
	if excise {
		err = s.db.excise(pebble.KeyRange{Start: start, End: end}, 1)
	} else {
		batch := s.db.pdb.NewBatch()
		_ = batch.DeleteRange(start, end, nil)
		err = s.db.commit(batch, 1)
		_ = batch.Close()
	}
	s.gen.Add(1)
	if err != nil {
		return fmt.Errorf("wal: region %d: delete range [%d, %d]: %w", s.region, min, max, err)
	}
	return nil
}
