package wal

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// A sequential reader gets entries read ahead (readahead.go), or the
// newest ones from memory (recent.go); every write that deletes or
// replaces entries must drop them, so the reader sees what a point read
// would: the entries of now. Run with the entries in memory and without.
func TestReadAheadFollowsWrites(t *testing.T) {
	for _, off := range []bool{true, false} {
		t.Run(recentName(off), func(t *testing.T) { testReadAheadFollowsWrites(t, off) })
	}
}

// recentName names a subtest by whether GetLog skips the newest entries
// in memory.
func recentName(off bool) string {
	if off {
		return "pebble"
	}
	return "recent"
}

func testReadAheadFollowsWrites(t *testing.T, recentOff bool) {
	db := mustOpen(t, vfs.NewMem(), "db")
	const r = 3
	ls := db.Log(r)
	ls.recentOff = recentOff
	terms := map[uint64]uint64{} // the model: index -> term
	store := func(lo, hi, term uint64) {
		t.Helper()
		if err := ls.StoreLogs(genEntries(r, lo, hi, term)); err != nil {
			t.Fatal(err)
		}
		for i := range terms {
			if i >= lo {
				delete(terms, i)
			}
		}
		for i := lo; i <= hi; i++ {
			terms[i] = term
		}
	}
	// read reads [lo, hi] in order and checks each entry against the model.
	read := func(lo, hi uint64) {
		t.Helper()
		for i := lo; i <= hi; i++ {
			var l raft.Log
			err := ls.GetLog(i, &l)
			term, ok := terms[i]
			if !ok {
				if !errors.Is(err, raft.ErrLogNotFound) {
					t.Fatalf("GetLog(%d) of a deleted entry: %v, %+v", i, err, l)
				}
				continue
			}
			if err != nil {
				t.Fatalf("GetLog(%d): %v", i, err)
			}
			if d := sameLog(&l, genEntry(r, i, term)); d != "" {
				t.Fatalf("GetLog(%d): %s", i, d)
			}
			// The entry is the caller's: scribbling on it changes nothing.
			for j := range l.Data {
				l.Data[j] = 'z'
			}
		}
	}
	store(1, 300, 1)
	read(1, 10) // entries up to ~138 read ahead
	read(1, 10) // again from the start: point reads, then read ahead again

	store(50, 60, 2) // a conflicting suffix replaced
	read(11, 70)

	if err := ls.DeleteRange(40, 60); err != nil { // suffix deleted
		t.Fatal(err)
	}
	for i := uint64(40); i <= 60; i++ {
		delete(terms, i)
	}
	read(30, 45)
	store(40, 200, 3) // and written again
	read(46, 200)

	read(1, 5)
	if err := ls.DeleteRange(1, 20); err != nil { // a prefix, after a snapshot
		t.Fatal(err)
	}
	for i := uint64(1); i <= 20; i++ {
		delete(terms, i)
	}
	read(6, 30)

	read(100, 110)
	if err := db.DropRegion(r); err != nil {
		t.Fatal(err)
	}
	clear(terms)
	read(111, 115)
	store(1, 150, 4) // the region comes back
	read(116, 150)
	read(1, 150)
}

// Sequential readers race a writer that appends and replaces suffixes:
// every entry a reader gets is one that was written at its index (never a
// mix), and afterwards everyone reads the final log. Run with -race, with
// the newest entries in memory and without.
func TestReadAheadConcurrent(t *testing.T) {
	for _, off := range []bool{true, false} {
		t.Run(recentName(off), func(t *testing.T) { testReadAheadConcurrent(t, off) })
	}
}

func testReadAheadConcurrent(t *testing.T, recentOff bool) {
	db := mustOpen(t, vfs.NewMem(), "db")
	const r = 9
	ls := db.Log(r)
	ls.recentOff = recentOff
	if err := ls.StoreLogs(genEntries(r, 1, 500, 1)); err != nil {
		t.Fatal(err)
	}
	var last atomic.Uint64
	last.Store(500)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var l raft.Log
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := 1 + rng.Uint64N(last.Load())
				for n := 0; n < 300; n, i = n+1, i+1 {
					err := ls.GetLog(i, &l)
					if errors.Is(err, raft.ErrLogNotFound) {
						break
					}
					if err != nil {
						t.Errorf("GetLog(%d): %v", i, err)
						return
					}
					if d := sameLog(&l, genEntry(r, i, l.Term)); d != "" {
						t.Errorf("GetLog(%d): %s", i, d)
						return
					}
				}
			}
		}()
	}
	term := uint64(1)
	for step := range 300 {
		cur := last.Load()
		if step%5 == 4 {
			term++
			lo := cur - 100
			if err := ls.StoreLogs(genEntries(r, lo, cur+10, term)); err != nil {
				t.Fatal(err)
			}
			last.Store(cur + 10)
			continue
		}
		if err := ls.StoreLogs(genEntries(r, cur+1, cur+20, term)); err != nil {
			t.Fatal(err)
		}
		last.Store(cur + 20)
	}
	close(stop)
	wg.Wait()
	if _, err := readState(db, r); err != nil {
		t.Fatal(err)
	}
}
