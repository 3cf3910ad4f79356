package server

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
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
	if err := s1.raft.Snapshot().Error(); err != nil {
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

// The table keeps a client's last sessionWindow sequences and at most
// maxSessions clients, forgetting by log order alone; its snapshot
// encoding round-trips.
func TestSessionsBounds(t *testing.T) {
	var tab sessions
	for seq := uint64(1); seq <= sessionWindow+10; seq++ {
		tab.record(7, seq, seq%2 == 0, seq)
	}
	if _, dup := tab.lookup(7, 10); dup {
		t.Fatal("sequence 10 remembered past the window")
	}
	if found, dup := tab.lookup(7, sessionWindow+10); !dup || !found {
		t.Fatalf("latest sequence: found %v dup %v", found, dup)
	}
	for id := uint64(100); id < 100+maxSessions; id++ {
		tab.record(id, 1, false, 1000+id)
	}
	if _, dup := tab.lookup(7, sessionWindow+10); dup {
		t.Fatal("the client with the oldest write was not the one forgotten")
	}
	if len(tab.clients) != maxSessions {
		t.Fatalf("%d clients", len(tab.clients))
	}
	b := tab.appendTo(nil)
	got, err := readSessions(bytes.NewReader(b), replVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.appendTo(nil), b) {
		t.Fatal("the session table does not round-trip")
	}
	for _, cut := range []int{0, 3, 4, 20, len(b) - 1} {
		if _, err := readSessions(bytes.NewReader(b[:cut]), replVersion); err == nil {
			t.Fatalf("a table cut at %d bytes decoded", cut)
		}
	}
}

// A client's window, a ring once full, keeps its last sessionWindow
// sequences oldest first, in memory, in a clone and through a snapshot,
// and its floor is the highest sequence it forgot.
func TestSessionWindowRing(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	var tab sessions
	var model []uint64 // every sequence written, oldest first
	used := map[uint64]bool{}
	for i := range 3*sessionWindow + 17 {
		seq := rng.Uint64N(1 << 20)
		for used[seq] || seq == 0 {
			seq = rng.Uint64N(1 << 20)
		}
		used[seq] = true
		model = append(model, seq)
		tab.record(9, seq, seq%3 == 0, uint64(i+1))
		want := model[max(0, len(model)-sessionWindow):]
		s := tab.clients[9]
		if got := slices.Collect(s.order.all()); !slices.Equal(got, want) {
			t.Fatalf("after %d writes: window %v, want %v", i+1, got, want)
		}
		var floor uint64
		for _, f := range model[:len(model)-len(want)] {
			floor = max(floor, f)
		}
		if s.floor != floor {
			t.Fatalf("after %d writes: floor %d, want %d", i+1, s.floor, floor)
		}
		if len(s.found) != len(want) {
			t.Fatalf("after %d writes: %d sequences found, want %d", i+1, len(s.found), len(want))
		}
	}
	b := tab.appendTo(nil)
	c := tab.clone()
	if !bytes.Equal(c.appendTo(nil), b) {
		t.Fatal("a clone encodes differently")
	}
	got, err := readSessions(bytes.NewReader(b), replVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.appendTo(nil), b) {
		t.Fatal("the session table does not round-trip")
	}
	w := model[len(model)-sessionWindow:]
	if gw := slices.Collect(got.clients[9].order.all()); !slices.Equal(gw, w) {
		t.Fatalf("read back: window %v, want %v", gw, w)
	}
	// The restored window goes on as the original does.
	tab.record(9, 1<<21, false, 1<<20)
	got.record(9, 1<<21, false, 1<<20)
	if !bytes.Equal(got.appendTo(nil), tab.appendTo(nil)) {
		t.Fatal("the restored table and the original differ after one more write")
	}
}

// A retry after an unknown outcome is vouched for only while the table
// remembers everything of its client below it: not below what the
// client's window forgot, not for a forgotten client (the evicted
// filter), not below a source region's digest merged after a split.
func TestSessionsVouch(t *testing.T) {
	var tab sessions
	if !tab.vouches(7, 1) {
		t.Fatal("an empty table does not vouch for a client it never saw")
	}
	if tab.vouches(0, 1) {
		t.Fatal("the table vouches for a write without a client id")
	}
	for seq := uint64(1); seq <= sessionWindow+10; seq++ {
		tab.record(7, seq, false, seq)
	}
	if tab.vouches(7, 10) || tab.vouches(7, 1) {
		t.Fatal("the table vouches for sequences its window forgot")
	}
	if !tab.vouches(7, sessionWindow+11) {
		t.Fatal("the table does not vouch for a sequence above its window")
	}
	for id := uint64(100); id < 100+maxSessions; id++ {
		tab.record(id, 1, false, 1000+id)
	}
	if _, ok := tab.clients[7]; ok {
		t.Fatal("client 7 was not forgotten")
	}
	if tab.vouches(7, sessionWindow+11) {
		t.Fatal("the table vouches for a forgotten client")
	}
	tab.record(7, sessionWindow+20, false, 9000) // back, with a new session
	if tab.vouches(7, sessionWindow+11) {
		t.Fatal("the table vouches for a forgotten client that came back")
	}
	if !tab.vouches(5, 1) {
		t.Fatal("the table does not vouch for a client it never forgot (or the filter is full)")
	}

	// A digest raises the target's floors and carries the filter.
	var src, dst sessions
	src.record(1, 40, false, 1)
	src.record(1, 30, false, 2)
	src.record(2, 5, false, 3)
	dst.record(2, 9, false, 1)
	d := src.appendDigest(nil, wire.DefaultMaxFrameSize)
	if err := checkDigest(d); err != nil {
		t.Fatal(err)
	}
	dst.merge(d, 10)
	switch {
	case dst.vouches(1, 40), dst.vouches(1, 30), dst.vouches(1, 35):
		t.Fatal("the target vouches for a sequence the source may have applied")
	case dst.vouches(2, 5):
		t.Fatal("the target vouches for client 2's sequence 5")
	case !dst.vouches(1, 41), !dst.vouches(2, 6), !dst.vouches(3, 1):
		t.Fatal("the target refuses sequences the source never applied")
	}
	if _, dup := dst.lookup(2, 9); !dup {
		t.Fatal("the merge lost the target's own sequences")
	}
	if !dst.vouches(7, 1) {
		t.Fatal("the digest brought a filter the source did not have")
	}
	dst.merge(tab.appendDigest(nil, wire.DefaultMaxFrameSize), 20001)
	if dst.vouches(7, sessionWindow+30) {
		t.Fatal("the target vouches for a client the source forgot")
	}
	for _, bad := range [][]byte{nil, d[:7], d[:len(d)-1], append(bytes.Clone(d), 0)} {
		if checkDigest(bad) == nil {
			t.Fatalf("a %d-byte digest passed", len(bad))
		}
	}
	swapped := bytes.Clone(d)
	copy(swapped[digestHeaderSize:], d[digestHeaderSize+digestEntrySize:digestHeaderSize+2*digestEntrySize])
	copy(swapped[digestHeaderSize+digestEntrySize:], d[digestHeaderSize:digestHeaderSize+digestEntrySize])
	if checkDigest(swapped) == nil {
		t.Fatal("a digest with its clients out of order passed")
	}

	// Snapshots keep floors and the filter; version 1 tables still read.
	got, err := readSessions(bytes.NewReader(dst.appendTo(nil)), replVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.appendTo(nil), dst.appendTo(nil)) || !reflect.DeepEqual(got.evicted, dst.evicted) {
		t.Fatal("floors or the filter do not round-trip")
	}
	v1 := le.AppendUint32(nil, 1)
	v1 = le.AppendUint64(v1, 9)  // client
	v1 = le.AppendUint64(v1, 4)  // last index
	v1 = le.AppendUint32(v1, 1)  // one sequence
	v1 = le.AppendUint64(v1, 12) // seq 12, found
	v1 = append(v1, 1)
	old, err := readSessions(bytes.NewReader(v1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if found, dup := old.lookup(9, 12); !dup || !found || !old.vouches(9, 13) || !old.vouches(10, 1) {
		t.Fatalf("version 1 table: found %v dup %v", found, dup)
	}
	// A version 1 table whose bounds were reached may have forgotten
	// sequences and clients without noting them.
	var full sessions
	for seq := uint64(1); seq <= sessionWindow+5; seq++ {
		full.record(1, seq, false, seq)
	}
	for id := uint64(2); id <= maxSessions; id++ {
		full.record(id, 1, false, 1000+id)
	}
	v1 = stripToV1(t, full.appendTo(nil))
	old, err = readSessions(bytes.NewReader(v1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if old.vouches(1, sessionWindow+1) || old.vouches(1, 3) || old.vouches(maxSessions+1, 1) {
		t.Fatal("a full version 1 table vouches for what it may have forgotten")
	}
}

// stripToV1 rewrites a table's version 2 encoding as version 1: no
// floors, no filter.
func stripToV1(t *testing.T, b []byte) []byte {
	t.Helper()
	count := le.Uint32(b)
	out := le.AppendUint32(nil, count)
	b = b[4:]
	for range count {
		seqs := le.Uint32(b[16:])
		out = append(out, b[:sessionHeaderSizeV1]...)
		b = b[sessionHeaderSize:]
		n := int(seqs) * sessionEntrySize
		out = append(out, b[:n]...)
		b = b[n:]
	}
	if le.Uint32(b) != 0 {
		t.Fatal("the table has a filter: version 1 had none")
	}
	return out
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
	for seq := uint64(3); seq < 3+sessionWindow; seq++ {
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
	if err := s1.raft.Snapshot().Error(); err != nil {
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
	for _, lm := range s.servedReplica(s.regionID).megas.Load().bySlot {
		if lm == nil || lm.level != 0 {
			continue
		}
		if h, err := lm.t.Header(); err == nil && h.Bounds.Contains(key) {
			return lm.m.Ptr()
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
	x := s.meganodeAt(s.Root())
	c := dial(t, s)
	var keys []string
	for i := 0; x.t.Fill() < 0.6; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		if _, err := call(t, c, wire.OpPut, &wire.PutRequest{ClientID: 77, Seq: uint64(i + 1), Key: []byte(k), Value: []byte("v" + k)}, nil); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) <= sessionWindow {
		t.Fatalf("%d keys: the test needs more than a window", len(keys))
	}
	if !s.runSplit(x) {
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
		if seq > uint64(len(keys))-sessionWindow {
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

// BenchmarkSessionsNewClient: a write of a client the table has no
// session for, the table full (4,096 clients): it forgets one.
func BenchmarkSessionsNewClient(b *testing.B) {
	var tab sessions
	for id := uint64(1); id <= maxSessions; id++ {
		tab.record(id, 1, false, id)
	}
	id := uint64(maxSessions)
	b.ResetTimer()
	for b.Loop() {
		id++
		tab.record(id, 1, false, id)
	}
}

// BenchmarkSessionsKnownClient: a write of a client the table has a
// session for, the table full.
func BenchmarkSessionsKnownClient(b *testing.B) {
	var tab sessions
	for id := uint64(1); id <= maxSessions; id++ {
		tab.record(id, 1, false, id)
	}
	index, seq := uint64(maxSessions), uint64(1)
	b.ResetTimer()
	for b.Loop() {
		index++
		seq++
		tab.record(index%maxSessions+1, seq, false, index)
	}
}

// BenchmarkSessionsFullWindow: a write of a known client whose window
// is full (its sessionWindow last sequences remembered), the table full:
// the write forgets the client's oldest sequence.
func BenchmarkSessionsFullWindow(b *testing.B) {
	var tab sessions
	index := uint64(0)
	for seq := uint64(1); seq <= sessionWindow; seq++ {
		for id := uint64(1); id <= maxSessions; id++ {
			index++
			tab.record(id, seq, false, index)
		}
	}
	seq := uint64(sessionWindow)
	b.ResetTimer()
	for b.Loop() {
		index++
		id := index%maxSessions + 1
		if id == 1 {
			seq++
		}
		tab.record(id, seq, false, index)
	}
}

// The table forgets the client whose last write is oldest (the lowest id
// among equals), decided by the log alone so that replicas agree: checked
// against a scan of a model after every write, and across a snapshot.
func TestSessionsForgetOldest(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var tab sessions
	model := map[uint64]uint64{} // client → last index
	index, seq := uint64(1), uint64(0)
	check := func(step int) {
		t.Helper()
		n := 0
		for s := tab.oldest; s != nil; s = s.next {
			if s.prev != nil && (s.prev.last > s.last || s.prev.last == s.last && s.prev.id >= s.id) || s.next == nil && tab.newest != s {
				t.Fatalf("step %d: the list is out of (last, id) order at client %d", step, s.id)
			}
			n++
		}
		if len(tab.clients) != len(model) || n != len(model) {
			t.Fatalf("step %d: %d clients, %d in the list, model %d", step, len(tab.clients), n, len(model))
		}
		for id, last := range model {
			if s := tab.clients[id]; s == nil || s.last != last {
				t.Fatalf("step %d: client %d: %+v, model last %d", step, id, s, last)
			}
		}
	}
	write := func(id uint64) {
		if _, ok := model[id]; !ok && len(model) >= maxSessions {
			var victim, oldest uint64
			first := true
			for v, last := range model {
				if first || last < oldest || last == oldest && v < victim {
					victim, oldest, first = v, last, false
				}
			}
			delete(model, victim)
		}
		model[id] = index
		seq++ // unique: apply records a pair once
		tab.record(id, seq, false, index)
	}
	for step := range 12_000 {
		switch k := rng.IntN(100); {
		case k < 2: // a snapshot and a restore
			got, err := readSessions(bytes.NewReader(tab.appendTo(nil)), replVersion)
			if err != nil {
				t.Fatal(err)
			}
			tab = got
		case k < 4: // a digest merged: its new clients share one index
			var src sessions
			for range rng.IntN(20) {
				src.record(rng.Uint64N(6000)+1, 1, false, 1)
			}
			tab.merge(src.appendDigest(nil, wire.DefaultMaxFrameSize), index)
			for _, id := range src.sortedIDs() { // merge's order
				if _, ok := model[id]; !ok && len(model) < maxSessions {
					model[id] = index
				}
			}
		case k < 30: // writes in one entry share its index
			for range 1 + rng.IntN(4) {
				write(rng.Uint64N(6000) + 1)
			}
		default:
			write(rng.Uint64N(6000) + 1)
		}
		index++
		if step%500 == 0 || step > 11_900 {
			check(step)
		}
	}
}

// A first attempt of a client the region forgot whole may be a copy
// queued before its connection broke, whose flagged retry applied before
// the client was forgotten: it is refused (nothing changes), and the
// client sends the write again under a new id. The old id stays refused.
// Records of older logs (recFloor without recForgotten) apply as then.
func TestForgottenClientStartsOver(t *testing.T) {
	var tab sessions
	tab.record(5, 1, false, 1)
	tab.markEvicted(9)
	for _, c := range []struct {
		flags  uint16
		client uint64
		want   error
	}{
		{recFloor | recForgotten, 9, errForgottenClient},
		{recFloor, 9, nil}, // an older log's record
		{recFloor | recForgotten, 5, nil},
		{recFloor | recForgotten, 10, nil},
	} {
		if got := tab.refusal(c.flags, c.client, 7); got != c.want {
			t.Errorf("refusal(%#x, client %d) = %v, want %v", c.flags, c.client, got, c.want)
		}
	}

	s, store := newTestServer(t)
	cl := newClient(t, store, "server")
	ctx := ctxT(t)
	if err := cl.Put(ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	sessionIDs := func() []uint64 {
		s.applyMu.Lock()
		defer s.applyMu.Unlock()
		return s.repl.Sessions.sortedIDs()
	}
	ids := sessionIDs()
	if len(ids) != 1 {
		t.Fatalf("sessions %v, want the client's alone", ids)
	}
	old := ids[0]
	s.applyMu.Lock() // forget it, as evictOldest would
	st := &s.repl.Sessions
	st.unlink(st.clients[old])
	delete(st.clients, old)
	st.markEvicted(old)
	s.applyMu.Unlock()

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
