package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// tbWriter sends log lines to t.Log until the test's cleanups have run.
type tbWriter struct {
	t    testing.TB
	done *atomic.Bool
}

func (w tbWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testWriter returns a writer into t.Log, silenced once the test ends
// (background goroutines of pebble or raft may outlive a failed test).
func testWriter(t testing.TB) tbWriter {
	done := new(atomic.Bool)
	t.Cleanup(func() { done.Store(true) }) // registered first, runs last
	return tbWriter{t: t, done: done}
}

// testLogger logs warnings and errors through t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// mustOpen opens a DB on fs/dir, closed at cleanup.
func mustOpen(t testing.TB, fs vfs.FS, dir string) *DB {
	t.Helper()
	db, err := Open(Options{FS: fs, Dir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// entryTime is the AppendedAt of generated entries.
var entryTime = time.Unix(1_700_000_000, 0)

// genEntry returns the entry a test writes at (region, index, term): its
// content depends on nothing else, so a reader can tell it from any other.
func genEntry(region uint32, index, term uint64) *raft.Log {
	l := &raft.Log{
		Index:      index,
		Term:       term,
		Type:       raft.LogCommand,
		Data:       []byte(fmt.Sprintf("r%d/i%d/t%d/%s", region, index, term, strings.Repeat("x", int(index%7)*10))),
		AppendedAt: entryTime.Add(time.Duration(index) * time.Millisecond),
	}
	if index%3 == 0 {
		l.Extensions = []byte(fmt.Sprintf("ext%d", index))
	}
	if index%5 == 0 {
		l.Type = raft.LogNoop
		l.Data = nil
	}
	return l
}

func genEntries(region uint32, lo, hi, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		out = append(out, genEntry(region, i, term))
	}
	return out
}

// sameLog reports how a and b differ ("" if they do not).
func sameLog(a, b *raft.Log) string {
	if a.Index != b.Index || a.Term != b.Term || a.Type != b.Type || !bytes.Equal(a.Data, b.Data) ||
		!bytes.Equal(a.Extensions, b.Extensions) || unixNanos(a.AppendedAt) != unixNanos(b.AppendedAt) {
		return fmt.Sprintf("got %+v, want %+v", *a, *b)
	}
	return ""
}

// regionState is what a region holds: its log (the term of each index
// from first to last; entry contents follow from genEntry) and its stable
// values.
type regionState struct {
	first, last uint64
	terms       []uint64 // terms[i] is the term of index first+i
	stable      map[string]string
}

func (s regionState) clone() regionState {
	s.terms = slices.Clone(s.terms)
	s.stable = maps.Clone(s.stable)
	if s.stable == nil {
		s.stable = map[string]string{}
	}
	return s
}

func (s regionState) String() string {
	return fmt.Sprintf("log [%d, %d] terms %v stable %v", s.first, s.last, s.terms, s.stable)
}

func (s regionState) equal(o regionState) bool {
	return s.first == o.first && s.last == o.last && slices.Equal(s.terms, o.terms) && maps.Equal(s.stable, o.stable)
}

// model applies the effect of acknowledged writes to a regionState, as
// the store documents them.
func (s *regionState) storeLogs(lo, hi, term uint64) {
	switch {
	case s.last == 0 || lo == s.last+1:
		if s.last == 0 {
			s.first = lo
		}
	case lo >= s.first && lo <= s.last:
		s.terms = s.terms[:lo-s.first]
	default:
		s.first, s.terms = lo, nil
	}
	for i := lo; i <= hi; i++ {
		s.terms = append(s.terms, term)
	}
	s.last = hi
}

func (s *regionState) deleteRange(min, max uint64) {
	if s.last == 0 || max < s.first || min > s.last {
		return
	}
	switch {
	case min <= s.first && max >= s.last:
		s.first, s.last, s.terms = 0, 0, nil
	case min <= s.first:
		s.terms = s.terms[max+1-s.first:]
		s.first = max + 1
	default:
		s.terms = s.terms[:min-s.first]
		s.last = min - 1
	}
}

// readState reads region's state from db, checking every entry's content
// and the log invariant (LogStore.Check).
func readState(db *DB, region uint32) (regionState, error) {
	ls := db.Log(region)
	var st regionState
	var err error
	if st.first, err = ls.FirstIndex(); err != nil {
		return st, err
	}
	if st.last, err = ls.LastIndex(); err != nil {
		return st, err
	}
	if err := ls.Check(); err != nil {
		return st, err
	}
	if st.last != 0 {
		for i := st.first; i <= st.last; i++ {
			var l raft.Log
			if err := ls.GetLog(i, &l); err != nil {
				return st, fmt.Errorf("GetLog(%d) in [%d, %d]: %w", i, st.first, st.last, err)
			}
			if d := sameLog(&l, genEntry(region, i, l.Term)); d != "" {
				return st, fmt.Errorf("index %d: %s", i, d)
			}
			st.terms = append(st.terms, l.Term)
		}
	}
	ss := db.Stable(region)
	if err := ss.load(); err != nil {
		return st, err
	}
	ss.mu.RLock()
	st.stable = map[string]string{}
	for k, v := range ss.mu.vals {
		st.stable[k] = string(v)
	}
	ss.mu.RUnlock()
	return st, nil
}

// mustErrIs fails t unless errors.Is(err, target) for every target.
func mustErrIs(t testing.TB, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %v is not %v", err, target)
		}
	}
}
