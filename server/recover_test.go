package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
)

// A meganode split interrupted by a crash at each of its steps is undone
// or finished when the server restarts (docs/design.md §9: "a new leader resumes
// or undoes every split its applied state shows in progress"): the crash
// image is the data directory copied while the split is paused at the
// step (the log holds exactly what was synced then); a server started on
// the copy checks clean, holds no frozen or orphan meganode, no split in
// progress, and serves every acknowledged key, and the split it finished
// (or the one it undid) leaves the right number of meganodes. The split of
// a root grows a new root above it: crashes between the new root's
// record, the region table's compare-and-set and the server's publish
// record are among the steps; the restarted server settles that root
// before it resumes the split, so that no record of the resume is
// refused (a second root record while the first is unpublished was).
func TestSplitInterruptedByCrash(t *testing.T) {
	for _, step := range append(splitFailpoints[:len(splitFailpoints):len(splitFailpoints)], FailpointRootMade, FailpointRootSet) {
		t.Run(filepath.Base(step), func(t *testing.T) {
			store := regiontable.NewMemory()
			defer store.Close()
			opts := testOptions(t, store)
			opts.MeganodeSize = 64 << 10
			opts.SplitFill = 1 // no split unless the test asks
			opts.SplitCopyBatch = 2
			opts.SplitFreeBatch = 3
			s := startServer(t, opts)
			c := dial(t, s)
			x := s.servedMeganode(s.Root())
			var keys []string
			for i := 0; x.T.Fill() < 0.55; i++ {
				k := fmt.Sprintf("key%06d", i*7919%100003)
				put(t, c, k, "v"+k)
				keys = append(keys, k)
			}

			// The first evaluation holds the split there; later ones
			// (the restarted server's own splits) go through.
			reached, release := make(chan struct{}, 1), make(chan struct{})
			var fired atomic.Bool
			defer failpoint.Enable(step, func() error {
				if fired.CompareAndSwap(false, true) {
					reached <- struct{}{}
					<-release
				}
				return nil
			})()
			done := make(chan bool, 1)
			go func() { done <- s.splits.runSplit(x) }()
			select {
			case <-reached:
			case <-time.After(30 * time.Second):
				t.Fatalf("the split did not reach %s", step)
			}
			crashDir := t.TempDir()
			copyDataDir(t, opts.DataDir, crashDir)
			root, err := store.Root(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			close(release)
			if !<-done && step != FailpointSplitChose {
				t.Fatal("the original split failed")
			}

			// The restarted server: the crash image, the region table
			// as it was at the crash (the root pointer).
			store2 := regiontable.NewMemory()
			defer store2.Close()
			if _, err := store2.SetRoot(ctxT(t), 0, root); err != nil {
				t.Fatal(err)
			}
			opts2 := testOptions(t, store2)
			opts2.DataDir = crashDir
			opts2.MeganodeSize, opts2.SplitFill = opts.MeganodeSize, opts.SplitFill
			var refused atomic.Int64
			opts2.TestingKnobs.OnApply = func(index uint64, _ []byte, err error) {
				if err != nil {
					refused.Add(1)
					t.Logf("record %d refused: %v", index, err)
				}
			}
			s2 := startServer(t, opts2)
			waitSplitsIdle(t, s2)
			if n := refused.Load(); n != 0 {
				t.Fatalf("after the restart at %s: %d records refused", step, n)
			}
			if err := s2.Check(); err != nil {
				t.Fatalf("after the restart at %s: %v", step, err)
			}
			splits, _ := s2.reps.own.sm.Progress()
			if frozen := s2.reps.own.sm.Frozen(); len(splits) != 0 || !frozen.IsNil() {
				t.Fatalf("after the restart at %s: %d splits in progress, frozen meganode %v", step, len(splits), frozen)
			}
			c2 := dial(t, s2)
			for _, k := range keys {
				if v, ok := get(t, c2, k); !ok || v != "v"+k {
					t.Fatalf("after the restart at %s: %s = %q, %v", step, k, v, ok)
				}
			}
			// Undone before the link (one meganode), finished after it
			// (two leaves and a root above them).
			want := 1
			if step != FailpointSplitChose && step != FailpointSplitFroze && step != FailpointSplitCopied {
				want = 3
			}
			if n := len(s2.reps.own.sm.Region().Meganodes()); n != want {
				t.Fatalf("after the restart at %s: %d meganodes, want %d", step, n, want)
			}
			t.Logf("crash at %s: restarted with %d meganodes, %d keys served", step, want, len(keys))
		})
	}
}

// copyDataDir copies a server's data directory as a crash would leave it:
// the log, the snapshots and region.json (not the lock, not a region file).
func copyDataDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if rel == lockFile || (!d.IsDir() && filepath.Dir(rel) == "." && rel != stateFile) {
			return nil
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, src)
		return errors.Join(err, out.Close())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A split whose steps and abort were all refused (its server lost the
// group's leadership for a moment, mid-split, and was elected again
// without another server taking the region over, so resumeSplits never
// ran) is left in progress in the replicated state. The next split of the
// meganode settles it first instead of failing at its first step forever
// (blink.ErrSplitState): it undoes it (not linked), and the split after
// that goes through.
func TestSplitLeftInProgressIsSettled(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.MeganodeSize = 64 << 10
	opts.SplitFill = 1 // no split unless the test asks
	s := startServer(t, opts)
	c := dial(t, s)
	x := s.servedMeganode(s.Root())
	var keys []string
	for i := 0; x.T.Fill() < 0.55; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
		keys = append(keys, k)
	}

	// The start record of a split, and nothing after it.
	s.splits.mu.Lock()
	sep, err := x.T.SplitKey()
	if err == nil {
		_, err = s.splits.applySplit(x, sep, rsm.SplitBody{Phase: rsm.PhaseStart})
	}
	s.splits.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}

	if !s.splits.runSplit(x) {
		t.Fatal("the split of a meganode with a split left in progress failed")
	}
	splits, _ := s.reps.own.sm.Progress()
	if frozen := s.reps.own.sm.Frozen(); len(splits) != 0 || !frozen.IsNil() {
		t.Fatalf("%d splits in progress, frozen meganode %v", len(splits), frozen)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.reps.own.sm.Region().Meganodes()); n != 1 {
		t.Fatalf("%d meganodes after the interrupted split was undone, want 1", n)
	}
	if !s.splits.runSplit(x) {
		t.Fatal("the split after it failed")
	}
	if n := len(s.reps.own.sm.Region().Meganodes()); n != 3 {
		t.Fatalf("%d meganodes after the split, want 3", n)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if v, ok := get(t, c, k); !ok || v != "v"+k {
			t.Fatalf("%s = %q, %v", k, v, ok)
		}
	}
}
