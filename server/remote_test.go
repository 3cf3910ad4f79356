package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// startPair starts n servers over one memory region table: the first
// makes the root meganode, the others join. Meganodes are tiny so that a
// few thousand keys split them many times.
func startCluster(t testing.TB, n int, edit func(i int, o *Options)) ([]*Server, *regiontable.Memory) {
	t.Helper()
	store := regiontable.NewMemory()
	t.Cleanup(func() { _ = store.Close() })
	var srvs []*Server
	for i := range n {
		o := testOptions(t, store)
		o.ServerID = fmt.Sprintf("test-%d", i+1)
		o.MeganodeSize = 64 << 10
		o.RegionSize = 16 << 20
		if edit != nil {
			edit(i, &o)
		}
		srvs = append(srvs, startServer(t, o))
	}
	// Every server sees every member before the test writes.
	for _, s := range srvs {
		waitTable(t, s, func(v *tableView) bool { return len(v.members) == n && len(v.regions) == n })
	}
	return srvs, store
}

func newClient(t *testing.T, store regiontable.Store, mode string) *client.Client {
	t.Helper()
	m, err := locality.ParseMode(mode)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctxT(t), client.Config{Store: store, Mode: m, Provider: "tcp", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRemoteSplit: with remote placement the first server's splits put
// the new meganodes on the second (paper §2.2: "The server copies the
// nodes in X_right to a new local or remote meganode"); every key stays
// readable in both modes, the root grows with entries on both servers,
// and each server's trees check out.
func TestRemoteSplit(t *testing.T) {
	srvs, store := startCluster(t, 2, func(i int, o *Options) {
		o.SplitPlacement = PlaceRemote
		o.OrphanTargetAge = time.Millisecond // targets in progress are asked about
	})
	w := newClient(t, store, "server")
	ctx := ctxT(t)
	var keys []string
	for i := range 3000 {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		if err := w.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		keys = append(keys, k)
	}
	remote := remoteSplitsDone(t, srvs)
	for _, s := range srvs {
		if err := s.Check(); err != nil {
			t.Fatalf("%s: %v", s.opts.ServerID, err)
		}
	}
	if remote < 2 {
		t.Fatalf("%d remote splits", remote)
	}
	for _, s := range srvs {
		t.Logf("%s: %d meganodes", s.opts.ServerID, len(s.reps.own.sm.Region().Meganodes()))
		if len(s.reps.own.sm.Region().Meganodes()) < 2 {
			t.Errorf("%s holds %d meganodes", s.opts.ServerID, len(s.reps.own.sm.Region().Meganodes()))
		}
	}
	slices.Sort(keys)
	mustReadAll(t, "at rest", map[string]*client.Client{"server": newClient(t, store, "server"), "client": newClient(t, store, "client")}, keys)
}

// remoteSplitsDone waits until no server has a split in progress and
// returns how many remote splits they made.
func remoteSplitsDone(t *testing.T, srvs []*Server) int {
	t.Helper()
	for _, s := range srvs {
		waitSplitsIdle(t, s)
	}
	remote := 0
	for _, s := range srvs {
		remote += int(metricValue(gather(t, s), "cell_server_meganode_splits_total", map[string]string{"result": "remote"}))
	}
	return remote
}

// mustReadAll gets every key through every client (its value is "v" and
// the key) and scans the whole key space both ways: exactly keys (sorted).
func mustReadAll(t *testing.T, step string, clients map[string]*client.Client, keys []string) {
	t.Helper()
	for mode, c := range clients {
		for _, k := range keys {
			var v []byte
			err := opCall(func(ctx context.Context) (err error) {
				v, err = c.Get(ctx, []byte(k))
				return err
			})
			if err != nil || string(v) != "v"+k {
				t.Fatalf("%s: %s get %q = %q, %v", step, mode, k, v, err)
			}
		}
		for _, rev := range []bool{false, true} {
			var pairs []client.KV
			err := opCall(func(ctx context.Context) (err error) {
				pairs, _, err = c.Range(ctx, nil, nil, client.RangeOptions{Reverse: rev, KeysOnly: true})
				return err
			})
			if err != nil {
				t.Fatalf("%s: %s range: %v", step, mode, err)
			}
			var got []string
			for _, kv := range pairs {
				got = append(got, string(kv.Key))
			}
			if rev {
				slices.Reverse(got)
			}
			if !slices.Equal(got, keys) {
				t.Fatalf("%s: %s range (reverse %v): %d keys, want %d", step, mode, rev, len(got), len(keys))
			}
		}
	}
}

// TestSplitOpsBadInput: the server-to-server ops refuse what does not
// match a split in progress with a typed error, change nothing and the
// server keeps serving.
func TestSplitOpsBadInput(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "a", "va")
	root := s.Root()
	foreign := blink.MakePtr(4242, 0x1000)
	cases := []struct {
		name string
		op   wire.Op
		req  wire.Message
		want wire.Status
	}{
		{"append to a meganode that is no target", wire.OpSplitAppend,
			&wire.SplitAppendRequest{Meganode: root, Entries: []wire.SplitEntry{{Key: []byte("zz"), Value: []byte("x")}}}, wire.StatusBadRequest},
		{"end of a meganode that is no target", wire.OpSplitEnd, &wire.SplitEndRequest{Meganode: root, Commit: true}, wire.StatusBadRequest},
		{"abort of a pointer in no meganode", wire.OpSplitEnd, &wire.SplitEndRequest{Meganode: root + 7<<20}, wire.StatusBadRequest},
		{"begin at a silly level", wire.OpSplitBegin, &wire.SplitBeginRequest{Level: 9999, Range: wire.KeyRange{Min: []byte("m"), MaxInf: true}}, wire.StatusBadRequest},
		{"begin with an empty range", wire.OpSplitBegin, &wire.SplitBeginRequest{Range: wire.KeyRange{Min: []byte("m"), Max: []byte("a")}}, wire.StatusBadRequest},
		{"begin with an oversized key", wire.OpSplitBegin, &wire.SplitBeginRequest{Range: wire.KeyRange{Min: make([]byte, 4096), MaxInf: true}}, wire.StatusKeyTooLarge},
		{"child in an unknown region", wire.OpInsertChild, &wire.InsertChildRequest{Level: 1, Child: foreign, Key: []byte("m")}, wire.StatusBadRequest},
		{"child that is no meganode here", wire.OpInsertChild, &wire.InsertChildRequest{Level: 1, Child: root + 1024, Key: []byte("m")}, wire.StatusBadRequest},
		{"meganode of a pointer out of the region", wire.OpMeganode, &wire.MeganodeRequest{Ptr: blink.MakePtr(s.RegionID(), 1<<39)}, wire.StatusOutOfBounds},
		{"append to another region", wire.OpSplitAppend, &wire.SplitAppendRequest{Meganode: foreign}, wire.StatusUnknownRegion},
	}
	for _, tc := range cases {
		_, err := call(t, c, tc.op, tc.req, nil)
		if got := wire.StatusOf(err); got != tc.want {
			t.Errorf("%s: %v (status %v), want %v", tc.name, err, got, tc.want)
		}
	}
	if n := len(s.reps.own.sm.Region().Meganodes()); n != 1 {
		t.Fatalf("%d meganodes after refused split ops", n)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	put(t, c, "b", "vb")
}

// TestRemoteSplitFailpoints pauses a remote split after each of its steps
// and checks at every pause (paper §2.4: "Search operations can either
// continue or backtrack correctly during and after the split") that every
// key on both sides of the split key is found by server-side and
// client-side searches and by ranges in both directions; and ("Insert and
// delete operations are blocked during the meganode split, and proceed
// correctly once the split is complete") that a put above the split key
// issued while X is frozen returns only once the split let go of it, and
// lands in Y on the other server.
func TestRemoteSplitFailpoints(t *testing.T) {
	srvs, store := startCluster(t, 2, func(i int, o *Options) {
		o.SplitFill = 1 // no split unless the test asks
		o.SplitPlacement = PlaceRemote
		o.SplitCopyBatch = 2
		o.MaxSplitWait = 2 * time.Minute
		// Targets paused at every step are asked about at once: a
		// target whose split goes on must never be taken for an orphan.
		o.OrphanTargetAge = time.Millisecond
	})
	s := srvs[0]
	x := s.servedMeganode(s.Root())
	c := dial(t, s)
	var keys []string
	for i := 0; x.T.Fill() < 0.6; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	readers := map[string]*client.Client{"server": newClient(t, store, "server"), "client": newClient(t, store, "client")}
	writer := newClient(t, store, "server")
	ctx := ctxT(t)
	check := func(step string) {
		t.Helper()
		mustReadAll(t, step, readers, keys)
	}

	p := pauseSplits(t)
	done := make(chan bool, 1)
	go func() { done <- s.splits.runSplit(x) }()
	var blocked chan error
	blockedKey := "key999999" // above any split key
	for _, step := range splitFailpoints {
		p.wait(t, step)
		sep := string(x.T.Split().Sep)
		t.Logf("paused at %s (sep %q)", step, sep)
		// Long enough for the target's leader to ask the source whether
		// the split goes on (OrphanTargetAge is 1 ms here): it does.
		time.Sleep(3 * replicaInterval)
		switch step {
		case FailpointSplitFroze:
			if sep == "" || !x.T.Split().Source {
				t.Fatalf("X not frozen at %s", step)
			}
			blocked = make(chan error, 1)
			go func() { blocked <- writer.Put(ctx, []byte(blockedKey), []byte("v"+blockedKey)) }()
		case FailpointSplitCopied, FailpointSplitLinked:
			select {
			case err := <-blocked:
				t.Fatalf("put %q above the split key returned while the range was frozen: %v", blockedKey, err)
			case <-time.After(50 * time.Millisecond):
			}
		case FailpointSplitInvalidated:
			// X's old right half is gone and Y thawed: the put lands in Y.
			awaitPut(t, blocked, blockedKey)
			keys = append(keys, blockedKey)
			found := false
			for lm := range srvs[1].reps.own.sm.Meganodes() {
				if lm.Level == 0 {
					if v, err := lm.T.Get([]byte(blockedKey), nil); err == nil && string(v) == "v"+blockedKey {
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("put %q is not in a meganode of the other server", blockedKey)
			}
		}
		check(step)
		p.release <- struct{}{}
	}
	if !<-done {
		t.Fatal("split failed")
	}
	check("done")
	for _, s := range srvs {
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
}

// separatorPending makes a server whose root meganode x split twice, the
// second split's separator refused by a failpoint until unblock is called:
// the split is past its link with its separator pending. It returns the
// keys written, every one readable.
func separatorPending(t *testing.T) (s *Server, c *wire.Conn, x *rsm.Meganode, keys []string, unblock func()) {
	s, _ = newTestServer(t, func(o *Options) {
		o.MeganodeSize = 64 << 10
		o.SplitFill = 1
	})
	c = dial(t, s)
	x = s.servedMeganode(s.Root())
	for i := 0; x.T.Fill() < 0.6; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
		keys = append(keys, k)
	}
	if !s.splits.runSplit(x) { // the root split: the new root has both entries
		t.Fatal("first split failed")
	}
	var fail atomic.Bool
	fail.Store(true)
	t.Cleanup(failpoint.Enable(FailpointSeparator, func() error {
		if fail.Load() {
			return errors.New("parent unreachable")
		}
		return nil
	}))
	if !s.splits.runSplit(x) {
		t.Fatal("second split failed")
	}
	return s, c, x, keys, func() { fail.Store(false) }
}

// pendingSeparators is the number of separators the split loop has to retry.
func pendingSeparators(s *Server) int {
	s.splits.mu.Lock()
	defer s.splits.mu.Unlock()
	return len(s.splits.pendingSeps)
}

// splitsInProgress is the number of splits x's region's applied state
// shows in progress.
func splitsInProgress(s *Server, x *rsm.Meganode) int {
	splits, _ := s.reps.holding(x.Ptr().Region()).sm.Progress()
	return len(splits)
}

// waitSplitsSettled waits until no separator is pending and no split of
// x's region in progress.
func waitSplitsSettled(t *testing.T, s *Server, x *rsm.Meganode) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pendingSeparators(s) != 0 || splitsInProgress(s, x) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d separators pending and %d splits in progress after 10 s", pendingSeparators(s), splitsInProgress(s, x))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSeparatorRetried: a separator that cannot reach its parent (the
// parent's server unreachable) leaves the split done and its new meganode
// reachable through right links; the split loop inserts it later. A check
// waits for it (the split is not over), and answers once it is in.
func TestSeparatorRetried(t *testing.T) {
	s, c, x, keys, unblock := separatorPending(t)
	if n := pendingSeparators(s); n != 1 {
		t.Fatalf("%d separators pending, want 1", n)
	}
	mustServeAll(t, s, c, keys) // through X's right link
	wantStatus(t, s.lockSplitsUntil(time.Now().Add(50*time.Millisecond)), wire.StatusExpired)
	checked := make(chan error, 1)
	go func() {
		rep, err := callCheck(t, c)
		if err == nil && rep.Count != 0 {
			err = fmt.Errorf("%d violations: %q", rep.Count, rep.Violations)
		}
		checked <- err
	}()
	select {
	case err := <-checked:
		t.Fatalf("check answered with a separator pending: %v", err)
	case <-time.After(300 * time.Millisecond): // past a retry of the split loop
	}
	unblock()
	if err := <-checked; err != nil {
		t.Fatalf("check that waited for the separator: %v", err)
	}
	waitSplitsSettled(t, s, x)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	mustServeAll(t, s, c, keys)
}

// A split whose separator is pending when the split is resumed from the
// applied state (issue #8: "a new leader resumes or undoes every split its
// applied state shows in progress"; here the same server after a lost and
// regained lead, which runs resumeSplits too) is driven by one driver,
// the rebuilt one: the queued remainder is dropped, so the separator goes
// in once and the split ends once.
func TestPendingSeparatorResumedOnce(t *testing.T) {
	s, c, x, keys, unblock := separatorPending(t)
	if n, m := pendingSeparators(s), splitsInProgress(s, x); n != 1 || m != 1 {
		t.Fatalf("%d separators pending and %d splits in progress, want 1 and 1", n, m)
	}
	s.splits.resumeSplits(s.reps.holding(x.Ptr().Region())) // the separator still fails: queued again, once
	if n := pendingSeparators(s); n != 1 {
		t.Fatalf("%d separators pending after the split was resumed, want 1", n)
	}
	unblock()
	waitSplitsSettled(t, s, x)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	mustServeAll(t, s, c, keys)
}

// Issue #8: "Server-to-server split ops become idempotent (keyed by source
// meganode and split key): a lost reply retried never fails the split."
// A begin asked twice (its first reply lost) answers the same target and
// makes no second one; a commit or an abort asked twice succeeds twice;
// a begin of a split started over drops the earlier target that already
// received entries. What matches no split is still refused.
func TestSplitOpsRetried(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "a", "va")
	source := blink.MakePtr(4242, 0x1000) // the source is another server's
	begin := func(key string) blink.Ptr {
		t.Helper()
		var rep wire.SplitBeginReply
		if _, err := call(t, c, wire.OpSplitBegin, &wire.SplitBeginRequest{Source: source, Range: wire.KeyRange{Min: []byte(key), MaxInf: true}}, &rep); err != nil {
			t.Fatalf("begin at %q: %v", key, err)
		}
		return rep.Meganode
	}
	end := func(y blink.Ptr, commit bool) error {
		_, err := call(t, c, wire.OpSplitEnd, &wire.SplitEndRequest{Meganode: y, Commit: commit}, nil)
		return err
	}
	y1 := begin("m")
	if y2 := begin("m"); y2 != y1 {
		t.Fatalf("a retried begin made %v, the first made %v", y2, y1)
	}
	if n := len(s.reps.own.sm.Region().Meganodes()); n != 2 {
		t.Fatalf("%d meganodes after a begin asked twice, want 2", n)
	}
	for i := range 2 {
		if err := end(y1, true); err != nil {
			t.Fatalf("commit %d: %v", i+1, err)
		}
	}
	if err := end(y1, false); wire.StatusOf(err) != wire.StatusBadRequest {
		t.Fatalf("abort of a committed target: %v, want BadRequest", err)
	}
	y3 := begin("p")
	if y3 == y1 {
		t.Fatal("a begin of another split answered a committed target")
	}
	for i := range 2 {
		if err := end(y3, false); err != nil {
			t.Fatalf("abort %d: %v", i+1, err)
		}
	}
	// A split started over: its first target received entries.
	y4 := begin("q")
	var arep wire.SplitAppendReply
	if _, err := call(t, c, wire.OpSplitAppend, &wire.SplitAppendRequest{Meganode: y4, Entries: []wire.SplitEntry{{Key: []byte("q1"), Value: []byte("x")}}}, &arep); err != nil {
		t.Fatal(err)
	}
	y5 := begin("q")
	if n := len(s.reps.own.sm.Region().Meganodes()); n != 3 {
		t.Fatalf("begin of a split started over: %d meganodes, want the root, the committed target and the new one", n)
	}
	if lm := s.servedMeganode(y5); lm == nil {
		t.Fatalf("the new target %v is no meganode", y5)
	} else if it := lm.T.NewIter(nil); it.First() {
		t.Fatalf("the new target %v holds %q: the old one's entries", y5, it.Key())
	} else {
		it.Close()
	}
	if err := end(y5, false); err != nil {
		t.Fatal(err)
	}
	if n := len(s.reps.own.sm.Region().Meganodes()); n != 2 {
		t.Fatalf("%d meganodes at the end, want the root and the committed target", n)
	}
	put(t, c, "b", "vb")
}

// A remote split's target whose source gave the split up (here: a begin
// from a meganode that never recorded a split) is dropped by its region's
// leader once it has been frozen for Options.OrphanTargetAge: an orphan
// would block the region's snapshots for good.
func TestOrphanTargetDropped(t *testing.T) {
	srvs, _ := startCluster(t, 2, func(i int, o *Options) {
		o.SplitFill = 1
		o.OrphanTargetAge = 200 * time.Millisecond
	})
	a, b := srvs[0], srvs[1]
	c := dial(t, b)
	var rep wire.SplitBeginReply
	if _, err := call(t, c, wire.OpSplitBegin, &wire.SplitBeginRequest{Source: a.Root(), Range: wire.KeyRange{Min: []byte("m"), MaxInf: true}}, &rep); err != nil {
		t.Fatal(err)
	}
	if b.servedMeganode(rep.Meganode) == nil {
		t.Fatalf("no target %v", rep.Meganode)
	}
	waitFor(t, func() bool { return b.servedMeganode(rep.Meganode) == nil }, "the orphan target to be dropped")
	if n := metricValue(gather(t, b), "cell_server_meganode_splits_total", map[string]string{"result": "orphan_dropped"}); n != 1 {
		t.Errorf("%v orphans counted", n)
	}
	left := len(b.reps.own.sm.Targets())
	if left != 0 {
		t.Errorf("%d targets left", left)
	}
}

// A commit of a remote split's target is retried until it is done, but
// a refusal ends it at once: the target server says the meganode is no
// split target there (a resumed split whose target was thawed and then
// restored from a snapshot gets that answer), and asking again 64 times,
// holding the split loop for seconds, would change nothing.
func TestEndRemoteTargetRefusedOnce(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "a", "va")
	refusals := func() float64 {
		// -1: no such series yet.
		return max(metricValue(gather(t, s), "cell_server_ops_total", map[string]string{"op": "other", "status": "BadRequest"}), 0)
	}
	before := refusals()
	// The root meganode, here: no split target.
	tgt := &splitTarget{ptr: s.Root(), peer: regiontable.Member{ID: s.opts.ServerID, RPCAddr: s.rpcAddr}}
	err := s.splits.endRemoteTarget(tgt, true, nil, 0)
	if wire.StatusOf(err) != wire.StatusBadRequest {
		t.Fatalf("commit of a meganode that is no target: %v, want BadRequest", err)
	}
	// Counted once the reply is written; then no other comes.
	waitFor(t, func() bool { return refusals()-before >= 1 }, "the refusal to be counted")
	time.Sleep(100 * time.Millisecond)
	if n := refusals() - before; n != 1 {
		t.Errorf("the refused commit was asked %v times, want 1", n)
	}
}
