package wal

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// StableStore is one region's raft.StableStore (current term, last vote)
// over the region's stable keys in the shared pebble store. Get it with
// DB.Stable.
//
// Reads are served from an in-memory copy of the region's acknowledged
// values (loaded on first use with an iterator bounded to the region's
// stable keys). That copy is what makes a failed Set invisible: pebble
// applies a batch to its memtable before the WAL sync's outcome is known,
// and a raft that read back a vote whose Set failed could grant that vote
// again without it being durable (a second vote in the same term after a
// restart).
//
// Concurrency: all methods are safe for concurrent use; Sets of one region
// are serialised, Gets never wait for a sync.
type StableStore struct {
	db     *DB
	region uint32

	// wmu serialises writes and the first load.
	wmu sync.Mutex
	mu  struct {
		sync.RWMutex
		loaded bool
		vals   map[string][]byte // acknowledged values; never modified in place
	}
}

var _ raft.StableStore = (*StableStore)(nil)

// Region returns the region ID of the store.
func (s *StableStore) Region() uint32 { return s.region }

// Set stores val under key, synced before it returns nil. The store keeps
// a copy of val.
func (s *StableStore) Set(key, val []byte) error {
	if err := s.db.acquire(); err != nil {
		return err
	}
	defer s.db.life.RUnlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.loadLocked(); err != nil {
		return err
	}
	b := s.db.pdb.NewBatch()
	defer b.Close()
	_ = b.Set(stableKey(s.region, key), val, nil)
	if err := s.db.commit(b, 1); err != nil {
		return fmt.Errorf("wal: region %d: set stable %q: %w", s.region, key, err)
	}
	s.mu.Lock()
	s.mu.vals[string(key)] = append([]byte{}, val...)
	s.mu.Unlock()
	return nil
}

// Get returns a copy of key's value (a non-nil empty slice for a value set
// empty), or exactly ErrNotFound (Error() == "not found", unwrapped, which
// is what raft tests for) if key was never set.
func (s *StableStore) Get(key []byte) ([]byte, error) {
	if err := s.load(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	v, ok := s.mu.vals[string(key)]
	s.mu.RUnlock()
	if !ok {
		return nil, ErrNotFound
	}
	return append([]byte{}, v...), nil
}

// SetUint64 stores val (8 bytes little-endian) under key; see Set.
func (s *StableStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, putUint64(val))
}

// GetUint64 returns key's value as set by SetUint64, or (0, ErrNotFound)
// if key was never set (raft accepts both a nil error and "not found"), or
// an error wrapping ErrCorruption if the value is not 8 bytes.
func (s *StableStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: region %d: stable %q holds %d bytes, not a uint64", ErrCorruption, s.region, key, len(v))
	}
	return binary.LittleEndian.Uint64(v), nil
}

// load makes sure the acknowledged values are in memory.
func (s *StableStore) load() error {
	if s.db.isClosed.Load() {
		return ErrClosed
	}
	s.mu.RLock()
	loaded := s.mu.loaded
	s.mu.RUnlock()
	if loaded {
		return nil
	}
	if err := s.db.acquire(); err != nil {
		return err
	}
	defer s.db.life.RUnlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.loadLocked()
}

// loadLocked reads the region's stable values from pebble if not loaded.
// REQUIRES: s.wmu held, the DB acquired.
func (s *StableStore) loadLocked() error {
	s.mu.RLock()
	loaded := s.mu.loaded
	s.mu.RUnlock()
	if loaded {
		return nil
	}
	lower := regionPrefix(kindStable, s.region)
	it, err := s.db.pdb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: stableUpper(s.region)})
	if err != nil {
		return fmt.Errorf("wal: region %d: load stable values: %w", s.region, err)
	}
	vals := make(map[string][]byte)
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("wal: region %d: load stable values: %w", s.region, err)
		}
		vals[string(it.Key()[len(lower):])] = append([]byte{}, v...)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("wal: region %d: load stable values: %w", s.region, err)
	}
	s.mu.Lock()
	s.mu.loaded, s.mu.vals = true, vals
	s.mu.Unlock()
	return nil
}
