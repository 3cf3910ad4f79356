package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// DB is the one pebble instance of a server, holding the raft logs and
// stable state of all its regions. It is safe for concurrent use.
//
// Locking notes: DB.life (read) < LogStore.mu < StableStore.wmu <
// StableStore.mu < DB.cq.mu; DB.mu (the store maps) is taken alone.
type DB struct {
	opts Options
	log  *slog.Logger
	pdb  *pebble.DB

	// life guards pdb against Close: every operation holds it for reading
	// from its start to its end, Close for writing. Never taken twice by
	// one goroutine (a waiting Close would deadlock a nested RLock).
	life   sync.RWMutex
	closed bool // guarded by life
	// isClosed mirrors closed for the reads that take no lock.
	isClosed atomic.Bool

	// latched is the first write/sync failure, wrapped with ErrSyncFailed;
	// set once, never cleared.
	latched atomic.Pointer[error]
	// poisoned: pebble panicked inside a commit; its commit pipeline may
	// hold a lock forever, so Close must not call pebble's Close.
	poisoned atomic.Bool

	cq commitQueue

	mu struct {
		sync.Mutex
		logs    map[uint32]*LogStore
		stables map[uint32]*StableStore
	}

	metrics metricsCounters

	// truncateByRangeDeletion makes LogStore.DeleteRange truncate a prefix
	// with a range deletion, as it did before Excise: a knob for tests
	// and for benchmarks that compare the two.
	truncateByRangeDeletion bool
}

// Open opens (creating if needed) the pebble store in opts.Dir. One DB per
// server; pebble's lock file refuses a second Open of the same directory.
func Open(opts Options) (*DB, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	db := &DB{opts: opts, log: opts.Logger.With("component", "wal")}
	db.mu.logs = make(map[uint32]*LogStore)
	db.mu.stables = make(map[uint32]*StableStore)
	popts := &pebble.Options{
		FS:                 &walFS{FS: opts.FS, db: db},
		Logger:             pebbleLogger{db},
		CacheSize:          opts.CacheSize,
		MemTableSize:       opts.MemTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		EventListener:      db.eventListener(),
	}
	pdb, err := pebble.Open(opts.Dir, popts)
	if err != nil {
		return nil, fmt.Errorf("wal: open pebble in %s: %w", opts.Dir, err)
	}
	db.pdb = pdb
	if err := db.checkFormat(); err != nil {
		_ = pdb.Close()
		return nil, err
	}
	return db, nil
}

// checkFormat writes formatVersion into a new store, and refuses a store of
// another version.
func (db *DB) checkFormat() error {
	v, closer, err := db.pdb.Get(metaFormatKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		b := db.pdb.NewBatch()
		defer b.Close()
		_ = b.Set(metaFormatKey, binary.LittleEndian.AppendUint32(nil, formatVersion), nil)
		return db.commit(b, 0)
	case err != nil:
		return fmt.Errorf("wal: read format version: %w", err)
	}
	defer closer.Close()
	if len(v) != 4 {
		return fmt.Errorf("%w: format version value %x", ErrCorruption, v)
	}
	if got := binary.LittleEndian.Uint32(v); got != formatVersion {
		return fmt.Errorf("wal: store format version %d, this build reads %d", got, formatVersion)
	}
	return nil
}

// Close waits for the operations in flight, then closes pebble. Later
// calls of any method return ErrClosed. If the DB latched a failure, Close
// returns that error (after closing pebble, unless pebble panicked in a
// commit, in which case pebble is abandoned: its Close could block
// forever).
func (db *DB) Close() error {
	db.life.Lock()
	defer db.life.Unlock()
	if db.closed {
		return ErrClosed
	}
	db.closed = true
	db.isClosed.Store(true)
	if db.poisoned.Load() {
		return db.Err()
	}
	err := db.pdb.Close()
	if lerr := db.Err(); lerr != nil {
		return lerr
	}
	if err != nil {
		return fmt.Errorf("wal: close pebble: %w", err)
	}
	return nil
}

// acquire holds the DB open for one operation; release with db.life.RUnlock.
func (db *DB) acquire() error {
	db.life.RLock()
	if db.closed {
		db.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// Err returns nil, or the latched write/sync failure: an error wrapping
// ErrSyncFailed and the original error. Once non-nil it stays non-nil for
// the life of the DB; every write of every region fails with it. Reads go
// on (see doc.go for what they show). The server should treat it as fatal:
// stop its raft groups and restart the process, which reopens the store and
// finds exactly what was acknowledged.
func (db *DB) Err() error {
	if p := db.latched.Load(); p != nil {
		return *p
	}
	return nil
}

// fail latches cause (only the first call has an effect).
func (db *DB) fail(cause error) {
	err := cause
	if !errors.Is(cause, ErrSyncFailed) {
		err = fmt.Errorf("%w: %w", ErrSyncFailed, cause)
	}
	if db.latched.CompareAndSwap(nil, &err) {
		db.log.Error("wal: write or sync failed; refusing every write until the store is reopened", "err", cause)
		if f := db.opts.OnFail; f != nil {
			go f(err)
		}
	}
}

// Metrics returns the counters since Open.
func (db *DB) Metrics() Metrics { return db.metrics.snapshot() }

// Log returns region's log store. Every call for one region returns the
// same *LogStore, which caches the region's first and last index.
func (db *DB) Log(region uint32) *LogStore {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.mu.logs[region]
	if !ok {
		s = &LogStore{db: db, region: region}
		db.mu.logs[region] = s
	}
	return s
}

// Stable returns region's stable store. Every call for one region returns
// the same *StableStore, which caches the region's acknowledged values.
func (db *DB) Stable(region uint32) *StableStore {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.mu.stables[region]
	if !ok {
		s = &StableStore{db: db, region: region}
		db.mu.stables[region] = s
	}
	return s
}

// Regions returns, ascending, the regions that have any log entry or stable
// value (as pebble holds them, so after a latched failure possibly one whose
// only write failed).
func (db *DB) Regions() ([]uint32, error) {
	if err := db.acquire(); err != nil {
		return nil, err
	}
	defer db.life.RUnlock()
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{kindFirstRegion}, UpperBound: []byte{kindLastRegion + 1}})
	if err != nil {
		return nil, fmt.Errorf("wal: regions: %w", err)
	}
	var regions []uint32
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < keyPrefixLen {
			_ = it.Close()
			return nil, fmt.Errorf("%w: key %x shorter than a region prefix", ErrCorruption, k)
		}
		region := binary.BigEndian.Uint32(k[1:])
		regions = append(regions, region)
		valid = it.SeekGE(prefixUpper(k[0], region))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("wal: regions: %w", err)
	}
	slices.Sort(regions)
	return slices.Compact(regions), nil
}

// DropRegion deletes all of region's log entries, stable values and commit
// index in one synced commit. The caller must have shut the region's raft group down:
// afterwards the region's LogStore and StableStore are empty (and usable
// again, for a region that comes back).
func (db *DB) DropRegion(region uint32) error {
	if err := db.acquire(); err != nil {
		return err
	}
	defer db.life.RUnlock()
	ls, ss := db.Log(region), db.Stable(region)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if err := db.Err(); err != nil {
		return fmt.Errorf("wal: region %d: drop: %w", region, err)
	}
	b := db.pdb.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(regionPrefix(kindLog, region), logUpper(region), nil)
	_ = b.DeleteRange(regionPrefix(kindStable, region), stableUpper(region), nil)
	_ = b.Delete(commitKey(region), nil)
	// Hide first (see LogStore.DeleteRange): a failed drop leaves the
	// region looking empty, which is the state it was headed for.
	ls.gen.Add(1)
	ls.publish(bounds{})
	ls.staged.Store(0)
	ls.commitIndex.Store(0)
	ss.mu.Lock()
	ss.mu.loaded, ss.mu.vals = true, map[string][]byte{}
	ss.mu.Unlock()
	err := db.commit(b, 1)
	ls.gen.Add(1)
	ls.recent.clear() // stale by gen already; this frees them
	if err != nil {
		return fmt.Errorf("wal: region %d: drop: %w", region, err)
	}
	return nil
}
