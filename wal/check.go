package wal

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// Check verifies the log invariant of the region against pebble: every key
// in the region's log range is a well-formed log key whose record decodes
// and carries the key's index, the indexes are contiguous, and they run
// from FirstIndex to LastIndex. It reports every violation (joined, each
// wrapping ErrCorruption) up to a few dozen. After a latched failure (see
// DB.Err) the stored run may extend beyond the bounds. It reads the whole log: for
// tests, `cellctl` and start-up checks, not the hot path.
func (s *LogStore) Check() error {
	b, err := s.bounds()
	if err != nil {
		return err
	}
	if err := s.db.acquire(); err != nil {
		return err
	}
	defer s.db.life.RUnlock()
	it, err := s.db.pdb.NewIter(&pebble.IterOptions{LowerBound: logKey(s.region, 0), UpperBound: logUpper(s.region)})
	if err != nil {
		return fmt.Errorf("wal: region %d: check: %w", s.region, err)
	}
	var errs []error
	report := func(format string, args ...any) {
		if len(errs) < 32 {
			errs = append(errs, fmt.Errorf("%w: region %d: "+format, append([]any{ErrCorruption, s.region}, args...)...))
		}
	}
	var first, prev uint64
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		region, index, err := parseLogKey(it.Key())
		if err != nil || region != s.region {
			report("key %x in the log range is not one of the region's log keys", it.Key())
			continue
		}
		if n == 0 {
			first = index
		} else if index != prev+1 {
			report("log jumps from index %d to %d", prev, index)
		}
		prev = index
		n++
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("wal: region %d: check: read index %d: %w", s.region, index, err)
		}
		var l raft.Log
		if err := decodeLog(v, &l); err != nil {
			if len(errs) < 32 {
				errs = append(errs, fmt.Errorf("region %d: index %d: %w", s.region, index, err))
			}
		} else if l.Index != index {
			report("key of index %d holds the record of index %d", index, l.Index)
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("wal: region %d: check: %w", s.region, err)
	}
	got := bounds{}
	if n > 0 {
		got = bounds{first: first, last: prev}
	}
	// After a latched failure pebble may hold a failed write's entries
	// beyond the acknowledged bounds (which the failed call had shrunk
	// before it committed): then the bounds need only lie inside.
	inside := b.empty() || (got.contains(b.first) && got.contains(b.last))
	if got != b && (s.db.Err() == nil || !inside) {
		report("stored log spans [%d, %d] (%d entries), bounds say [%d, %d]", got.first, got.last, n, b.first, b.last)
	}
	return errors.Join(errs...)
}
