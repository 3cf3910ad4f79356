package wal

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/hashicorp/raft"
)

// TestGroupCommit holds the first commit's WAL fsync until eight writers
// of other regions have queued behind it, and checks that those eight
// then share one commit (and one fsync).
func TestGroupCommit(t *testing.T) {
	var armed atomic.Bool
	blocked, release := make(chan struct{}), make(chan struct{})
	hook := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) &&
			strings.HasSuffix(op.Path, ".log") && armed.CompareAndSwap(true, false) {
			close(blocked)
			<-release
		}
		return nil
	})
	db := mustOpen(t, errorfs.Wrap(vfs.NewMem(), hook), "db")
	before := db.Metrics()
	armed.Store(true)

	var wg sync.WaitGroup
	errc := make(chan error, 9)
	write := func(r uint32) {
		defer wg.Done()
		errc <- db.Log(r).StoreLog(genEntry(r, 1, 1))
	}
	wg.Add(1)
	go write(1)
	<-blocked // region 1's commit is in its fsync
	for r := uint32(2); r <= 9; r++ {
		wg.Add(1)
		go write(r)
	}
	for {
		db.cq.mu.Lock()
		n := len(db.cq.mu.queue)
		db.cq.mu.Unlock()
		if n == 8 {
			break
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	after := db.Metrics()
	if w, c := after.Writes-before.Writes, after.Commits-before.Commits; w != 9 || c != 2 {
		t.Fatalf("9 writes took %d writes in %d commits, want 9 in 2 (one alone, then a group of 8)", w, c)
	}
	if s := after.WALSyncs - before.WALSyncs; s > 2 {
		t.Fatalf("2 commits took %d WAL syncs", s)
	}
	for r := uint32(1); r <= 9; r++ {
		mustState(t, db, r, regionState{first: 1, last: 1, terms: []uint64{1}})
	}
}

// TestReadsDuringWrites: readers racing with appends, prefix deletions and
// suffix overwrites of the same region see a valid entry or
// raft.ErrLogNotFound, never a corruption (deletions hide their entries
// before they commit). WAL syncs are slowed down to widen the window in
// which pebble shows a write whose sync is still running.
func TestReadsDuringWrites(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	slow := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) && strings.HasSuffix(op.Path, ".log") {
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	db := mustOpen(t, errorfs.Wrap(vfs.NewMem(), slow), "db")
	const r = 11
	ls := db.Log(r)
	if err := ls.StoreLogs(genEntries(r, 1, 20, 1)); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, found atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for !stop.Load() {
				first, err1 := ls.FirstIndex()
				last, err2 := ls.LastIndex()
				if err := errors.Join(err1, err2); err != nil {
					errc <- err
					return
				}
				if last < first {
					continue // bounds read across a write
				}
				i := first + uint64(rng.IntN(int(last-first+1)))
				var l raft.Log
				err := ls.GetLog(i, &l)
				reads.Add(1)
				switch {
				case err == raft.ErrLogNotFound:
				case err != nil:
					errc <- err
					return
				default:
					found.Add(1)
					if d := sameLog(&l, genEntry(r, i, l.Term)); d != "" {
						errc <- errors.New(d)
						return
					}
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	model := regionState{first: 1, last: 20}
	for i := 0; i < 20; i++ {
		model.terms = append(model.terms, 1)
	}
	term := uint64(1)
	for n := 0; n < 200; n++ {
		o := randomOp(rng, r, model.clone(), &term)
		if strings.Contains(o.desc, "Set") || strings.Contains(o.desc, "Drop") {
			continue
		}
		if err := o.do(db); err != nil {
			t.Fatal(err)
		}
		o.apply(&model)
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d reads, %d found", reads.Load(), found.Load())
}

// TestReadAcrossOverwriteAndRegrowth is the interleaving that
// TestReadsDuringWrites found (about one run in 70): a reader holds the
// bounds [1, 9]; an overwrite of [5, 6] cuts the log to [1, 6] before its
// Get of index 7 finds nothing; an append of [7, 9] grows the log back
// before the reader decides. Index 7 is then inside the bounds again, yet
// its miss was a deletion, not corruption.
func TestReadAcrossOverwriteAndRegrowth(t *testing.T) {
	db := mustOpen(t, vfs.NewMem(), "db")
	const r = 12
	ls := db.Log(r)
	if err := ls.StoreLogs(genEntries(r, 1, 9, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := ls.bounds()
	if err != nil {
		t.Fatal(err)
	}
	gen := ls.gen.Load() // as GetLog loads it, before the bounds
	if err := ls.StoreLogs(genEntries(r, 5, 6, 2)); err != nil {
		t.Fatal(err)
	}
	ls.afterMiss = func() {
		ls.afterMiss = nil
		if err := ls.StoreLogs(genEntries(r, 7, 9, 2)); err != nil {
			t.Error(err)
		}
	}
	if err := db.acquire(); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	err = ls.getPoint(7, &l, b, gen)
	db.life.RUnlock()
	if err != raft.ErrLogNotFound {
		t.Fatalf("GetLog(7) across an overwrite and an append: %v, want raft.ErrLogNotFound", err)
	}
	mustState(t, db, r, regionState{first: 1, last: 9, terms: []uint64{1, 1, 1, 1, 2, 2, 2, 2, 2}})
	// (With nothing in flight a missing entry is still corruption:
	// TestCheckFindsCorruption makes a hole.)
	if err := ls.GetLog(7, &l); err != nil || l.Term != 2 {
		t.Fatalf("GetLog(7) = term %d, %v; want the new entry", l.Term, err)
	}
}

// Pebble's background work is counted: a flush of the memtable, and a
// compaction of a log truncated after a snapshot (its range deletion).
func TestFlushAndCompactionMetrics(t *testing.T) {
	db := mustOpen(t, vfs.NewMem(), "db")
	db.truncateByRangeDeletion = true // a prefix truncation Excise would not leave a tombstone
	ls := db.Log(1)
	for lo := uint64(1); lo <= 2000; lo += 100 {
		if err := ls.StoreLogs(genEntries(1, lo, lo+99, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.pdb.Flush(); err != nil {
		t.Fatal(err)
	}
	m := db.Metrics()
	if m.Flushes == 0 || m.FlushBytes == 0 {
		t.Fatalf("after a flush: %d flushes of %d bytes", m.Flushes, m.FlushBytes)
	}
	if err := ls.DeleteRange(1, 1500); err != nil {
		t.Fatal(err)
	}
	if err := db.pdb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.pdb.Compact(context.Background(), regionPrefix(kindLog, 1), logUpper(1), false); err != nil {
		t.Fatal(err)
	}
	m = db.Metrics()
	if m.Compactions == 0 || m.CompactionBytesRead == 0 || m.CompactionTime <= 0 {
		t.Fatalf("after a compaction: %d compactions, %d bytes read, %v", m.Compactions, m.CompactionBytesRead, m.CompactionTime)
	}
	if m.CompactionBytesWritten >= m.CompactionBytesRead {
		t.Fatalf("a compaction of mostly deleted entries wrote %d bytes of the %d it read", m.CompactionBytesWritten, m.CompactionBytesRead)
	}
}

// A prefix truncation (raft's, after a snapshot) goes by Excise: the
// entries flushed into the lower levels are not read back to apply a range
// deletion. Side by side with the range deletion, a compaction of the log
// afterwards reads what is left, not what was deleted.
func TestTruncateByExcise(t *testing.T) {
	compactAfterTruncation := func(byRangeDeletion bool) Metrics {
		t.Helper()
		fs := vfs.NewMem()
		db := mustOpen(t, fs, "db")
		db.truncateByRangeDeletion = byRangeDeletion
		ls, other := db.Log(1), db.Log(2)
		for lo := uint64(1); lo <= 2000; lo += 100 {
			if err := ls.StoreLogs(genEntries(1, lo, lo+99, 1)); err != nil {
				t.Fatal(err)
			}
			if err := other.StoreLogs(genEntries(2, lo, lo+99, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.pdb.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := db.pdb.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
			t.Fatal(err)
		}
		before := db.Metrics()
		if err := ls.DeleteRange(1, 1500); err != nil {
			t.Fatal(err)
		}
		if err := db.pdb.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := db.pdb.Compact(context.Background(), regionPrefix(kindLog, 1), logUpper(1), false); err != nil {
			t.Fatal(err)
		}
		after := db.Metrics()
		mustState(t, db, 1, regionState{first: 1501, last: 2000, terms: slices.Repeat([]uint64{1}, 500)})
		mustState(t, db, 2, regionState{first: 1, last: 2000, terms: slices.Repeat([]uint64{1}, 2000)})
		// And so after a restart (the excise is in the MANIFEST).
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = mustOpen(t, fs, "db")
		mustState(t, db, 1, regionState{first: 1501, last: 2000, terms: slices.Repeat([]uint64{1}, 500)})
		mustState(t, db, 2, regionState{first: 1, last: 2000, terms: slices.Repeat([]uint64{1}, 2000)})
		return Metrics{
			Writes:              after.Writes - before.Writes,
			Excises:             after.Excises - before.Excises,
			CompactionBytesRead: after.CompactionBytesRead - before.CompactionBytesRead,
		}
	}
	excised := compactAfterTruncation(false)
	deleted := compactAfterTruncation(true)
	if excised.Excises != 1 || excised.Writes != 1 || deleted.Excises != 0 || deleted.Writes != 1 {
		t.Fatalf("excises/writes: %d/%d by Excise, %d/%d by range deletion; want 1/1 and 0/1",
			excised.Excises, excised.Writes, deleted.Excises, deleted.Writes)
	}
	t.Logf("compaction bytes read after truncating 1500 of 2000 entries: %d by Excise, %d by range deletion",
		excised.CompactionBytesRead, deleted.CompactionBytesRead)
	if excised.CompactionBytesRead*2 > deleted.CompactionBytesRead {
		t.Fatalf("compaction after Excise read %d bytes, after the range deletion %d: want less than half",
			excised.CompactionBytesRead, deleted.CompactionBytesRead)
	}
}
