package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/raftmux"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/wire"
)

// DESIGN §9: "Only a region's leader serves it, RPC and one-sided, and
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
				o.TestingKnobs.NoTakeover = true
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
			e, err := store.Region(ctx, host.regionID)
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
			time.Sleep(host.leaseDuration() + 300*time.Millisecond)
			if got := host.servedReplica(host.regionID); got == nil {
				t.Fatal("the isolated host stopped serving through the table; the test needs it to find out alone")
			}
			for name, probe := range probes {
				err := probe()
				switch {
				case !ignore && err == nil:
					t.Errorf("%s: the isolated host answered %v after its lease", name, host.leaseDuration())
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
