//go:build libfabric && cgo

package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
)

// With the libfabric tag, cellserver and cellctl are built with cgo and
// the fabric provider.
func init() { binTags, binCgo = "libfabric", "CGO_ENABLED=1" }

// TestFabricCluster: one-sided reads over libfabric end to end. Three
// cellservers with --provider fabric, each region replicated three ways;
// a client with Provider fabric searching client-side only gets and
// ranges over every key, through each server's fabric endpoint
// (published with its member entry, the keys with the regions' entries).
// The host of the root's region is paused (SIGSTOP): a read of its region
// with the key it published is not trusted once another replica took the
// region over; then it is killed (SIGKILL): gets and ranges go on
// client-side against the new host, and read what was written since.
// Over tcp;ofi_rxm (loopback) and shm.
func TestFabricCluster(t *testing.T) {
	for _, prov := range []string{"tcp", "shm"} {
		t.Run(prov, func(t *testing.T) { testFabricCluster(t, prov) })
	}
}

func testFabricCluster(t *testing.T, prov string) {
	// The killed server leaves its libfabric shm file: removed last, once
	// every server has stopped.
	t.Cleanup(func() {
		if _, err := rdma.RemoveStaleFabricSHM(""); err != nil {
			t.Error(err)
		}
	})
	node := ""
	if prov == "tcp" {
		node = "127.0.0.1"
	}
	cl := startCluster(t, 3, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "256KiB",
		flags: []string{"--replicas", "3", "--raft-heartbeat-timeout", "300ms", "--split-placement", "local",
			"--provider", "fabric", "--fabric-provider", prov}})
	store, err := regiontable.OpenEtcd([]string{cl.etcd.endpoint()}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	regions := waitReplicated(t, store, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	members, err := store.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		eps := m.FabricEndpoints()
		if len(eps) != 1 || eps[0].Provider != rdma.LibfabricName(prov) || eps[0].Addr == "" {
			t.Fatalf("member %s publishes fabric endpoints %q, want one of provider %q", m.ID, m.Fabric, rdma.LibfabricName(prov))
		}
	}
	for _, r := range regions {
		if _, ok := r.ReadKeyFor(rdma.ProviderFabric); !ok {
			t.Fatalf("region %d has no fabric key: %s", r.ID, r.ReadKey)
		}
	}

	w := cl.newClient(t, func(c *client.Config) { c.Mode = locality.Mode{Kind: locality.ServerOnly} })
	fabric := func(c *client.Config) {
		c.Mode = locality.Mode{Kind: locality.ClientOnly}
		c.Provider = client.ProviderFabric
		c.Fabric = rdma.FabricClientOptions{Provider: prov, Node: node, ReadTimeout: 3 * time.Second}
	}
	c := cl.newClient(t, fabric)
	const keys = 1500
	key := func(i int) string { return fmt.Sprintf("key-%05d", i) }
	val := func(i, round int) string { return fmt.Sprintf("value-%d-%d", i, round) }
	for i := range keys {
		mustPut(t, w, key(i), val(i, 0))
	}
	check := func(round int, changed func(i int) bool) {
		t.Helper()
		for i := range keys {
			want := val(i, 0)
			if changed(i) {
				want = val(i, round)
			}
			gctx, gcancel := context.WithTimeout(ctx, 30*time.Second)
			v, err := c.Get(gctx, []byte(key(i)))
			gcancel()
			if err != nil || string(v) != want {
				t.Fatalf("round %d: get %s = %q, %v; want %q", round, key(i), v, err, want)
			}
		}
		n := 0
		for kv, err := range c.Scan(ctx, []byte(key(0)), nil, client.RangeOptions{}) {
			if err != nil {
				t.Fatalf("round %d: range: %v", round, err)
			}
			want := val(n, 0)
			if changed(n) {
				want = val(n, round)
			}
			if string(kv.Key) != key(n) || string(kv.Value) != want {
				t.Fatalf("round %d: range pair %d is %s=%s, want %s=%s", round, n, kv.Key, kv.Value, key(n), want)
			}
			n++
		}
		if n != keys {
			t.Fatalf("round %d: range returned %d pairs, want %d", round, n, keys)
		}
	}
	check(0, func(int) bool { return false })
	before := c.Stats()
	if before.Reads == 0 || before.ClientSideOps["get"] < keys || before.ServerHops != 0 {
		t.Fatalf("the client did not read one-sided: %d reads, %d client-side gets, %d server hops", before.Reads, before.ClientSideOps["get"], before.ServerHops)
	}
	t.Logf("%d keys read client-side over fabric %s: %d one-sided reads, %d bytes", keys, prov, before.Reads, before.ReadBytes)

	// Pause the root region's host: once another replica leads, the
	// fabric key it published reads nothing trusted.
	root, err := store.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, err := store.Region(ctx, root.Region())
	if err != nil {
		t.Fatal(err)
	}
	var victim *cellServer
	for _, s := range cl.servers {
		if s.id == e.Host {
			victim = s
		}
	}
	var oldKey rdma.RemoteKey
	raw, _ := e.ReadKeyFor(rdma.ProviderFabric)
	if err := json.Unmarshal(raw, &oldKey); err != nil {
		t.Fatal(err)
	}
	probe, err := rdma.NewFabricClient(rdma.FabricClientOptions{Provider: prov, Node: node, ReadTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := probe.Read(ctx, &oldKey, 0, atomicmem.Alloc(4096)); err != nil {
		t.Fatalf("fabric read of the host's region before the pause: %v", err)
	}
	if err := syscall.Kill(victim.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ne := waitNewHost(t, store, e.ID, victim.id, 30*time.Second)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	err = probe.Read(rctx, &oldKey, 0, atomicmem.Alloc(4096))
	rcancel()
	// shm reads progress without the paused server (the reader copies):
	// its lease word judges them. tcp;ofi_rxm's need the server's thread:
	// they do not complete at all.
	switch {
	case err == nil:
		t.Fatalf("fabric read of the paused host's region after %s took it over succeeded", ne.Host)
	case prov == "shm" && !errors.Is(err, rdma.ErrRevoked):
		t.Fatalf("fabric shm read of the paused host's region: %v, want ErrRevoked (its lease lapsed)", err)
	}
	t.Logf("read of the paused host's region after %s took it over: %v", ne.Host, err)

	// Kill it: the clients go on with the new host.
	victim.kill()
	for i := 0; i < keys; i += 3 {
		mustPut(t, w, key(i), val(i, 1))
	}
	check(1, func(i int) bool { return i%3 == 0 })
	after := c.Stats()
	if after.Reads <= before.Reads || after.ServerHops != 0 {
		t.Fatalf("after the kill: %d one-sided reads (%d before), %d server hops", after.Reads, before.Reads, after.ServerHops)
	}
	t.Logf("after killing %s (host of region %d, now %s): %d more one-sided reads; retries %v", victim.id, e.ID, ne.Host, after.Reads-before.Reads, after.Retries)
}
