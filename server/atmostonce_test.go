package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// docs/design.md §9: "Writes carry a client id and a sequence number, and a region
// applies each at most once (a session table in its state machine), so a
// retry never applies a put twice around another client's write." A put
// retried after another client's write of the same key, and a delete
// retried after the key was written again, change nothing and answer as
// the first try did; the table survives a restart (snapshot and log).
func TestAtMostOnce(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	putAs := func(c *wire.Conn, client, seq uint64, k, v string) {
		t.Helper()
		if _, err := call(t, c, wire.OpPut, &wire.PutRequest{ClientID: client, Seq: seq, Key: []byte(k), Value: []byte(v)}, nil); err != nil {
			t.Fatalf("put %s as (%d, %d): %v", k, client, seq, err)
		}
	}
	delAs := func(c *wire.Conn, client, seq uint64, k string) error {
		_, err := call(t, c, wire.OpDelete, &wire.DeleteRequest{ClientID: client, Seq: seq, Key: []byte(k)}, nil)
		return err
	}
	putAs(c, 1, 1, "k", "first")
	putAs(c, 2, 1, "k", "second")
	putAs(c, 1, 1, "k", "first") // the retry
	if v, _ := get(t, c, "k"); v != "second" {
		t.Fatalf("after a retried put k = %q, want the other client's later write", v)
	}
	putAs(c, 3, 1, "d", "x")
	if err := delAs(c, 3, 2, "d"); err != nil {
		t.Fatal(err)
	}
	putAs(c, 4, 1, "d", "again")
	if err := delAs(c, 3, 2, "d"); err != nil { // the retry: answers "found", as the first try did
		t.Fatalf("retried delete: %v", err)
	}
	if v, ok := get(t, c, "d"); !ok || v != "again" {
		t.Fatalf("after a retried delete d = %q, %v", v, ok)
	}
	// Writes without a client id are never deduplicated.
	putAs(c, 0, 0, "n", "1")
	putAs(c, 0, 0, "n", "2")
	if v, _ := get(t, c, "n"); v != "2" {
		t.Fatalf("n = %q", v)
	}
	if err := s1.reps.own.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	putAs(c, 5, 7, "k", "after-snapshot")
	s1.crashForTest(t)

	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	c2 := dial(t, s2)
	putAs(c2, 2, 1, "k", "second-retried-after-restart") // in the snapshot
	putAs(c2, 5, 7, "k", "replayed-retry")               // in the log after it
	if v, _ := get(t, c2, "k"); v != "after-snapshot" {
		t.Fatalf("after restart and retries k = %q", v)
	}
}

// callRetry sends a write flagged as a retry after an unknown outcome.
func callRetry(t *testing.T, c *wire.Conn, op wire.Op, req wire.Message) error {
	t.Helper()
	f, err := c.CallFlags(ctxT(t), op, wire.FlagRetry, req.AppendTo(nil))
	f.Release()
	return err
}

// A write flagged as a retry (wire.FlagRetry) is applied when the region
// proves its first attempt was not, answers as the first attempt did
// when it was applied, and is refused Unverifiable, changing nothing,
// when the region cannot tell; the flag needs a client id and a write,
// and the table's floors survive a restart.
func TestRetryFlag(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	putReq := func(client, seq uint64, k, v string) *wire.PutRequest {
		return &wire.PutRequest{ClientID: client, Seq: seq, Key: []byte(k), Value: []byte(v)}
	}
	// The first attempt never arrived: applied.
	if err := callRetry(t, c, wire.OpPut, putReq(1, 1, "k", "first")); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(t, c, "k"); v != "first" {
		t.Fatalf("k = %q", v)
	}
	// Applied before: answered, not applied again around a later write.
	put(t, c, "k", "later")
	if err := callRetry(t, c, wire.OpPut, putReq(1, 1, "k", "first")); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(t, c, "k"); v != "later" {
		t.Fatalf("after a duplicate retry k = %q", v)
	}
	// A delete retried after it applied answers "found" again.
	put(t, c, "d", "x")
	if _, err := call(t, c, wire.OpDelete, &wire.DeleteRequest{ClientID: 1, Seq: 2, Key: []byte("d")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := callRetry(t, c, wire.OpDelete, &wire.DeleteRequest{ClientID: 1, Seq: 2, Key: []byte("d")}); err != nil {
		t.Fatalf("retried delete: %v", err)
	}
	// Past the window the table cannot tell: refused, nothing changed.
	for seq := uint64(3); seq < 3+rsm.SessionWindow; seq++ {
		if _, err := call(t, c, wire.OpPut, putReq(1, seq, fmt.Sprintf("w%03d", seq), "v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	wantStatus(t, callRetry(t, c, wire.OpPut, putReq(1, 1, "k", "first")), wire.StatusUnverifiable)
	wantStatus(t, callRetry(t, c, wire.OpDelete, &wire.DeleteRequest{ClientID: 1, Seq: 2, Key: []byte("k")}), wire.StatusUnverifiable)
	if v, _ := get(t, c, "k"); v != "later" {
		t.Fatalf("after an unverifiable retry k = %q", v)
	}
	// So is a first attempt the window passed (one still queued when its
	// connection broke, after its retry applied and was forgotten): it
	// must not apply a second time.
	_, err := call(t, c, wire.OpPut, putReq(1, 1, "k", "first"), nil)
	wantStatus(t, err, wire.StatusUnverifiable)
	_, err = call(t, c, wire.OpDelete, &wire.DeleteRequest{ClientID: 1, Seq: 2, Key: []byte("k")}, nil)
	wantStatus(t, err, wire.StatusUnverifiable)
	if v, _ := get(t, c, "k"); v != "later" {
		t.Fatalf("after a first attempt below the floor k = %q", v)
	}
	if got := metricValue(gather(t, s1), "cell_server_applied_total", map[string]string{"kind": "put_unverifiable"}); got != 2 {
		t.Errorf("put_unverifiable = %v, want 2", got)
	}
	// Bad uses of the flag.
	wantStatus(t, callRetry(t, c, wire.OpPut, putReq(0, 0, "k", "anonymous")), wire.StatusBadRequest)
	wantStatus(t, callRetry(t, c, wire.OpGet, &wire.GetRequest{Key: []byte("k")}), wire.StatusBadRequest)

	// The floor survives a snapshot and a restart.
	if err := s1.reps.own.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	s1.crashForTest(t)
	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	c2 := dial(t, s2)
	wantStatus(t, callRetry(t, c2, wire.OpPut, putReq(1, 1, "k", "first")), wire.StatusUnverifiable)
	if err := callRetry(t, c2, wire.OpPut, putReq(1, 1000, "k", "new")); err != nil {
		t.Fatalf("a retry above the floor after a restart: %v", err)
	}
	if v, _ := get(t, c2, "k"); v != "new" {
		t.Fatalf("k = %q", v)
	}
}

// leafOn returns the leaf meganode of s's own region covering key, or 0.
func leafOn(s *Server, key []byte) blink.Ptr {
	for lm := range s.reps.servedReplica(s.reps.own.regionID).sm.Meganodes() {
		if lm.Level != 0 {
			continue
		}
		if h, err := lm.T.Header(); err == nil && h.Bounds.Contains(key) {
			return lm.Ptr()
		}
	}
	return 0
}

// A key that moved to another region in a remote split takes what the
// source's table knew of its writes along (the digest in the target's
// commit): a retry of a write the source applied is never applied again
// where the key went, while the source still answers the retries it
// remembers.
func TestRetryAfterKeyMoved(t *testing.T) {
	srvs, _ := startCluster(t, 2, func(i int, o *Options) {
		o.SplitFill = 1 // no split unless the test asks
		o.SplitPlacement = PlaceRemote
	})
	s, target := srvs[0], srvs[1]
	x := s.servedMeganode(s.Root())
	c := dial(t, s)
	var keys []string
	for i := 0; x.T.Fill() < 0.6; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		if _, err := call(t, c, wire.OpPut, &wire.PutRequest{ClientID: 77, Seq: uint64(i + 1), Key: []byte(k), Value: []byte("v" + k)}, nil); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) <= rsm.SessionWindow {
		t.Fatalf("%d keys: the test needs more than a window", len(keys))
	}
	if !s.splits.runSplit(x) {
		t.Fatal("the split failed")
	}
	waitSplitsIdle(t, s)
	c2 := dial(t, target)
	moved, stayed := 0, 0
	for i, k := range keys {
		seq := uint64(i + 1)
		retry := &wire.PutRequest{ClientID: 77, Seq: seq, Key: []byte(k), Value: []byte("again")}
		var err error
		if leaf := leafOn(target, []byte(k)); !leaf.IsNil() {
			moved++
			retry.Ptr = leaf
			wantStatus(t, callRetry(t, c2, wire.OpPut, retry), wire.StatusUnverifiable)
			var rep wire.GetReply
			if _, err := call(t, c2, wire.OpGet, &wire.GetRequest{Ptr: leaf, Key: []byte(k)}, &rep); err != nil || string(rep.Value) != "v"+k {
				t.Fatalf("%s after its retry where it moved = %q, %v", k, rep.Value, err)
			}
			continue
		}
		stayed++
		err = callRetry(t, c, wire.OpPut, retry)
		if seq > uint64(len(keys))-rsm.SessionWindow {
			if err != nil {
				t.Fatalf("retry of a remembered write of %s: %v", k, err)
			}
		} else {
			wantStatus(t, err, wire.StatusUnverifiable)
		}
		if v, _ := get(t, c, k); v != "v"+k {
			t.Fatalf("%s after its retry = %q", k, v)
		}
	}
	if moved == 0 || stayed == 0 {
		t.Fatalf("%d keys moved, %d stayed", moved, stayed)
	}
	// Where the key went, writes the source never saw are vouched for.
	k := []byte(keys[0])
	for _, kk := range keys {
		if leafOn(target, []byte(kk)) != 0 {
			k = []byte(kk)
			break
		}
	}
	leaf := leafOn(target, k)
	for _, r := range []*wire.PutRequest{
		{Ptr: leaf, ClientID: 78, Seq: 1, Key: k, Value: []byte("other client")},
		{Ptr: leaf, ClientID: 77, Seq: uint64(len(keys) + 1), Key: k, Value: []byte("above the floor")},
	} {
		if err := callRetry(t, c2, wire.OpPut, r); err != nil {
			t.Fatalf("retry (%d, %d) where the key moved: %v", r.ClientID, r.Seq, err)
		}
	}
	t.Logf("%d keys moved, %d stayed", moved, stayed)
}

// A first attempt of a client the region forgot whole may be a copy
// queued before its connection broke, whose flagged retry applied before
// the client was forgotten: it is refused (nothing changes), and the
// client sends the write again under a new id. The old id stays refused.
// Records of older logs (rsm.FlagFloor without rsm.FlagForgotten) apply as then.
func TestForgottenClientStartsOver(t *testing.T) {
	s, store := newTestServer(t)
	cl := newClient(t, store, "server")
	ctx := ctxT(t)
	if err := cl.Put(ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	sessionIDs := s.reps.own.sm.Clients
	ids := sessionIDs()
	if len(ids) != 1 {
		t.Fatalf("sessions %v, want the client's alone", ids)
	}
	old := ids[0]
	s.reps.own.sm.ForgetClient(old) // as the table's bound would

	if err := cl.Put(ctx, []byte("b"), []byte("2")); err != nil {
		t.Fatalf("a put of the forgotten client: %v", err)
	}
	if got := metricValue(gather(t, s), "cell_server_applied_total", map[string]string{"kind": "put_unverifiable"}); got != 1 {
		t.Errorf("put_unverifiable = %v, want 1", got)
	}
	if st := cl.Stats(); st.Retry("seq-passed") != 1 {
		n := st.Retry("seq-passed")
		t.Errorf("%d seq-passed retries, want 1", n)
	}
	if ids := sessionIDs(); len(ids) != 1 || ids[0] == old {
		t.Fatalf("sessions %v after the client started over (old id %d)", ids, old)
	}
	c := dial(t, s)
	_, err := call(t, c, wire.OpPut, &wire.PutRequest{ClientID: old, Seq: 1 << 20, Key: []byte("b"), Value: []byte("late")}, nil)
	if !errors.Is(err, wire.ErrUnverifiable) {
		t.Fatalf("a late first attempt under the forgotten id: %v", err)
	}
	if v, _ := get(t, c, "b"); v != "2" {
		t.Fatalf("b = %q after a refused late attempt", v)
	}
}
