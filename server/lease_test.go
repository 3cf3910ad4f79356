package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/raftmux"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/wire"
)

// docs/design.md §9: "Only a region's leader serves it, RPC and one-sided, and
// only while it holds a read lease ... One-sided reads are fenced ... a
// paused (SIGSTOP) or deposed leader's memory is never trusted." The host
// of a region is cut off from its group's majority (its raft traffic
// dropped) while its table entry still names it (no other server takes
// the region over, so the host learns nothing from the table): within
// its lease it stops answering, over RPC, the tcp responder and shared
// memory, with no help from anyone. The same run with the lease ignored
// (TestingKnobs.IgnoreLease) answers all three, which is what a stale
// read needs: the check can fail.
func TestIsolatedHostStopsServing(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignore_lease=%v", ignore), func(t *testing.T) {
			net := raftmux.NewFaultNet(1)
			srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
				o.SplitPlacement = PlaceLocal
				o.TestingKnobs.RaftFaults = net
				o.TestingKnobs.RefuseTakeover = func(uint32) bool { return true }
				o.TestingKnobs.IgnoreLease = ignore && i == 0
			})
			c := newClient(t, store, "server")
			ctx := ctxT(t)
			for i := range 50 {
				if err := c.Put(ctx, []byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			host := srvs[0]
			e, err := store.Region(ctx, host.reps.own.regionID)
			if err != nil {
				t.Fatal(err)
			}
			tcpKey, shmKey := remoteKey(t, e.ReadKey, "tcp"), remoteKey(t, e.ReadKey, "shm")
			probes := leaseProbes(t, host, tcpKey, shmKey)
			for name, probe := range probes {
				if err := probe(); err != nil {
					t.Fatalf("%s before the partition: %v", name, err)
				}
			}
			net.Isolate(host.mux.Addr().String())
			time.Sleep(host.hosting.leaseDuration() + 300*time.Millisecond)
			if got := host.reps.servedReplica(host.reps.own.regionID); got == nil {
				t.Fatal("the isolated host stopped serving through the table; the test needs it to find out alone")
			}
			for name, probe := range probes {
				err := probe()
				switch {
				case !ignore && err == nil:
					t.Errorf("%s: the isolated host answered %v after its lease", name, host.hosting.leaseDuration())
				case ignore && err != nil:
					t.Errorf("%s without leases: %v; the check could not catch a stale host", name, err)
				}
			}
			if !ignore {
				if n := metricValue(gather(t, host), "cell_server_lease_lapses_total", nil); n < 1 {
					t.Errorf("%v lease lapses counted", n)
				}
			}
			net.Heal()
		})
	}
}

// remoteKey decodes the provider's remote key of a region entry.
func remoteKey(t *testing.T, keys []json.RawMessage, provider string) rdma.RemoteKey {
	t.Helper()
	for _, raw := range keys {
		var rk rdma.RemoteKey
		if err := json.Unmarshal(raw, &rk); err != nil {
			t.Fatal(err)
		}
		if rk.Provider == provider {
			return rk
		}
	}
	t.Fatalf("no %s key among %s", provider, keys)
	return rdma.RemoteKey{}
}

// leaseProbes are the three ways to read the host's region: a Get over
// RPC and one-sided reads of its first page over tcp and shared memory.
// Each returns nil when the host answered.
func leaseProbes(t *testing.T, host *Server, tcpKey, shmKey rdma.RemoteKey) map[string]func() error {
	conn := dial(t, host)
	tcp, err := rdma.NewTCPClient(rdma.TCPClientOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tcp.Close() })
	shm, err := rdma.NewSHMClient(rdma.SHMClientOptions{Host: host.opts.HostID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shm.Close() })
	oneSided := func(cl rdma.Client, rk rdma.RemoteKey) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return cl.Read(ctx, &rk, 0, atomicmem.Alloc(4096))
		}
	}
	return map[string]func() error{
		"rpc get": func() error {
			var rep wire.GetReply
			_, err := call(t, conn, wire.OpGet, &wire.GetRequest{Key: []byte("k001")}, &rep)
			if err != nil && !errors.Is(err, wire.ErrUnavailable) {
				t.Errorf("rpc get: %v, want Unavailable or a value", err)
			}
			return err
		},
		"tcp read": oneSided(tcp, tcpKey),
		"shm read": oneSided(shm, shmKey),
	}
}

// docs/design.md §9: "A follower with a divergent uncommitted tail that receives a
// snapshot must converge (hashicorp/raft #697): test it." The host of a
// region is cut off while it is being written: the writes it appended in
// its last moments as leader never commit. The others elect a leader,
// which takes the region over, commits other writes and truncates its log
// behind a snapshot. When the partition heals, the old host's replica,
// holding entries nobody else has, is sent the snapshot: it converges,
// byte-identical, and only acknowledged writes are found.
func TestDivergentTailConverges(t *testing.T) {
	net := raftmux.NewFaultNet(2)
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
		o.SplitPlacement = PlaceLocal
		o.TestingKnobs.RaftFaults = net
		o.SnapshotThreshold = 64
		o.TrailingLogs = 8
		o.SnapshotInterval = 100 * time.Millisecond
	})
	host := srvs[0]
	id := host.reps.own.regionID
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	acked := map[string]string{}
	var mu sync.Mutex
	// Writers hammer the host until the partition; their writes in flight
	// then are the divergent tail.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("w%d-%03d", w, i%200), fmt.Sprintf("a%d", i)
				wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				err := c.Put(wctx, []byte(k), []byte(v))
				cancel()
				if err == nil {
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	net.Isolate(host.mux.Addr().String())
	// A burst while the host still believes it leads: appended to its
	// log only. None of these is acknowledged.
	for i := range 32 {
		go func() {
			bctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = c.Put(bctx, []byte(fmt.Sprintf("burst-%02d", i)), []byte("b"))
		}()
	}
	time.Sleep(200 * time.Millisecond)
	tail, commit := host.reps.own.raft.LastIndex(), host.reps.own.raft.CommitIndex()
	if tail <= commit {
		t.Fatalf("the isolated host has no uncommitted tail (last %d, commit %d)", tail, commit)
	}
	// The region moves; the writers go on against the new host.
	waitFor(t, func() bool {
		e, err := store.Region(ctx, id)
		return err == nil && e.Host != host.opts.ServerID
	}, "a takeover")
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	var leader *replica
	for _, s := range srvs[1:] {
		if rep := s.reps.servedReplica(id); rep != nil {
			leader = rep
		}
	}
	if leader == nil {
		t.Fatal("no server serves the region after the takeover")
	}
	waitFor(t, func() bool {
		first, err := leader.srv.wal.Log(id).FirstIndex()
		return err == nil && first > tail+1
	}, "the new leader to truncate its log past the old host's tail")
	t.Logf("old host's log: committed to %d, uncommitted tail to %d; the new leader's log starts at %d",
		commit, tail, func() uint64 { f, _ := leader.srv.wal.Log(id).FirstIndex(); return f }())
	net.Heal()
	for rid, reps := range waitConverged(t, srvs) {
		want := imageHash(reps[0])
		for _, rep := range reps[1:] {
			if got := imageHash(rep); got != want {
				t.Errorf("region %d: the replica on %s differs from %s's at index %d", rid, rep.srv.opts.ServerID, reps[0].srv.opts.ServerID, rep.sm.Applied())
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// A key holds its acknowledged value or a later put's (each writer's
	// values grow): an older value, or none, is a lost write.
	seq := func(v string) int {
		n, err := strconv.Atoi(strings.TrimPrefix(v, "a"))
		if err != nil {
			return -1
		}
		return n
	}
	for k, v := range acked {
		got, err := c.Get(ctx, []byte(k))
		if err != nil || seq(string(got)) < seq(v) {
			t.Errorf("%s = %q, %v; acknowledged %q", k, got, err, v)
		}
	}
	t.Logf("%d keys with an acknowledged write checked", len(acked))
}
