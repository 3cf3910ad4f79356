package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/testutil"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// startReplicated starts n servers over one memory table, each keeping
// replicas servers in its region's group, and waits until every group has
// them all as voters and the table lists them.
func startReplicated(t *testing.T, n, replicas int, edit func(i int, o *Options)) ([]*Server, *regiontable.Memory) {
	t.Helper()
	srvs, store := startCluster(t, n, func(i int, o *Options) {
		o.Replicas = replicas
		o.RaftHeartbeatTimeout = 300 * time.Millisecond
		// Below the ephemeral range: the tests restart servers on it.
		o.RaftListen = testutil.FreeAddrs(t, 1)[0]
		if edit != nil {
			edit(i, o)
		}
	})
	for _, s := range srvs {
		waitVoters(t, s, replicas)
	}
	return srvs, store
}

// waitVoters waits until s's region's group has want voters and the region
// table lists want replicas.
func waitVoters(t *testing.T, s *Server, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var voters []string
		if f := s.reps.own.raft.GetConfiguration(); f.Error() == nil {
			for _, srv := range f.Configuration().Servers {
				if srv.Suffrage == raft.Voter {
					voters = append(voters, string(srv.ID))
				}
			}
		}
		e := s.table.Load().regions[s.reps.own.regionID]
		if len(voters) == want && len(e.Replicas) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: voters %v, table replicas %v; want %d", s.opts.ServerID, voters, e.Replicas, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicasOf returns every replica of region id across srvs: the host's
// first, then the followers.
func replicasOf(srvs []*Server, id uint32) []*replica {
	var out []*replica
	for _, s := range srvs {
		if s.reps.own.regionID == id {
			out = append([]*replica{s.reps.own}, out...)
		} else if rep := s.reps.follower(id); rep != nil {
			out = append(out, rep)
		}
	}
	return out
}

// waitConverged waits until every replica of every region has applied its
// leader's last log index, the same on two looks 100 ms apart (nothing is
// being written), and returns the replicas by region.
func waitConverged(t *testing.T, srvs []*Server) map[uint32][]*replica {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last map[uint32]uint64
	for {
		now := make(map[uint32]uint64)
		same := true
		var state []string
		for _, s := range srvs {
			reps := replicasOf(srvs, s.reps.own.regionID)
			want := s.reps.own.raft.LastIndex()
			for _, rep := range reps {
				if rep.raft.AppliedIndex() != want {
					same = false
				}
				state = append(state, fmt.Sprintf("region %d on %s: applied %d of %d (%v)", s.reps.own.regionID, rep.srv.opts.ServerID, rep.raft.AppliedIndex(), want, rep.raft.State()))
			}
			now[s.reps.own.regionID] = want
		}
		if same && last != nil && fmt.Sprint(last) == fmt.Sprint(now) {
			break
		}
		last = now
		if time.Now().After(deadline) {
			t.Fatalf("replicas never converged: %v", state)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := make(map[uint32][]*replica)
	for _, s := range srvs {
		out[s.reps.own.regionID] = replicasOf(srvs, s.reps.own.regionID)
	}
	return out
}

// checkIdenticalReplicas waits until srvs' replicas converged and reports
// every follower whose region differs from its leader's, byte for byte.
func checkIdenticalReplicas(t *testing.T, srvs []*Server) {
	t.Helper()
	for id, reps := range waitConverged(t, srvs) {
		want := imageHash(reps[0])
		for _, rep := range reps[1:] {
			if got := imageHash(rep); got != want {
				t.Errorf("region %d: replica on %s differs from its leader's at index %d", id, rep.srv.opts.ServerID, rep.sm.Applied())
			}
		}
	}
}

// imageHash is the SHA-256 of a replica's whole region.
func imageHash(rep *replica) [32]byte {
	var sum [32]byte
	rep.sm.Exclusive(func(r *meganode.Region, _ uint64) { sum = sha256.Sum256(r.Bytes()) })
	return sum
}

// docs/design.md §9: every region is a raft group whose replicas apply the same
// records in the same order. With three servers each keeping three
// replicas, and enough writes to split meganodes locally and onto other
// servers, every follower's region is byte for byte its leader's at the
// same applied index.
func TestFollowersByteIdentical(t *testing.T) {
	srvs, store := startReplicated(t, 3, 3, nil)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 2500)
	for _, s := range srvs {
		waitSplitsIdle(t, s)
	}
	splits := 0
	for _, s := range srvs {
		splits += max(0, int(metricValue(gather(t, s), "cell_server_meganode_splits_total", map[string]string{"result": "done"})))
	}
	if splits < 2 {
		t.Fatalf("%d splits: the test needs some", splits)
	}
	for id, reps := range waitConverged(t, srvs) {
		if len(reps) != 3 {
			t.Fatalf("region %d has %d replicas", id, len(reps))
		}
		want := imageHash(reps[0])
		for _, rep := range reps[1:] {
			if got := imageHash(rep); got != want {
				t.Errorf("region %d: a follower's image differs from its leader's at index %d", id, rep.sm.Applied())
			}
		}
	}
	slices.Sort(keys)
	mustReadAll(t, "replicated", map[string]*client.Client{"server": c}, keys)
}

// A follower that was down while its region's leader went on catches up
// when it returns: from the log when the leader still has the entries it
// missed, from a snapshot (raft's InstallSnapshot, restored by
// fsm.Restore) when the leader truncated them. Either way it ends
// byte-identical. Every meganode stays on the first server (local
// splits), so all writes go to its region while the third server is down.
func TestFollowerCatchesUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threshold uint64
		trailing  uint64
	}{
		{"log", 1 << 20, 1 << 20},
		{"snapshot", 64, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
				o.SplitPlacement = PlaceLocal
				o.SnapshotThreshold = tc.threshold
				o.TrailingLogs = tc.trailing
				o.SnapshotInterval = 100 * time.Millisecond
			})
			c := newClient(t, store, "server")
			put := func(from, to int) []string { return putRange(t, c, from, to) }
			keys := put(0, 200)
			// Stop the third server; it restarts on the same raft
			// address (the group's configuration names it).
			victim := srvs[2]
			opts := victim.opts
			opts.RaftListen = victim.mux.Addr().String()
			opts.Registry = nil
			if err := victim.Close(); err != nil {
				t.Fatal(err)
			}
			behind := srvs[0].reps.own.raft.LastIndex()
			keys = append(keys, put(200, 1500)...)
			if tc.name == "snapshot" {
				// The leader's log no longer holds what the follower
				// misses: only a snapshot can bring it back.
				waitFor(t, func() bool {
					first, err := srvs[0].wal.Log(srvs[0].reps.own.regionID).FirstIndex()
					return err == nil && first > behind+1
				}, "the leader to truncate its log past the stopped follower")
			}
			srvs[2] = restartServer(t, opts)
			waitVoters(t, srvs[2], 3)
			checkIdenticalReplicas(t, srvs)
			slices.Sort(keys)
			mustReadAll(t, tc.name, map[string]*client.Client{"server": c}, keys)
		})
	}
}

// docs/design.md §9: when a region's host is down, a server holding a replica of
// it is elected, takes the region over and serves it: every acknowledged
// write is readable, new writes succeed, and the old host, restarted,
// holds a replica of its region without serving it.
func TestFailover(t *testing.T) {
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
		o.SplitPlacement = PlaceLocal // every meganode in the first server's region
	})
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	put := func(from, to int) []string { return putRange(t, c, from, to) }
	keys := put(0, 800)
	host := srvs[0]
	id := host.reps.own.regionID
	before, _ := store.Region(ctx, id)
	opts := host.opts
	opts.RaftListen = host.mux.Addr().String()
	opts.Registry = nil
	if err := host.Close(); err != nil {
		t.Fatal(err)
	}
	// The writes go on: the region is taken over.
	keys = append(keys, put(800, 1200)...)
	after, err := store.Region(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Host == host.opts.ServerID || after.Epoch <= before.Epoch || after.Term <= before.Term {
		t.Fatalf("region %d after its host stopped: %+v (before %+v)", id, after, before)
	}
	var newHost *Server
	for _, s := range srvs[1:] {
		if s.opts.ServerID == after.Host {
			newHost = s
		}
	}
	if newHost == nil || newHost.reps.servedReplica(id) == nil {
		t.Fatalf("region %d's new host %s does not serve it", id, after.Host)
	}
	if got := metricValue(gather(t, newHost), "cell_server_region_takeovers_total", nil); got != 1 {
		t.Errorf("%s took over %v regions, want 1", newHost.opts.ServerID, got)
	}
	slices.Sort(keys)
	mustReadAll(t, "after the failover", map[string]*client.Client{"server": c, "client": newClient(t, store, "client")}, keys)

	// The old host returns: it follows its region, serves nothing, and
	// every replica ends identical.
	srvs[0] = restartServer(t, opts)
	if srvs[0].reps.servedReplica(id) != nil {
		t.Fatalf("the old host serves region %d again", id)
	}
	keys = append(keys, put(1200, 1400)...)
	checkIdenticalReplicas(t, srvs)
	for _, s := range srvs {
		if err := s.Check(); err != nil {
			t.Errorf("%s: %v", s.opts.ServerID, err)
		}
	}
	slices.Sort(keys)
	mustReadAll(t, "after the old host returned", map[string]*client.Client{"server": c}, keys)
}

// OpReplicaHash, cellctl check's comparison of replicas: the replicas of
// a region at rest hash the same at the same applied index, and a replica
// whose region differs by one byte hashes differently.
func TestReplicaHash(t *testing.T) {
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) { o.SplitPlacement = PlaceLocal })
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	for i := range 300 {
		if err := c.Put(ctx, []byte(fmt.Sprintf("k%04d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	reps := waitConverged(t, srvs)[srvs[0].reps.own.regionID]
	hashes := func() []wire.ReplicaHashReply {
		var out []wire.ReplicaHashReply
		for _, s := range srvs {
			var rep wire.ReplicaHashReply
			if _, err := call(t, dial(t, s), wire.OpReplicaHash, &wire.ReplicaHashRequest{Region: srvs[0].reps.own.regionID}, &rep); err != nil {
				t.Fatalf("%s: %v", s.opts.ServerID, err)
			}
			out = append(out, rep)
		}
		return out
	}
	hs := hashes()
	for i, h := range hs[1:] {
		if h.Applied != hs[0].Applied || h.Hash != hs[0].Hash || h.Pages == 0 {
			t.Fatalf("replica %d: applied %d, %d pages, hash %x; replica 0: applied %d, %d pages, hash %x", i+1, h.Applied, h.Pages, h.Hash, hs[0].Applied, hs[0].Pages, hs[0].Hash)
		}
	}
	// Flip a byte of the root meganode's header on a follower.
	var f *replica
	for _, rep := range reps {
		if rep.srv.reps.servedReplica(rep.regionID) == nil {
			f = rep
		}
	}
	off := blink.Ptr(f.srv.root.Load()).Offset() + 64
	flip := func(r *meganode.Region, _ uint64) { r.Bytes()[off] ^= 0xff }
	f.sm.Exclusive(flip)
	changed := 0
	for _, h := range hashes() {
		if h.Hash != hs[0].Hash {
			changed++
		}
	}
	if changed != 1 {
		t.Fatalf("%d replicas hash differently after one follower's byte changed, want 1", changed)
	}
	var rep wire.ReplicaHashReply
	if _, err := call(t, dial(t, srvs[0]), wire.OpReplicaHash, &wire.ReplicaHashRequest{Region: 999}, &rep); !errors.Is(err, wire.ErrUnknownRegion) {
		t.Fatalf("hash of a region held nowhere: %v, want UnknownRegion", err)
	}
	f.sm.Exclusive(flip) // the cleanup checks the tree
}

// restartServer starts a server again on the fixed raft address it had
// (its groups' configurations name it). Another test process may be
// probing that port for a moment (testutil.FreeAddrs binds candidate
// ports to see whether they are free): a bind that finds it in use is
// tried again for up to 5 s, and then the test fails.
func restartServer(t *testing.T, opts Options) *Server {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = s.Start(ctx)
		cancel()
		if err == nil {
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return s
		}
		if !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			t.Fatalf("Start: %v", err)
		}
		t.Logf("restart: %v; trying again", err)
		opts.Registry = nil
		time.Sleep(100 * time.Millisecond)
	}
}

// putRange puts keys number from to to-1 (scattered: "key" and i*7919
// mod 100003), each with "v" and the key as its value, and returns them.
func putRange(t *testing.T, c *client.Client, from, to int) []string {
	t.Helper()
	var keys []string
	for i := from; i < to; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		// A put whose outcome is unknown (its leader lost the
		// leadership while committing: elections happen on a loaded
		// machine) is put again: the same value, so either outcome
		// leaves the key as wanted.
		for {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			err := c.Put(ctx, []byte(k), []byte("v"+k))
			expired := ctx.Err() != nil
			cancel()
			if err == nil {
				break
			}
			if !errors.Is(err, client.ErrOutcomeUnknown) || expired {
				t.Fatalf("put %q: %v", k, err)
			}
			t.Logf("put %q: %v; putting it again", k, err)
		}
		keys = append(keys, k)
	}
	return keys
}

// A server that restarts on another raft address (a container given a new
// IP, a port chosen anew) is still a member of its groups: its member
// entry, written before its groups start, names the new address, and the
// others' transports look members up there (memberRaftAddrs) rather than
// at the address the groups' configurations still hold. With the moved
// server one of only two live voters, nothing commits unless the leader
// reaches it at its new address; with the leader then gone too, the two
// left elect one of themselves across it.
func TestRestartOnNewRaftAddress(t *testing.T) {
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
		o.SplitPlacement = PlaceLocal // every meganode in the first server's region
	})
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	put := func(from, to int) []string { return putRange(t, c, from, to) }
	keys := put(0, 300)
	id := srvs[0].reps.own.regionID

	moved := srvs[2]
	old := moved.mux.Addr().String()
	opts := moved.opts
	opts.RaftListen = testutil.FreeAddrs(t, 1)[0]
	opts.Registry = nil
	if err := moved.Close(); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, put(300, 500)...)
	srvs[2] = restartServer(t, opts)
	if got := srvs[2].mux.Addr().String(); got == old {
		t.Fatalf("restarted on its old raft address %s", old)
	}
	m, err := store.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mem := range m {
		if mem.ID == srvs[2].opts.ServerID && mem.RaftAddr != opts.RaftListen {
			t.Fatalf("member %s lists raft address %s, want %s", mem.ID, mem.RaftAddr, opts.RaftListen)
		}
	}

	// The other follower stops: every commit now needs the moved server.
	second := srvs[1]
	secondOpts := restartOptions(second)
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, put(500, 800)...)
	srvs[1] = restartServer(t, secondOpts)
	checkIdenticalReplicas(t, srvs)

	// The leader stops: the two left hold an election, one of them
	// reached at its new address, and take the region over.
	hostOpts := restartOptions(srvs[0])
	if err := srvs[0].Close(); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, put(800, 1000)...)
	after, err := store.Region(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Host == hostOpts.ServerID {
		t.Fatalf("region %d still hosted by its stopped leader: %+v", id, after)
	}
	srvs[0] = restartServer(t, hostOpts)
	slices.Sort(keys)
	mustReadAll(t, "after the restart on a new address", map[string]*client.Client{"server": c, "client": newClient(t, store, "client")}, keys)
	for _, s := range srvs {
		if err := s.Check(); err != nil {
			t.Errorf("%s: %v", s.opts.ServerID, err)
		}
	}
}
