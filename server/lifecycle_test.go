package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/testutil"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// The server registers its member and region in the region table, and
// leaves the member list at Close.
func TestRegionTableEntries(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	s := startServer(t, testOptions(t, store))
	ctx := ctxT(t)
	ms, err := store.Members(ctx)
	if err != nil || len(ms) != 1 {
		t.Fatalf("members %v, %v", ms, err)
	}
	if m := ms[0]; m.ID != "test-1" || m.RPCAddr != s.Addr() || m.ReadAddr != s.ReadAddr() || m.HostID != "test-host" || m.Version != "dev" {
		t.Fatalf("member %+v", m)
	}
	r, err := store.Region(ctx, s.RegionID())
	if err != nil {
		t.Fatal(err)
	}
	if r.Host != "test-1" || r.Epoch != 1 || r.Kind != regiontable.KindData || r.Size != 32<<20 || r.Path == "" || r.Path != s.reps.own.sm.Region().Path() {
		t.Fatalf("region %+v", r)
	}
	for _, p := range []string{rdma.ProviderTCP, rdma.ProviderSHM} {
		raw, ok := r.ReadKeyFor(p)
		if !ok {
			t.Fatalf("no %s read key in %+v", p, r)
		}
		var rk rdma.RemoteKey
		if err := json.Unmarshal(raw, &rk); err != nil || rk.Region != s.RegionID() || rk.Key == 0 || rk.Len != 32<<20 {
			t.Fatalf("%s key %s: %+v, %v", p, raw, rk, err)
		}
	}
	if root, _ := store.Root(ctx); root != s.Root() || root.Region() != s.RegionID() {
		t.Fatalf("table root %v, server root %v", root, s.Root())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ms, _ := store.Members(ctx); len(ms) != 0 {
		t.Fatalf("members after Close: %v", ms)
	}
}

// One-sided reads through the registered tcp responder see the tree the
// server wrote (the root's header and root node), and stop at Close.
func TestOneSidedReadOfRegisteredRegion(t *testing.T) {
	s, store := newTestServer(t)
	c := dial(t, s)
	put(t, c, "one-sided", "yes")
	r, err := store.Region(ctxT(t), s.RegionID())
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := r.ReadKeyFor(rdma.ProviderTCP)
	var rk rdma.RemoteKey
	if err := json.Unmarshal(raw, &rk); err != nil {
		t.Fatal(err)
	}
	cl, err := rdma.NewTCPClient(rdma.TCPClientOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	buf := make([]byte, 1024)
	if err := cl.Read(ctxT(t), &rk, s.Root().Offset(), buf); err != nil {
		t.Fatal(err)
	}
	h, why := blink.DecodeHeader(buf)
	if why != blink.OK {
		t.Fatalf("header: %v", why)
	}
	if err := cl.Read(ctxT(t), &rk, h.Root.Offset(), buf); err != nil {
		t.Fatal(err)
	}
	v := blink.View(buf)
	if blink.CheckCopy(buf) != blink.OK || v.Count() != 1 || string(v.Key(0)) != "one-sided" {
		t.Fatalf("root node read one-sided: %v", v)
	}
	if n := metricValue(gather(t, s), "cell_server_onesided_reads_total", map[string]string{"provider": "tcp"}); n < 1 {
		t.Fatalf("one-sided reads counted %v", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Read(ctxT(t), &rk, 0, buf[:8]); err == nil {
		t.Fatal("one-sided read after Close succeeded")
	}
}

// After a clean shutdown the next start rebuilds the region from its
// snapshot and log: data, region ID and root survive, the epoch grows.
func TestRestartAfterCleanShutdown(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	for _, k := range []string{"a", "b", "c"} {
		put(t, c, k, "v-"+k)
	}
	id, root := s1.RegionID(), s1.Root()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	if s2.RegionID() != id || s2.Root() != root || s2.Epoch() != 2 {
		t.Fatalf("restart: region %d root %v epoch %d; want region %d root %v epoch 2", s2.RegionID(), s2.Root(), s2.Epoch(), id, root)
	}
	c2 := dial(t, s2)
	for _, k := range []string{"a", "b", "c"} {
		if v, ok := get(t, c2, k); !ok || v != "v-"+k {
			t.Fatalf("after restart %s = %q, %v", k, v, ok)
		}
	}
	if e, _ := store.Region(ctxT(t), id); e.Epoch != 2 {
		t.Fatalf("table epoch %d, want 2", e.Epoch)
	}
	// A request with the first run's epoch is refused.
	_, err := call(t, c2, wire.OpGet, &wire.GetRequest{Key: []byte("a"), Epoch: 1}, &wire.GetReply{})
	wantStatus(t, err, wire.StatusStaleEpoch)
}

// A restart replays the log written since the last snapshot: writes
// after a snapshot, deletes, overwrites and a value of several extents
// are all back, the root meganode is the same, and the region file was
// made anew (the last run's is never trusted).
func TestRestartReplaysTheLog(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	want := map[string]string{}
	for i := range 300 {
		k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
		put(t, c, k, v)
		want[k] = v
	}
	if err := s1.reps.own.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		k := fmt.Sprintf("k%04d", i)
		switch i % 3 {
		case 0:
			del(t, c, k)
			delete(want, k)
		case 1:
			want[k] = strings.Repeat("w", 3000+i)
			put(t, c, k, want[k])
		}
	}
	id, root := s1.RegionID(), s1.Root()
	s1.crashForTest(t)

	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	if s2.RegionID() != id || s2.Root() != root {
		t.Fatalf("region %d root %v; want region %d root %v", s2.RegionID(), s2.Root(), id, root)
	}
	c2 := dial(t, s2)
	for i := range 300 {
		k := fmt.Sprintf("k%04d", i)
		v, ok := get(t, c2, k)
		if w, in := want[k]; ok != in || v != w {
			t.Fatalf("after restart %s = %.20q, %v; want %.20q, %v", k, v, ok, w, in)
		}
	}
	if err := rootTree(t, s2).CheckErr(); err != nil {
		t.Fatal(err)
	}
}

// regionFiles lists the region files of s's data directory, wherever
// they are, with the bytes of storage each holds.
func regionFiles(t testing.TB, s *Server) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	prefix := regionFilePrefix(s.dir.dir)
	for _, dir := range s.regionDirs() {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(dir, e.Name()), &st); err == nil {
				out[e.Name()] = st.Blocks * 512
			}
		}
	}
	return out
}

// A restart restores its region from the last snapshot into a new file,
// and the empty file it made at the start is gone by then: with
// --prefault (and on hugetlbfs, which reserves a region's pages when it
// is mapped) the two would each hold the region's whole size. Before,
// a restart briefly held twice the region's memory.
func TestRestartRestoresWithOneRegionFile(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.Prefault = true
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	for i := range 200 {
		put(t, c, fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i))
	}
	if err := s1.reps.own.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := 200; i < 300; i++ {
		put(t, c, fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i))
	}
	s1.crashForTest(t)

	var atRestore map[string]int64
	var s2 *Server
	opts.Registry, opts.Logger = nil, testLogger(t)
	opts.TestingKnobs.BeforeRestoreImage = func(uint32) { atRestore = regionFiles(t, s2) }
	s2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if atRestore == nil {
		t.Fatal("the restart restored no snapshot")
	}
	if len(atRestore) != 0 {
		t.Fatalf("region files when the image is read: %v, want none (the empty one dropped)", atRestore)
	}
	after := regionFiles(t, s2)
	if len(after) != 1 {
		t.Fatalf("region files after the restart: %v, want one", after)
	}
	c2 := dial(t, s2)
	for i := range 300 {
		k := fmt.Sprintf("k%04d", i)
		if v, ok := get(t, c2, k); !ok || v != fmt.Sprintf("v%d", i) {
			t.Fatalf("after restart %s = %q, %v", k, v, ok)
		}
	}
	var inRegion, applied uint64
	s2.reps.own.sm.Exclusive(func(r *meganode.Region, a uint64) { inRegion, applied = r.Applied(), a })
	if inRegion != applied || applied == 0 {
		t.Fatalf("after restart the region records applied index %d, the replica %d", inRegion, applied)
	}
}

// An image that fails to restore into a replica nothing was applied to
// leaves it an empty region of its layout again, for raft to try once
// more; a replica that holds data keeps it.
func TestFailedRestoreKeepsTheReplicaWhole(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	s := startServer(t, testOptions(t, store))
	rep := s.reps.own
	put(t, dial(t, s), "a", "1")
	state, _ := snapshotOf(t, rep)
	bad := func(rep *replica) error {
		return rep.sm.Restore(io.MultiReader(bytes.NewReader(state), strings.NewReader("not an image")))
	}

	// A replica with data (the root meganode, a key): kept as it was.
	before := rep.sm.Region()
	if err := bad(rep); err == nil {
		t.Fatal("a bad image restored")
	}
	if rep.sm.Region() != before || len(rep.sm.Region().Meganodes()) == 0 {
		t.Fatalf("the replica's region changed on a failed restore")
	}
	if v, ok := get(t, dial(t, s), "a"); !ok || v != "1" {
		t.Fatalf("a = %q, %v after a failed restore", v, ok)
	}

	// A pristine replica: dropped first, then made again, empty.
	layout := rep.sm.Region().Layout()
	p := newPristineReplica(t, s)
	old := p.sm.Region()
	err := bad(p)
	got := p.sm.Region()
	if err == nil {
		t.Fatal("a bad image restored")
	}
	if got == old || got.Layout() != layout || len(got.Meganodes()) != 0 {
		t.Fatalf("after a failed restore the pristine replica's region is %p (was %p), layout %+v (want %+v), %d meganodes", got, old, got.Layout(), layout, len(got.Meganodes()))
	}
	if _, err := os.Stat(got.Path()); err != nil {
		t.Fatalf("its region file: %v", err)
	}
}

// snapshotOf takes a snapshot of rep and returns its two parts: the
// replicated state's encoding and the region's image.
func snapshotOf(t *testing.T, rep *replica) (state, img []byte) {
	t.Helper()
	snap, err := (*fsm)(rep).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &slowSink{}
	err = snap.Persist(sink)
	snap.Release()
	if err != nil {
		t.Fatal(err)
	}
	b := sink.Bytes()
	br := bytes.NewReader(b)
	if _, err := rsm.ReadState(br); err != nil {
		t.Fatal(err)
	}
	n := len(b) - br.Len()
	return b[:n], b[n:]
}

// A data directory whose region the table gives to another server does
// not start: the log there is not this server's to serve.
func TestRestartRegionGivenAway(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startUnclosed(t, opts)
	id := s1.RegionID()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.PutRegion(ctxT(t), regiontable.Region{ID: id, Kind: regiontable.KindData, Host: "thief", Epoch: 10, Term: 100}); err != nil {
		t.Fatal(err)
	}
	opts.Registry, opts.Logger = nil, testLogger(t)
	s2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(ctxT(t)); !errors.Is(err, ErrRegionOwned) {
		t.Fatalf("Start = %v, want ErrRegionOwned", err)
	}
}

func TestDataDirLockedAndOwned(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startServer(t, opts)
	second := opts
	second.ServerID, second.Registry, second.Logger = "test-2", nil, testLogger(t)
	s2, err := New(second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(ctxT(t)); !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second server on a data directory in use: %v, want ErrDataDirLocked", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s3, err := New(second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.Start(ctxT(t)); !errors.Is(err, ErrDataDirOwned) {
		t.Fatalf("another server ID on the data directory: %v, want ErrDataDirOwned", err)
	}
	// The failed start closed the region cleanly: the owner restarts.
	opts.Registry, opts.Logger = nil, testLogger(t)
	s4 := startServer(t, opts)
	if s4.Epoch() != 2 {
		t.Fatalf("epoch %d", s4.Epoch())
	}
}

// A member key left by a crashed predecessor delays the start until its
// lease expires; a live one makes the start fail after RegisterWait.
func TestMemberAlreadyRegistered(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	reg, err := store.RegisterMember(ctxT(t), regiontable.Member{ID: "test-1", RPCAddr: "old:1"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		store.ExpireMember("test-1")
	}()
	opts := testOptions(t, store)
	s := startServer(t, opts)
	ms, _ := store.Members(ctxT(t))
	if len(ms) != 1 || ms[0].RPCAddr != s.Addr() {
		t.Fatalf("members %v", ms)
	}
	_ = reg
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RegisterMember(ctxT(t), regiontable.Member{ID: "test-1", RPCAddr: "live:1"}); err != nil {
		t.Fatal(err)
	}
	opts.Registry, opts.Logger, opts.RegisterWait = nil, testLogger(t), 300*time.Millisecond
	s2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(ctxT(t)); !errors.Is(err, regiontable.ErrMemberExists) {
		t.Fatalf("Start with a live member of our ID = %v", err)
	}
}

// A crashed predecessor's member entry (our ID, this host, the RPC address
// we now listen on) is removed at once instead of waited out: no live
// process on this host can hold the address we bound. An entry that never
// expires would otherwise fail the start after RegisterWait.
func TestCrashedPredecessorEvicted(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.Listen = testutil.FreeAddrs(t, 1)[0]
	opts.RegisterWait = time.Second
	old, err := store.RegisterMember(ctxT(t), regiontable.Member{ID: opts.ServerID, RPCAddr: opts.Listen, HostID: opts.HostID, Version: "old"})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, opts)
	select {
	case <-old.Done():
	default:
		t.Fatal("the predecessor's registration was not ended")
	}
	if ms, _ := store.Members(ctxT(t)); len(ms) != 1 || ms[0].Version == "old" || ms[0].RPCAddr != s.Addr() {
		t.Fatalf("members %+v", ms)
	}
}

// A lost lease is noticed and the member registers again.
func TestMembershipRecovers(t *testing.T) {
	s, store := newTestServer(t)
	store.ExpireMember("test-1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms, _ := store.Members(ctxT(t))
		if len(ms) == 1 && ms[0].RPCAddr == s.Addr() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("member not registered again: %v", ms)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Serve returns nil when its context ends, after a clean shutdown.
func TestServeUntilCancelled(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !s.running() {
		if time.Now().After(deadline) {
			t.Fatal("server did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(must(store.Members(ctxT(t)))) != 1 {
		t.Fatal("a running server is not a member")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, walDir)); err != nil {
		t.Fatalf("no log after Serve: %v", err)
	}
	if err := s.Start(ctxT(t)); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start after Close = %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A data directory deleted and made again (same path) finds the region
// file of its earlier incarnation in the shared tmpfs: it is removed, not
// a reason to fail.
func TestStaleRegionFileOfDeletedDataDir(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	shm := t.TempDir()
	name := (&dataDir{dir: opts.DataDir}).regionFileName(1)
	if err := os.WriteFile(filepath.Join(shm, name), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(opts.DataDir, name), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.ShmDir = shm
	s := startServer(t, opts)
	if s.RegionID() != 1 {
		t.Fatalf("region %d", s.RegionID())
	}
	if _, err := os.Stat(filepath.Join(shm, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale file in the tmpfs: %v", err)
	}
	put(t, dial(t, s), "k", "v")
}

// A region file some process holds is not removed.
func TestRegionFileInUseIsKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if removed, err := removeStaleRegionFile(dir, "r"); removed || !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("removeStaleRegionFile of a held file = %v, %v", removed, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if removed, err := removeStaleRegionFile(dir, "absent"); removed || err != nil {
		t.Fatalf("absent file: %v, %v", removed, err)
	}
}

// A Serve whose context ends while it starts (a long log replay) stops
// and returns nil: the shutdown was asked for.
func TestServeCancelledWhileStarting(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	starting := make(chan struct{})
	opts.TestingKnobs.BeforeGroups = func() { close(starting); time.Sleep(200 * time.Millisecond) }
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	<-starting
	if len(must(store.Members(ctxT(t)))) != 1 {
		t.Fatal("a starting server is not a member")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if ms := must(store.Members(ctxT(t))); len(ms) != 0 {
		t.Fatalf("members after Serve returned: %v", ms)
	}
}

// running reports whether Start has returned successfully.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.state == stateRunning
}

// Servers that start together race to format the root meganode; the
// winner publishes its region only once it serves. A server that finds
// the root in a region the table does not have yet waits for it, instead
// of formatting a second root beside it (two top-level meganodes, each
// covering every key, split the tree).
func TestRootInUnpublishedRegionIsWaitedFor(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	ctx := ctxT(t)
	other := blink.MakePtr(77, 0x1000)
	if _, err := store.SetRoot(ctx, 0, other); err != nil {
		t.Fatal(err)
	}
	started := make(chan *Server, 1)
	go func() { started <- startServer(t, testOptions(t, store)) }()
	select {
	case s := <-started:
		t.Fatalf("the server started (root %v) while the root's region was not in the table", blink.Ptr(s.root.Load()))
	case <-time.After(time.Second):
	}
	// The other server publishes its region: this one takes its root.
	if err := store.PutRegion(ctx, regiontable.Region{ID: 77, Kind: regiontable.KindData, Size: 1 << 20, Host: "other", Epoch: 1, Term: 1}); err != nil {
		t.Fatal(err)
	}
	s := <-started
	if got := blink.Ptr(s.root.Load()); got != other {
		t.Fatalf("the server's root is %v, want the other server's %v", got, other)
	}
	if got, err := store.Root(ctx); err != nil || got != other {
		t.Fatalf("the table's root is %v (%v), want %v", got, err, other)
	}
}

// newPristineReplica makes a replica of s for an unused region ID with an
// empty region file of s's layout and no raft group, as openFollower
// makes one before its group starts; the test's cleanup removes it.
func newPristineReplica(t *testing.T, s *Server) *replica {
	t.Helper()
	rep := newReplica(s)
	if err := rep.openMachine(s.reps.own.regionID + 1000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rep.sm.Close() })
	return rep
}

// A snapshot whose head and image disagree on the log index (the head
// says one index, the region in the image recorded another) is refused
// as corrupt, and the replica keeps its region.
func TestRestoreRefusesAnImageAtAnotherIndex(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	s := startServer(t, testOptions(t, store))
	rep := s.reps.own
	put(t, dial(t, s), "a", "1")
	state, img := snapshotOf(t, rep)
	st, err := rsm.ReadState(bytes.NewReader(state))
	if err != nil {
		t.Fatal(err)
	}
	// The head's applied index (at offset 16 of its encoding), one on.
	state = bytes.Clone(state)
	binary.LittleEndian.PutUint64(state[16:], st.Applied+1)

	before := rep.sm.Region()
	inRegion := rep.sm.Region().Applied()
	err = rep.sm.Restore(io.MultiReader(bytes.NewReader(state), bytes.NewReader(img)))
	if inRegion < st.Applied || st.Applied == 0 {
		t.Fatalf("the region's applied index %d, the snapshot's %d", inRegion, st.Applied)
	}
	if !errors.Is(err, meganode.ErrCorruption) {
		t.Fatalf("an image at index %d restored as %d: %v", st.Applied, st.Applied+1, err)
	}
	if rep.sm.Region() != before {
		t.Fatal("the replica's region changed on a refused restore")
	}
	if v, ok := get(t, dial(t, s), "a"); !ok || v != "1" {
		t.Fatalf("a = %q, %v after a refused restore", v, ok)
	}
}
