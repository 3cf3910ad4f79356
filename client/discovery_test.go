package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
)

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDiscoveryFollowsTable: a client that found the servers in the region
// table follows it: a server that joins is used without a refresh
// interval passing (the table's watch), and one that leaves is dropped.
func TestDiscoveryFollowsTable(t *testing.T) {
	rc := startReal(t, 1, nil)
	cfg := realConfig(t, rc)
	cfg.RefreshInterval = -1 // only the watch may notice
	c := mustClient(t, cfg)
	if n := len(c.topo.Load().servers); n != 1 {
		t.Fatalf("%d servers, want 1", n)
	}
	s2 := rc.add(t)
	waitFor(t, 10*time.Second, "the second server to be found", func() bool { return len(c.topo.Load().servers) == 2 })
	t2 := c.topo.Load()
	if r := t2.regions[s2.RegionID()]; r == nil || r.reader == nil || r.rk.Provider != ProviderSHM {
		t.Fatalf("second server's region %d: %+v, want shm access (same host)", s2.RegionID(), r)
	}
	mustPut(t, c, 20)
	getAll(t, c, 20)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the second server to be dropped", func() bool { return len(c.topo.Load().servers) == 1 })
	getAll(t, c, 20)
}

// TestEtcdEndpoints: a real server publishing in an embedded etcd and a
// client given only the etcd endpoints find each other; the client reads
// over shared memory with the key it found in the table.
func TestEtcdEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	e := startEtcd(t)
	store, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{Prefix: "/celltest", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	startRealWith(t, &realCluster{}, store)
	cfg := testConfig(t, &testCluster{})
	cfg.Servers = nil
	cfg.Endpoints, cfg.EtcdPrefix, cfg.HostID = e.Endpoints(), "/celltest", testHost
	cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.ClientOnly}, ProviderAuto
	c := mustClient(t, cfg)
	ctx := testCtx(t, 10*time.Second)
	if err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, []byte("k")); err != nil || !bytes.Equal(v, []byte("v")) {
		t.Fatalf("Get = %q, %v", v, err)
	}
	for _, r := range c.topo.Load().regions {
		if r.rk == nil || r.rk.Provider != ProviderSHM {
			t.Errorf("region %d read with %v, want shm (auto, same host)", r.id, r.rk)
		}
	}
	if st := c.Stats(); st.ClientHops == 0 || st.ServerHops != 0 {
		t.Errorf("hops s=%d c=%d, want client-side only", st.ServerHops, st.ClientHops)
	}
}

// startEtcd starts an embedded etcd on free loopback ports, stopped at
// cleanup.
func startEtcd(t *testing.T) *embedded.Etcd {
	t.Helper()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	var lastErr error
	for range 3 { // a port may be taken between free and etcd's listen
		e, err := embedded.Start(embedded.Options{Dir: t.TempDir(), ClientAddr: free(), PeerAddr: free(), Logger: testLogger(t)})
		if err == nil {
			t.Cleanup(func() { _ = e.Close() })
			return e
		}
		lastErr = err
	}
	t.Fatalf("start embedded etcd: %v", lastErr)
	return nil
}

// The servers' marks (draining; the coordinator's count of a missing
// server, rewritten every few seconds while it is missing) do not change
// where regions are: the watch does not make every client refresh for
// them. A member's arrival does.
func TestDiscoveryIgnoresServerMarks(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	d := &tableDiscovery{store: store, retry: time.Second, timeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.watch(ctx, func() { changes.Add(1) })
	}()
	// Members until the watch reports one: the watch is then past its
	// Load, so what follows comes as events.
	for i := 0; changes.Load() == 0; i++ {
		reg, err := store.RegisterMember(ctx, regiontable.Member{ID: fmt.Sprintf("early-%d", i), RPCAddr: "127.0.0.1:2"})
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close(ctx)
		time.Sleep(10 * time.Millisecond)
	}
	before := changes.Load()
	for i := range 3 {
		if _, err := store.MarkMissing(ctx, "gone", time.Duration(i)*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetDraining(ctx, "s1", true); err != nil {
		t.Fatal(err)
	}
	reg, err := store.RegisterMember(ctx, regiontable.Member{ID: "s2", RPCAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctx)
	waitFor(t, 10*time.Second, "the member's arrival", func() bool { return changes.Load() > before })
	time.Sleep(50 * time.Millisecond)
	if n := changes.Load() - before; n != 1 {
		t.Fatalf("%d changes reported for four marks and a member, want 1 (the member)", n)
	}
	cancel()
	<-done
}
