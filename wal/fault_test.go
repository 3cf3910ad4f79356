package wal

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/hashicorp/raft"
)

// walFault injects errorfs.ErrInjected into the operations of kinds on
// pebble WAL files (*.log) while armed; once fired it keeps failing them.
type walFault struct {
	kinds []errorfs.OpKind
	// after: how many matching operations succeed once armed before the
	// first failure.
	after atomic.Int64
	armed atomic.Bool
	fired atomic.Bool
}

func (f *walFault) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	for _, k := range f.kinds {
		if op.Kind == k {
			if f.after.Add(-1) >= 0 {
				return nil
			}
			f.fired.Store(true)
			return errorfs.ErrInjected
		}
	}
	return nil
}

func (f *walFault) String() string { return "walFault" }

var (
	syncOps  = []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData}
	writeOps = []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}
)

// TestSyncFailureLatches: a failed WAL sync (or write) fails the call that
// met it and every later write of any region, never reports a write that
// is not durable as a success, keeps acknowledged reads working, and does
// not crash or hang the process.
func TestSyncFailureLatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{{"sync", syncOps}, {"write", writeOps}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fault := &walFault{kinds: tc.kinds}
			db := mustOpen(t, errorfs.Wrap(mem, fault), "db")
			models := map[uint32]*regionState{1: {}, 2: {}, 3: {}}
			for r, m := range models {
				if err := db.Log(r).StoreLogs(genEntries(r, 1, 10, 1)); err != nil {
					t.Fatal(err)
				}
				m.storeLogs(1, 10, 1)
				if err := db.Stable(r).SetUint64([]byte("CurrentTerm"), 1); err != nil {
					t.Fatal(err)
				}
				m.stable = map[string]string{"CurrentTerm": string(putUint64(1))}
			}
			if db.Err() != nil {
				t.Fatal(db.Err())
			}

			fault.armed.Store(true)
			err := db.Log(1).StoreLogs(genEntries(1, 11, 12, 1))
			if err == nil {
				t.Fatal("StoreLogs returned nil although its WAL " + tc.name + " failed")
			}
			mustErrIs(t, err, ErrSyncFailed, errorfs.ErrInjected)
			mustErrIs(t, db.Err(), ErrSyncFailed, errorfs.ErrInjected)
			t.Log(err)

			// From now on the disk "works" again; the latch holds.
			fault.armed.Store(false)
			for what, err := range map[string]error{
				"Set":         db.Stable(2).Set([]byte("LastVoteCand"), []byte("x")),
				"SetUint64":   db.Stable(1).SetUint64([]byte("CurrentTerm"), 2),
				"StoreLog":    db.Log(3).StoreLog(genEntry(3, 11, 1)),
				"DeleteRange": db.Log(2).DeleteRange(1, 5),
				"DropRegion":  db.DropRegion(3),
			} {
				if !errors.Is(err, ErrSyncFailed) || !errors.Is(err, errorfs.ErrInjected) {
					t.Fatalf("%s after the latch: %v", what, err)
				}
			}
			// Reads show what was acknowledged, and nothing of the failed
			// writes (pebble has them in its memtable).
			for r, m := range models {
				mustState(t, db, r, *m)
			}
			var l raft.Log
			if err := db.Log(1).GetLog(11, &l); err != raft.ErrLogNotFound {
				t.Fatalf("GetLog of the failed entry: %v (%+v)", err, l)
			}
			if _, err := db.Stable(2).Get([]byte("LastVoteCand")); err != ErrNotFound {
				t.Fatalf("Get of the failed Set: %v", err)
			}
			if v, err := db.Stable(1).GetUint64([]byte("CurrentTerm")); v != 1 || err != nil {
				t.Fatalf("GetUint64 after the failed SetUint64: %d %v", v, err)
			}
			if _, err := db.Regions(); err != nil {
				t.Fatal(err)
			}

			// A crash now keeps every acknowledged write, and the failed
			// ones leave no trace that breaks the log invariant.
			for _, pct := range []int{0, 50, 100} {
				clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(uint64(pct), 1))})
				cdb := mustOpen(t, clone, "db")
				for r, m := range models {
					got, err := readState(cdb, r)
					if err != nil {
						t.Fatalf("clone %d%%: region %d: %v", pct, r, err)
					}
					if !ackedPresent(got, *m) {
						t.Fatalf("clone %d%%: region %d lost acknowledged writes:\n got %v\nwant %v", pct, r, got, *m)
					}
				}
				if err := cdb.Close(); err != nil {
					t.Fatal(err)
				}
			}

			// Close does not hang, and reports the latch.
			if err := db.Close(); !errors.Is(err, ErrSyncFailed) {
				t.Fatalf("Close after the latch: %v", err)
			}
		})
	}
}

// ackedPresent reports whether got holds everything of acked (a region
// whose writes since acked were all failures: only appends may show).
func ackedPresent(got, acked regionState) bool {
	if got.first != acked.first || got.last < acked.last {
		return false
	}
	for i, term := range acked.terms {
		if got.terms[i] != term {
			return false
		}
	}
	for k, v := range acked.stable {
		if got.stable[k] != v {
			return false
		}
	}
	return true
}

// TestSyncFailureConcurrent: many regions write concurrently when a WAL
// sync fails at a random point. Nobody panics or hangs, every writer sees
// an ErrSyncFailed, and a crash keeps every write that returned nil.
func TestSyncFailureConcurrent(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const regions = 8
	for iter := 0; iter < 4; iter++ {
		mem := vfs.NewCrashableMem()
		fault := &walFault{kinds: syncOps}
		db := mustOpen(t, errorfs.Wrap(mem, fault), "db")
		fault.after.Store(int64(rng.IntN(100)))
		fault.armed.Store(true)

		acked := make([]uint64, regions+1) // last acknowledged index per region
		var wg sync.WaitGroup
		errs := make(chan error, regions)
		for r := uint32(1); r <= regions; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint64(1); ; i += 2 {
					if err := db.Log(r).StoreLogs(genEntries(r, i, i+1, 1)); err != nil {
						errs <- err
						return
					}
					acked[r] = i + 1
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			mustErrIs(t, err, ErrSyncFailed, errorfs.ErrInjected)
		}
		if !fault.fired.Load() {
			t.Fatal("the fault never fired")
		}
		clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(2) * 50, RNG: rng})
		cdb := mustOpen(t, clone, "db")
		for r := uint32(1); r <= regions; r++ {
			got, err := readState(cdb, r)
			if err != nil {
				t.Fatalf("region %d: %v", r, err)
			}
			if acked[r] > 0 && (got.first != 1 || got.last < acked[r]) {
				t.Fatalf("iteration %d: region %d: acknowledged up to %d, the crashed store has %v", iter, r, acked[r], got)
			}
		}
		if err := db.Close(); !errors.Is(err, ErrSyncFailed) {
			t.Fatalf("Close: %v", err)
		}
		_ = cdb.Close()
		t.Logf("iteration %d: acknowledged %v", iter, acked[1:])
	}
}
