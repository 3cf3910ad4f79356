package wal

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// op is one random write of a region, and its effect on the model.
type op struct {
	desc  string
	do    func(db *DB) error
	apply func(s *regionState)
}

// randomOp returns a random write for region r in state s (term is the
// region's current term, bumped by ops that overwrite).
func randomOp(rng *rand.Rand, r uint32, s regionState, term *uint64) op {
	n := uint64(len(s.terms))
	switch k := rng.IntN(20); {
	case k < 7 || n == 0: // append
		lo := s.last + 1
		if n == 0 {
			lo = s.first + 1 + uint64(rng.IntN(3))
		}
		hi := lo + uint64(rng.IntN(4))
		t := *term
		return op{fmt.Sprintf("r%d StoreLogs [%d, %d] t%d", r, lo, hi, t),
			func(db *DB) error { return db.Log(r).StoreLogs(genEntries(r, lo, hi, t)) },
			func(s *regionState) { s.storeLogs(lo, hi, t) }}
	case k < 9: // overwrite a suffix with a new term
		*term++
		lo := s.first + uint64(rng.IntN(int(n)))
		hi := lo + uint64(rng.IntN(3))
		t := *term
		return op{fmt.Sprintf("r%d StoreLogs [%d, %d] t%d (overwrite)", r, lo, hi, t),
			func(db *DB) error { return db.Log(r).StoreLogs(genEntries(r, lo, hi, t)) },
			func(s *regionState) { s.storeLogs(lo, hi, t) }}
	case k < 10: // a gap: the log restarts
		*term++
		lo := s.last + 2 + uint64(rng.IntN(5))
		t := *term
		return op{fmt.Sprintf("r%d StoreLogs [%d, %d] t%d (gap)", r, lo, lo, t),
			func(db *DB) error { return db.Log(r).StoreLog(genEntry(r, lo, t)) },
			func(s *regionState) { s.storeLogs(lo, lo, t) }}
	case k < 12: // delete a prefix
		max := s.first + uint64(rng.IntN(int(n)))
		min := s.first - uint64(rng.IntN(int(s.first)))
		return op{fmt.Sprintf("r%d DeleteRange(%d, %d)", r, min, max),
			func(db *DB) error { return db.Log(r).DeleteRange(min, max) },
			func(s *regionState) { s.deleteRange(min, max) }}
	case k < 14: // delete a suffix
		min := s.first + uint64(rng.IntN(int(n)))
		max := s.last + uint64(rng.IntN(3))
		return op{fmt.Sprintf("r%d DeleteRange(%d, %d)", r, min, max),
			func(db *DB) error { return db.Log(r).DeleteRange(min, max) },
			func(s *regionState) { s.deleteRange(min, max) }}
	case k < 15:
		return op{fmt.Sprintf("r%d DeleteRange(all)", r),
			func(db *DB) error { return db.Log(r).DeleteRange(0, math.MaxUint64) },
			func(s *regionState) { s.deleteRange(0, math.MaxUint64) }}
	case k < 17:
		v := fmt.Sprintf("cand-%d", rng.IntN(1000))
		key := []string{"LastVoteCand", "other"}[rng.IntN(2)]
		return op{fmt.Sprintf("r%d Set(%s, %s)", r, key, v),
			func(db *DB) error { return db.Stable(r).Set([]byte(key), []byte(v)) },
			func(s *regionState) { s.stable[key] = v }}
	case k < 19:
		t := *term
		return op{fmt.Sprintf("r%d SetUint64(CurrentTerm, %d)", r, t),
			func(db *DB) error { return db.Stable(r).SetUint64([]byte("CurrentTerm"), t) },
			func(s *regionState) { s.stable["CurrentTerm"] = string(putUint64(t)) }}
	default:
		return op{fmt.Sprintf("r%d DropRegion", r),
			func(db *DB) error { return db.DropRegion(r) },
			func(s *regionState) { *s = regionState{stable: map[string]string{}} }}
	}
}

// TestCrashAfterEveryStep runs random writes over several regions and,
// after every one, crash-clones the filesystem (keeping none, half or all
// of the unsynced data), reopens the clone and checks that it holds
// exactly what was acknowledged (every acknowledged write was synced, so
// nothing else can be there), with every log contiguous.
func TestCrashAfterEveryStep(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	mem := vfs.NewCrashableMem()
	db := mustOpen(t, mem, "db")
	regions := []uint32{1, 2, 0xffffff}
	models := map[uint32]*regionState{}
	terms := map[uint32]*uint64{}
	for _, r := range regions {
		models[r] = &regionState{stable: map[string]string{}}
		terms[r] = new(uint64)
		*terms[r] = 1
	}
	steps := 80
	if testing.Short() {
		steps = 20
	}
	for step := 0; step < steps; step++ {
		r := regions[rng.IntN(len(regions))]
		o := randomOp(rng, r, models[r].clone(), terms[r])
		if err := o.do(db); err != nil {
			t.Fatalf("step %d: %s: %v", step, o.desc, err)
		}
		o.apply(models[r])
		pct := []int{0, 50, 100}[rng.IntN(3)]
		clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng})
		cdb, err := Open(Options{FS: clone, Dir: "db", Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("step %d (%s): reopen after crash: %v", step, o.desc, err)
		}
		for _, r := range regions {
			got, err := readState(cdb, r)
			if err != nil {
				t.Fatalf("step %d (%s), clone %d%%: region %d: %v", step, o.desc, pct, r, err)
			}
			if !got.equal(models[r].clone()) {
				t.Fatalf("step %d (%s), clone %d%%: region %d:\n got %v\nwant %v", step, o.desc, pct, r, got, *models[r])
			}
		}
		if err := cdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// history records the states of one region: hist[0] is the empty region,
// hist[i] the state after the i-th write. A write's state is appended
// before the write starts; acked is the index of the last state whose
// write returned nil. Writes of a region are sequential.
type history struct {
	mu    sync.Mutex
	hist  []regionState
	acked int
}

// window returns the range of states a crash now may show: from the last
// acknowledged one to the last started one.
func (h *history) window() (lo, hi int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acked, len(h.hist) - 1
}

// crashPoint is a crash clone and, per region, the acked state index
// before the clone and the last started state index after it.
type crashPoint struct {
	fs     *vfs.MemFS
	where  string
	lo, hi map[uint32]int
}

// TestCrashConcurrent runs one writer per region concurrently and takes
// crash clones at random moments: from the test goroutine, and from inside
// the WAL's own writes and syncs (an errorfs hook that clones before the
// operation runs). Each clone must show, per region, one of the states
// between the last acknowledged write before the crash and the last write
// started by then: nothing acknowledged is lost, nothing torn appears.
func TestCrashConcurrent(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	mem := vfs.NewCrashableMem()
	regions := []uint32{3, 4, 5, 6}
	hists := map[uint32]*history{}
	for _, r := range regions {
		hists[r] = &history{hist: []regionState{{stable: map[string]string{}}}}
	}
	var cmu sync.Mutex
	var crashes []crashPoint
	crash := func(where string, pct int, crng *rand.Rand) {
		lo := map[uint32]int{}
		for _, r := range regions {
			lo[r], _ = hists[r].window()
		}
		fs := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: crng})
		hi := map[uint32]int{}
		for _, r := range regions {
			_, hi[r] = hists[r].window()
		}
		cmu.Lock()
		crashes = append(crashes, crashPoint{fs, where, lo, hi})
		cmu.Unlock()
	}
	// The hook fires inside pebble's WAL goroutines: it has its own rng.
	hookRng := rand.New(rand.NewPCG(seed, 3))
	var hookMu sync.Mutex
	hook := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") || op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		hookMu.Lock()
		fire, pct := hookRng.IntN(40) == 0, hookRng.IntN(3)*50
		crng := rand.New(rand.NewPCG(hookRng.Uint64(), 0))
		hookMu.Unlock()
		if fire {
			crash(fmt.Sprintf("before op %d on %s", op.Kind, op.Path), pct, crng)
		}
		return nil
	})
	db := mustOpen(t, errorfs.Wrap(noReuseFS{mem}, hook), "db")

	opsPerRegion := 300
	if testing.Short() {
		opsPerRegion = 20
	}
	var wg sync.WaitGroup
	errc := make(chan error, len(regions))
	for i, r := range regions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrng := rand.New(rand.NewPCG(seed, uint64(10+i)))
			h := hists[r]
			term := uint64(1)
			for n := 0; n < opsPerRegion; n++ {
				h.mu.Lock()
				cur := h.hist[len(h.hist)-1]
				h.mu.Unlock()
				o := randomOp(wrng, r, cur.clone(), &term)
				next := cur.clone()
				o.apply(&next)
				h.mu.Lock()
				h.hist = append(h.hist, next)
				h.mu.Unlock()
				if err := o.do(db); err != nil {
					errc <- fmt.Errorf("%s: %w", o.desc, err)
					return
				}
				h.mu.Lock()
				h.acked = len(h.hist) - 1
				h.mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	crng := rand.New(rand.NewPCG(seed, 4))
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(time.Duration(crng.IntN(500)) * time.Microsecond):
			crash("from the test goroutine", crng.IntN(3)*50, crng)
		}
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	crash("after the last write", 0, crng)

	for i, c := range crashes {
		cdb, err := Open(Options{FS: c.fs, Dir: "db", Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("crash %d (%s): reopen: %v", i, c.where, err)
		}
		for _, r := range regions {
			got, err := readState(cdb, r)
			if err != nil {
				t.Fatalf("crash %d (%s): region %d: %v", i, c.where, r, err)
			}
			h := hists[r]
			ok := false
			for k := c.lo[r]; k <= c.hi[r] && !ok; k++ {
				ok = got.equal(h.hist[k].clone())
			}
			if !ok {
				t.Fatalf("crash %d (%s): region %d shows\n  %v\nnone of states %d..%d:\n  %v", i, c.where, r, got,
					c.lo[r], c.hi[r], h.hist[c.lo[r]:c.hi[r]+1])
			}
		}
		if err := cdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d crash clones checked", len(crashes))
}

// noReuseFS is a filesystem on which pebble never reuses an old WAL file:
// ReuseForWrite removes it and creates the new one. pebble v2.1.7's
// crashable MemFS.ReuseForWrite read-locks its clone mutex and then calls
// Rename, which read-locks it again; a CrashClone that asks for the write
// lock between the two deadlocks them both. TestCrashConcurrent clones
// while writers run, and log truncations by Excise rotate the WAL, which
// reuses old WAL files.
type noReuseFS struct{ vfs.FS }

func (fs noReuseFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.FS.Remove(oldname); err != nil {
		return nil, err
	}
	return fs.FS.Create(newname, category)
}

// TestCrashDuringExcise crash-clones the filesystem before every write
// and sync pebble makes while a prefix truncation (Excise) runs, both
// when the truncated entries are still in the memtable (pebble queues the
// excise as a flushable ingest and writes a WAL for it) and when they
// were flushed (one MANIFEST edit). Every clone must reopen to the log
// before the truncation or after it, never to anything in between, with
// the other region untouched; a clone taken after DeleteRange returned
// must show it done.
func TestCrashDuringExcise(t *testing.T) {
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			var (
				mu       sync.Mutex
				cloning  bool
				clones   []*vfs.MemFS
				seen     = map[string]int{}
				rng      = rand.New(rand.NewPCG(rand.Uint64(), 7))
				percents = []int{0, 50, 100}
			)
			hook := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				if cloning {
					seen[fmt.Sprintf("%d %s", op.Kind, op.Path)]++
					clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: percents[rng.IntN(3)], RNG: rng}))
				}
				return nil
			})
			db := mustOpen(t, errorfs.Wrap(noReuseFS{mem}, hook), "db")
			ls := db.Log(1)
			for lo := uint64(1); lo <= 200; lo += 50 {
				if err := ls.StoreLogs(genEntries(1, lo, lo+49, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Log(2).StoreLogs(genEntries(2, 1, 50, 1)); err != nil {
				t.Fatal(err)
			}
			if flushed {
				if err := db.pdb.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			before := regionState{first: 1, last: 200, terms: slices.Repeat([]uint64{1}, 200)}
			after := regionState{first: 151, last: 200, terms: slices.Repeat([]uint64{1}, 50)}
			other := regionState{first: 1, last: 50, terms: slices.Repeat([]uint64{1}, 50)}
			mustState(t, db, 1, before)

			mu.Lock()
			cloning = true
			mu.Unlock()
			if err := ls.DeleteRange(1, 150); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			cloning = false
			clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
			mu.Unlock()
			if m := db.Metrics(); m.Excises != 1 {
				t.Fatalf("%d excises, want the truncation's one", m.Excises)
			}
			mustState(t, db, 1, after)

			var pre, post int
			for i, fs := range clones {
				cdb, err := Open(Options{FS: fs, Dir: "db", Logger: testLogger(t)})
				if err != nil {
					t.Fatalf("clone %d of %d: reopen: %v", i, len(clones), err)
				}
				got, err := readState(cdb, 1)
				if err != nil {
					t.Fatalf("clone %d: region 1: %v", i, err)
				}
				last := i == len(clones)-1
				switch {
				case got.equal(after.clone()):
					post++
				case got.equal(before.clone()) && !last:
					pre++
				default:
					t.Fatalf("clone %d of %d (last: %v): region 1 shows %v", i, len(clones), last, got)
				}
				if got, err := readState(cdb, 2); err != nil || !got.equal(other.clone()) {
					t.Fatalf("clone %d: region 2 shows %v (%v), want %v", i, got, err, other)
				}
				if err := cdb.Close(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d clones during the excise (writes and syncs: %v): %d before it, %d after", len(clones)-1, seen, pre, post)
			if len(clones) < 2 {
				t.Fatal("the excise wrote nothing to clone before")
			}
		})
	}
}
