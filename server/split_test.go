package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// A single server with 256 KiB meganodes keeps taking puts past one
// meganode's capacity: meganodes split on their own (locally), the tree of
// meganodes grows a level, and Get, Search, Range and one-sided reads
// across the meganodes give the right answers. The apply path logged every
// split's steps, from start to end; Metadata lists every meganode.
func TestSplitServerGrows(t *testing.T) {
	var log applyLog
	s, store := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 256 << 10
		o.Cores = 2
		o.SplitCopyBatch = 16
		o.SplitFreeBatch = 32
		o.TestingKnobs.OnApply = log.record
	})
	const n = 10000
	keys := make([]string, n)
	for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
		keys[i] = fmt.Sprintf("key%08d", j)
	}
	var wg sync.WaitGroup
	const writers = 4
	for g := range writers {
		c := dial(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += writers {
				k := keys[i]
				if _, err := c.CallMessage(ctxT(t), wire.OpPut, &wire.PutRequest{Key: []byte(k), Value: []byte("v" + k)}); err != nil {
					t.Errorf("put %q: %v", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	waitSplitsIdle(t, s)

	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if lv := levels(t, s); lv < 2 {
		t.Fatalf("%d level(s) of meganodes after %d puts", lv, n)
	}
	root, err := store.Root(ctxT(t))
	if err != nil || root != s.Root() || s.reps.own.sm.Region().Root() != s.Root() {
		t.Fatalf("root: table %v (%v), server %v, region offset 0 %v", root, err, s.Root(), s.reps.own.sm.Region().Root())
	}
	c := dial(t, s)
	mustServeAll(t, s, c, keys)

	var meta wire.MetadataReply
	if _, err := call(t, c, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true}, &meta); err != nil {
		t.Fatal(err)
	}
	if len(meta.Meganodes) != len(s.reps.own.sm.Region().Meganodes()) || len(meta.Meganodes) < 3 || meta.Root != s.Root() {
		t.Fatalf("metadata lists %d meganodes, the region holds %d; root %v", len(meta.Meganodes), len(s.reps.own.sm.Region().Meganodes()), meta.Root)
	}
	byLevel := map[uint16]int{}
	for _, m := range meta.Meganodes {
		byLevel[m.Level]++
	}
	done := log.checkSplits(t)
	fams := gather(t, s)
	if got := metricValue(fams, "cell_server_meganode_splits_total", map[string]string{"result": "done"}); int(got) != done || done < 2 {
		t.Fatalf("%d splits logged, %v counted", done, got)
	}
	t.Logf("%d keys: %d meganodes by level %v, %d splits", n, len(meta.Meganodes), byLevel, done)
}

// With tiny meganodes and long keys the tree of meganodes grows three
// levels: inner meganodes split too (their separators go into the root,
// which splits and moves up again).
func TestSplitDeepTree(t *testing.T) {
	var log applyLog
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 16 << 10 // 16 nodes of 1 KiB
		o.TestingKnobs.OnApply = log.record
	})
	c := dial(t, s)
	var keys []string
	for i := 0; levels(t, s) < 3; i++ {
		if i > 5000 {
			t.Fatalf("%d levels after %d puts", levels(t, s), i)
		}
		k := fmt.Sprintf("%03d", i*7919%1000) + string(make([]byte, 96)) + fmt.Sprint(i)
		put(t, c, k, "v"+k)
		keys = append(keys, k)
		if i%50 == 0 {
			waitSplitsIdle(t, s)
		}
	}
	waitSplitsIdle(t, s)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	mustServeAll(t, s, c, keys)
	var inner int
	for _, r := range log.all() {
		if r.kind == rsm.KindSplit && r.phase == rsm.PhaseStart && s.servedMeganode(r.mega).Level > 0 {
			inner++
		}
	}
	if inner == 0 {
		t.Fatal("no inner meganode split")
	}
	t.Logf("%d keys, %d levels, %d meganodes, %d splits (%d of inner meganodes)", len(keys), levels(t, s), len(s.reps.own.sm.Region().Meganodes()), log.checkSplits(t), inner)
}

// One goroutine puts (triggering splits through the server's write path)
// while readers get acknowledged keys (server-side and one-sided) and scan
// the whole range both ways: every acknowledged key is found, and every
// scan is ordered and holds every key acknowledged before it started.
func TestSplitConcurrentReaders(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 128 << 10
		o.Cores = 2
		o.SplitCopyBatch = 8
		o.SplitFreeBatch = 16
	})
	n := 6000
	if testing.Short() {
		n = 2000
	}
	keys := make([]string, n)
	for i, j := range rand.New(rand.NewPCG(3, 4)).Perm(n) {
		keys[i] = fmt.Sprintf("k%07d", j)
	}
	var mu sync.Mutex
	var acked []string
	snapshot := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(acked)
	}
	var written atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		c := dial(t, s)
		for _, k := range keys {
			if _, err := c.CallMessage(ctxT(t), wire.OpPut, &wire.PutRequest{Key: []byte(k), Value: []byte("v" + k)}); err != nil {
				t.Errorf("put %q: %v", k, err)
				return
			}
			mu.Lock()
			acked = append(acked, k)
			mu.Unlock()
			written.Add(1)
		}
	}()
	var gets, scans, onesided atomic.Int64
	reader := func(g int, scan bool) {
		defer wg.Done()
		c := dial(t, s)
		r := rand.New(rand.NewPCG(uint64(g), 9))
		for {
			select {
			case <-done:
				return
			default:
			}
			known := snapshot()
			if len(known) == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			if scan {
				reverse := r.IntN(2) == 0
				got, err := scanKeys(ctxT(t), c, reverse, uint32(50+r.IntN(500)))
				if err != nil {
					t.Errorf("scan: %v", err)
					return
				}
				if reverse {
					slices.Reverse(got)
				}
				if !sort.StringsAreSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
					t.Errorf("scan (reverse %v) not in strict order", reverse)
					return
				}
				for _, k := range known {
					if _, ok := slices.BinarySearch(got, k); !ok {
						t.Errorf("scan (reverse %v) of %d keys misses acknowledged %q", reverse, len(got), k)
						return
					}
				}
				scans.Add(1)
				continue
			}
			for range 50 {
				k := known[r.IntN(len(known))]
				f, err := c.CallMessage(ctxT(t), wire.OpGet, &wire.GetRequest{Key: []byte(k)})
				if err != nil {
					t.Errorf("get %q: %v", k, err)
					return
				}
				var rep wire.GetReply
				if err := rep.Decode(f.Body); err != nil || string(rep.Value) != "v"+k {
					t.Errorf("get %q = %q, %v", k, rep.Value, err)
				}
				f.Release()
				gets.Add(1)
				k = known[r.IntN(len(known))]
				if v, ok, err := oneSidedGet(s, []byte(k)); err != nil || !ok || v != "v"+k {
					t.Errorf("one-sided get %q = %q %v %v", k, v, ok, err)
					return
				}
				onesided.Add(1)
			}
		}
	}
	wg.Add(3)
	go reader(1, false)
	go reader(2, false)
	go reader(3, true)
	wg.Wait()
	if t.Failed() {
		return
	}
	waitSplitsIdle(t, s)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	mustServeAll(t, s, dial(t, s), keys)
	splits := metricValue(gather(t, s), "cell_server_meganode_splits_total", map[string]string{"result": "done"})
	if splits < 2 {
		t.Fatalf("%v splits", splits)
	}
	t.Logf("%d puts, %v splits, %d gets, %d one-sided gets, %d full scans, %d levels", written.Load(), splits, gets.Load(), onesided.Load(), scans.Load(), levels(t, s))
}

// splitPauses pauses the server's split at each of its failpoints until
// the test releases it.
type splitPauses struct {
	reached chan string
	release chan struct{}
	stop    chan struct{}
}

var splitFailpoints = []string{FailpointSplitChose, FailpointSplitFroze, FailpointSplitCopied, FailpointSplitLinked, FailpointSplitInvalidated, FailpointSplitParent}

func pauseSplits(t *testing.T) *splitPauses {
	p := &splitPauses{reached: make(chan string), release: make(chan struct{}), stop: make(chan struct{})}
	for _, name := range splitFailpoints {
		t.Cleanup(failpoint.Enable(name, func() error {
			select {
			case p.reached <- name:
			case <-p.stop:
				return nil
			}
			select {
			case <-p.release:
			case <-p.stop:
			}
			return nil
		}))
	}
	t.Cleanup(func() { close(p.stop) }) // runs first: a failed test lets go of the split
	return p
}

// awaitPut waits for the put of key that a split's freeze held back: it
// must return, and succeed, once the split let go of the key's range.
func awaitPut(t *testing.T, blocked <-chan error, key string) {
	t.Helper()
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatalf("put %q after the split: %v", key, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("put %q still waits after the split let go of its range", key)
	}
}

func (p *splitPauses) wait(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-p.reached:
		if got != want {
			t.Fatalf("split paused at %s, want %s", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("split did not reach %s", want)
	}
}

// TestSplitFailpoints pauses the server's split after each step (chose
// key, froze, copied, re-pointed, invalidated, parent inserted), first of
// the root meganode (the tree grows a level), then of a meganode below the
// new root (the separator goes into the parent), and at every pause checks
// (paper §2.4, Theorem 2):
//   - "Search operations can either continue or backtrack correctly during
//     and after the split": keys on both sides of the split key are found
//     by Get, server-side Search and one-sided searches (CopyNode and
//     View.StepFor over the region's memory) from the root and from X's
//     header, by lock-free searches in X (following its right links) and
//     in Y once it is copied; blink iterators from X and from Y, and ranges
//     in both directions, return every key in order;
//   - "Insert and delete operations are blocked during the meganode split,
//     and proceed correctly once the split is complete": a put at or above
//     the split key waits (the client sees nothing) until the old right
//     half is invalidated, then lands in Y; puts below it go on in X.
func TestSplitFailpoints(t *testing.T) {
	var log applyLog
	s, store := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 64 << 10 // 64 nodes of 1 KiB
		o.Cores = 2
		o.SplitFill = 1 // no split unless the test asks (or a meganode is full)
		o.SplitCopyBatch = 2
		o.SplitFreeBatch = 3
		o.MaxSplitWait = 2 * time.Minute
		o.TestingKnobs.OnApply = log.record
	})
	c := dial(t, s)
	var keys []string
	next := 0
	newKey := func() string {
		next++
		return fmt.Sprintf("key%06d", next*7919%100003)
	}
	fill := func(lm *rsm.Meganode, fill float64) {
		for lm.T.Fill() < fill {
			k := newKey()
			if hp, err := newWorker(s).descend(s.servedMeganode(s.Root()), []byte(k)); err != nil || hp.lm != lm {
				continue // another meganode's key
			}
			put(t, c, k, "v"+k)
			keys = append(keys, k)
		}
	}

	p := pauseSplits(t)
	for round, pick := range []func() *rsm.Meganode{
		func() *rsm.Meganode { return s.servedMeganode(s.Root()) },
		func() *rsm.Meganode { // the rightmost leaf meganode
			lm := s.servedMeganode(s.Root())
			for lm.Level > 0 || !lm.T.Right().IsNil() {
				if r := lm.T.Right(); !r.IsNil() {
					lm = s.servedMeganode(r)
					continue
				}
				it := lm.T.NewIter(nil)
				it.Last()
				lm = s.servedMeganode(it.Child())
				it.Close()
			}
			return lm
		},
	} {
		x := pick()
		fill(x, 0.55)
		oldRoot := s.Root()
		lo, hi := xMin(t, x), xMax(t, x) // X's range before the split
		splitDone := make(chan bool, 1)
		go func() { splitDone <- s.splits.runSplit(x) }()
		var y *rsm.Meganode
		var sep string
		var blocked chan error // a put above sep issued while frozen
		var blockedKey string
		for _, step := range splitFailpoints {
			p.wait(t, step)
			if y == nil && step != FailpointSplitChose {
				sep = string(x.T.Split().Sep)
				for lm := range s.reps.own.sm.Meganodes() {
					if lm.T.Split().Target {
						y = lm
					}
				}
				if sep == "" || y == nil {
					t.Fatalf("%s: X splitting at %q, Y %v", step, sep, y)
				}
			}
			t.Logf("round %d: paused at %s (sep %q)", round, step, sep)
			if step == FailpointSplitInvalidated {
				// X and Y are thawed: the waiting put lands in Y.
				awaitPut(t, blocked, blockedKey)
				if v, err := y.T.Get([]byte(blockedKey), nil); err != nil || string(v) != "v"+blockedKey {
					t.Fatalf("put %q not in Y: %q %v", blockedKey, v, err)
				}
				keys = append(keys, blockedKey)
			}
			mustServeAll(t, s, c, keys)
			var inX, inY []string // keys of X's range before the split; of Y's
			for _, k := range keys {
				if k < lo || k >= hi {
					continue
				}
				inX = append(inX, k)
				if k >= sep && sep != "" {
					inY = append(inY, k)
				}
				if v, err := lockFreeGet(s, x, []byte(k)); err != nil || v != "v"+k {
					t.Fatalf("%s: lock-free get %q from X: %q, %v", step, k, v, err)
				}
				if v, ok, err := oneSidedFrom(s, []byte(k), x.Ptr()); err != nil || !ok || v != "v"+k {
					t.Fatalf("%s: one-sided get %q from X's header: %q %v %v", step, k, v, ok, err)
				}
				if y != nil && k >= sep && step != FailpointSplitFroze {
					if v, err := lockFreeGet(s, y, []byte(k)); err != nil || v != "v"+k {
						t.Fatalf("%s: lock-free get %q from Y: %q, %v", step, k, v, err)
					}
				}
			}
			// Iterators from X (right links into Y) and from Y.
			slices.Sort(inX)
			slices.Sort(inY)
			if got, err := iterKeys(s, x, []byte(lo)); err != nil || !slices.Equal(got[:min(len(got), len(inX))], inX) {
				t.Fatalf("%s: iteration from X: %d keys, %v; want %d first", step, len(got), err, len(inX))
			}
			if y != nil && step != FailpointSplitFroze {
				if got, err := iterKeys(s, y, []byte(sep)); err != nil || !slices.Equal(got[:min(len(got), len(inY))], inY) {
					t.Fatalf("%s: iteration from Y: %d keys, %v; want %d first", step, len(got), err, len(inY))
				}
			}
			if err := x.T.CheckErr(); err != nil {
				t.Fatalf("%s: X: %v", step, err)
			}
			if y != nil {
				if err := y.T.CheckErr(); err != nil {
					t.Fatalf("%s: Y: %v", step, err)
				}
			}
			// Writes below the split key go on.
			for added := 0; added < 2 && sep != ""; {
				if k := newKey(); k < sep && k >= lo {
					put(t, c, k, "v"+k)
					keys = append(keys, k)
					added++
				}
			}
			switch step {
			case FailpointSplitFroze:
				// A put above the split key waits for the split.
				for blockedKey == "" {
					if k := newKey(); k > sep && k < hi {
						blockedKey = k
					}
				}
				bc := dial(t, s)
				blocked = make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					_, err := bc.CallMessage(ctx, wire.OpPut, &wire.PutRequest{Key: []byte(blockedKey), Value: []byte("v" + blockedKey)})
					blocked <- err
				}()
			case FailpointSplitCopied, FailpointSplitLinked:
				select {
				case err := <-blocked:
					t.Fatalf("%s: put %q above the split key went through during the split: %v", step, blockedKey, err)
				case <-time.After(20 * time.Millisecond):
				}
				if step == FailpointSplitLinked {
					for _, v := range blink.CheckLinks(x.T, y.T) {
						t.Fatalf("linked: %v", v)
					}
				}
			case FailpointSplitParent:
				if round == 0 {
					r, err := store.Root(ctxT(t))
					if s.Root() == oldRoot || r != s.Root() || s.reps.own.sm.Region().Root() != s.Root() || levels(t, s) != 2 {
						t.Fatalf("root after the root's split: server %v (was %v), table %v (%v), region %v, %d levels", s.Root(), oldRoot, r, err, s.reps.own.sm.Region().Root(), levels(t, s))
					}
				} else if s.Root() != oldRoot {
					t.Fatalf("root moved from %v to %v on the split of a leaf meganode with a parent", oldRoot, s.Root())
				}
			}
			p.release <- struct{}{}
		}
		if !<-splitDone {
			t.Fatal("split failed")
		}
		waitSplitsIdle(t, s)
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	mustServeAll(t, s, c, keys)
	if done := log.checkSplits(t); done != 2 {
		t.Fatalf("%d splits logged", done)
	}
}

// lockFreeGet reads key with blink's lock-free Get from meganode lm on,
// following the pointers that lead out of a meganode (as the server does).
func lockFreeGet(s *Server, lm *rsm.Meganode, key []byte) (string, error) {
	for hops := 0; hops < maxHops; hops++ {
		res, err := lm.T.Search(key)
		if err != nil {
			return "", err
		}
		if next := res.Next; !next.IsNil() {
			if lm = s.servedMeganode(next); lm == nil {
				return "", fmt.Errorf("next %v is no local meganode", next)
			}
			continue
		}
		if lm.Level > 0 {
			if lm = s.servedMeganode(res.Child); lm == nil {
				return "", fmt.Errorf("child %v is no local meganode", res.Child)
			}
			continue
		}
		v, err := lm.T.Get(key, nil)
		if errors.Is(err, blink.ErrKeyOutOfRange) {
			continue
		}
		return string(v), err
	}
	return "", errors.New("too many hops")
}

func xMin(t *testing.T, lm *rsm.Meganode) string {
	h, err := lm.T.Header()
	if err != nil {
		t.Fatal(err)
	}
	return string(h.Bounds.Min)
}

func xMax(t *testing.T, lm *rsm.Meganode) string {
	h, err := lm.T.Header()
	if err != nil {
		t.Fatal(err)
	}
	if h.Bounds.MaxInf {
		return "\xff"
	}
	return string(h.Bounds.Max)
}

// A failure before the link aborts the split: X is whole again, the new
// meganode is dropped, the log says abort, and the next attempt succeeds.
func TestSplitAbort(t *testing.T) {
	var log applyLog
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 64 << 10
		o.SplitFill = 1
		o.TestingKnobs.OnApply = log.record
	})
	c := dial(t, s)
	var keys []string
	x := s.servedMeganode(s.Root())
	for i := 0; x.T.Fill() < 0.7; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
		keys = append(keys, k)
	}
	boom := errors.New("injected")
	disable := failpoint.Enable(FailpointSplitCopied, func() error { return boom })
	defer disable()
	megas := len(s.reps.own.sm.Region().Meganodes())
	if s.splits.runSplit(x) {
		t.Fatal("split done despite the failpoint")
	}
	if got := metricValue(gather(t, s), "cell_server_meganode_splits_total", map[string]string{"result": "aborted"}); got != 1 {
		t.Fatalf("%v aborted splits counted", got)
	}
	if got := len(s.reps.own.sm.Region().Meganodes()); got != megas || x.T.Split().Source {
		t.Fatalf("after the abort: %d meganodes (%d before), X splitting %v", got, megas, x.T.Split().Source)
	}
	recs := log.all()
	if last := recs[len(recs)-1]; last.kind != rsm.KindSplit || last.phase != rsm.PhaseAbort {
		t.Fatalf("last record %+v, want an abort", last)
	}
	mustServeAll(t, s, c, keys)
	put(t, c, "zzz", "vzzz")
	keys = append(keys, "zzz")

	disable()
	if !s.splits.runSplit(x) {
		t.Fatal("second attempt failed")
	}
	waitSplitsIdle(t, s)
	if levels(t, s) != 2 {
		t.Fatalf("%d levels after the second attempt", levels(t, s))
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	mustServeAll(t, s, c, keys)
	if done := log.checkSplits(t); done != 1 {
		t.Fatalf("%d splits done", done)
	}
}

// A write into a frozen range parks (its worker moves on), so that even
// with a single worker reads and other writes are served while the split
// is paused; it runs again when the split lets go of the range, or is
// answered NeedsRetry when its wait bound passes first.
func TestSplitParksWrites(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 64 << 10
		o.Cores = 1
		o.SplitFill = 1
		o.MaxSplitWait = 1500 * time.Millisecond
	})
	c := dial(t, s)
	x := s.servedMeganode(s.Root())
	var keys []string
	for i := 0; x.T.Fill() < 0.6; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
		keys = append(keys, k)
	}
	p := pauseSplits(t)
	splitDone := make(chan bool, 1)
	go func() { splitDone <- s.splits.runSplit(x) }()
	p.wait(t, FailpointSplitChose)
	p.release <- struct{}{}
	p.wait(t, FailpointSplitFroze)
	sep := string(x.T.Split().Sep)

	// Parked for MaxSplitWait (the request's deadline is later), then
	// NeedsRetry.
	k1 := sep + "1"
	start := time.Now()
	_, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte(k1), Value: []byte("v" + k1)}, nil)
	wantStatus(t, err, wire.StatusNeedsRetry)
	if d := time.Since(start); d < 1400*time.Millisecond {
		t.Fatalf("frozen put answered after %v, before its wait bound", d)
	}
	// Parked until the split lets go of the range.
	k2 := sep + "2"
	bc := dial(t, s)
	blocked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := bc.CallMessage(ctx, wire.OpPut, &wire.PutRequest{Key: []byte(k2), Value: []byte("v" + k2)})
		blocked <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.rpc.parked() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the frozen put never parked")
		}
		time.Sleep(time.Millisecond)
	}
	// The only worker still serves reads and writes below sep.
	for _, k := range keys[:20] {
		if v, ok := get(t, c, k); !ok || v != "v"+k {
			t.Fatalf("get %q while a write is parked: %q %v", k, v, ok)
		}
	}
	for i := 0; i < 100; i++ {
		if k := fmt.Sprintf("key%06d", (1000+i)*7919%100003); k < sep {
			put(t, c, k, "v"+k)
			keys = append(keys, k)
		}
	}
	select {
	case err := <-blocked:
		t.Fatalf("frozen put answered during the split: %v", err)
	default:
	}
	for _, next := range splitFailpoints[2:] { // from froze on
		p.release <- struct{}{}
		p.wait(t, next)
	}
	p.release <- struct{}{}
	if !<-splitDone {
		t.Fatal("split failed")
	}
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatalf("parked put: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("parked put never answered")
	}
	keys = append(keys, k2)
	if s.rpc.parked() != 0 {
		t.Fatalf("%d jobs still parked", s.rpc.parked())
	}
	mustServeAll(t, s, c, keys)
	if _, ok := get(t, c, k1); ok {
		t.Fatalf("%q, answered NeedsRetry, was written", k1)
	}
}

// A tree of meganodes grown by splits survives a clean restart: the
// region reopens with every meganode, the root stays the split-made one,
// Check passes, and every key is served.
func TestSplitTreeSurvivesRestart(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.MeganodeSize = 32 << 10
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	var keys []string
	for i := 0; i < 1500; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
		keys = append(keys, k)
	}
	waitSplitsIdle(t, s1)
	root, megas := s1.Root(), len(s1.reps.own.sm.Region().Meganodes())
	if levels(t, s1) < 2 {
		t.Fatalf("%d levels", levels(t, s1))
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	if s2.Root() != root || len(s2.reps.own.sm.Region().Meganodes()) != megas {
		t.Fatalf("after restart: root %v (was %v), %d meganodes (were %d)", s2.Root(), root, len(s2.reps.own.sm.Region().Meganodes()), megas)
	}
	if err := s2.Check(); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, s2)
	mustServeAll(t, s2, c2, keys)
	// And it keeps splitting.
	for i := 1500; i < 2500; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c2, k, "v"+k)
		keys = append(keys, k)
	}
	waitSplitsIdle(t, s2)
	if err := s2.Check(); err != nil {
		t.Fatal(err)
	}
	mustServeAll(t, s2, c2, keys)
}
