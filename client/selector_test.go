package client

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
	cellserver "github.com/cellstore/cell/server"
	"github.com/cellstore/cell/wire"
)

// TestAdaptiveShiftsClientSide: when the server's CPU is slow (each
// search waits in a worker), the adaptive selector's l_s grows past m
// one-sided reads and it sends searches client-side (paper §2.5: "clients
// should switch to using RDMA searches when servers become overloaded").
// Server-side latency is measured per hop, one-sided latency per read,
// m from the meganodes' heights.
func TestAdaptiveShiftsClientSide(t *testing.T) {
	var slow atomic.Bool
	rc := startReal(t, 1, func(o *cellserver.Options) {
		o.TestingKnobs.BeforeHandle = func(op wire.Op) {
			if slow.Load() && op == wire.OpSearch {
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
	cfg := realConfig(t, rc)
	cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.Adaptive}, ProviderSHM
	c := mustClient(t, cfg)
	mustPut(t, c, 100)
	slow.Store(true)
	getAll(t, c, 100)
	before := c.Stats()
	getAll(t, c, 100)
	after := c.Stats()
	srv, cli := after.ServerHops-before.ServerHops, after.ClientHops-before.ClientHops
	if cli < 90 {
		t.Errorf("slow server: %d client-side, %d server-side hops; want mostly client-side", cli, srv)
	}
	snap := after.Selector.Servers[0]
	if snap.LS.Mean < time.Millisecond || snap.LR.Samples == 0 {
		t.Errorf("estimates: l_s %v, l_r %v over %d samples", snap.LS.Mean, snap.LR.Mean, snap.LR.Samples)
	}
	t.Logf("slow server: %d client, %d server hops; l_s=%v l_r=%v rtt=%v m=%.1f",
		cli, srv, snap.LS.Mean, snap.LR.Mean, snap.RTT, after.Selector.M)
}

// TestManyOpsFewConnections: many concurrent operations share
// ConnsPerServer pipelined connections.
func TestManyOpsFewConnections(t *testing.T) {
	rc := startReal(t, 1, nil)
	cfg := realConfig(t, rc)
	cfg.Mode, cfg.ConnsPerServer = locality.Mode{Kind: locality.ServerOnly}, 2
	c := mustClient(t, cfg)
	mustPut(t, c, 100)
	accepted := counterSum(t, rc.regs[0], "cell_server_connections_accepted_total")
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			ctx := testCtx(t, 20*time.Second)
			for i := range 100 {
				if _, err := c.Get(ctx, key((g+i)%100)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := counterSum(t, rc.regs[0], "cell_server_connections_accepted_total"); n > 2 || n != accepted {
		t.Errorf("%v connections accepted (%v before the load), want at most ConnsPerServer = 2", n, accepted)
	}
}

// TestEveryReadFedToSelector: each one-sided read of a client-side search
// is one l_r sample (a hop hands its reads over at its end) and one read
// in the counters, for gets and Contains, found or not. The reads are
// counted independently by the read hooks.
func TestEveryReadFedToSelector(t *testing.T) {
	rc := startReal(t, 1, nil)
	cfg := realConfig(t, rc)
	cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.ClientOnly}, ProviderSHM
	var hooked atomic.Uint64
	cfg.TestingKnobs.AfterNodeRead = func(uint64, []byte) { hooked.Add(1) }
	cfg.TestingKnobs.AfterExtentRead = func(uint64, []byte) { hooked.Add(1) }
	c := mustClient(t, cfg)
	mustPut(t, c, 200)
	getAll(t, c, 200)
	ctx := testCtx(t, 10*time.Second)
	for i := range 50 {
		if ok, err := c.Contains(ctx, key(i*7)); err != nil || ok != (i*7 < 200) {
			t.Fatalf("Contains %s = %v, %v", key(i*7), ok, err)
		}
	}
	st := c.Stats()
	if len(st.Selector.Servers) != 1 {
		t.Fatalf("selector knows %d servers, want 1", len(st.Selector.Servers))
	}
	lr := st.Selector.Servers[0].LR
	if n := hooked.Load(); n == 0 || st.Reads != n || lr.Observed != n || st.ClientHops == 0 {
		t.Errorf("%d one-sided reads in %d client-side hops; counted %d, %d l_r samples offered; want one each per read", n, st.ClientHops, st.Reads, lr.Observed)
	}
}
