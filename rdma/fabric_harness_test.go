//go:build libfabric && cgo

package rdma

import (
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// The fabric provider joins the conformance suite over two libfabric
// providers that run on any Linux machine: shm (same host, CMA) and
// tcp;ofi_rxm (loopback).
func init() {
	harnesses = append(harnesses,
		harness{name: ProviderFabric + "+shm", provider: ProviderFabric, start: func(t testing.TB, k harnessKnobs) *pair { return startFabric(t, k, "shm") }},
		harness{name: ProviderFabric + "+tcp", provider: ProviderFabric, start: func(t testing.TB, k harnessKnobs) *pair { return startFabric(t, k, "tcp") }},
	)
}

// fabricNode is the address endpoints of a libfabric provider bind in
// tests: loopback for tcp, none for shm.
func fabricNode(prov string) string {
	if prov == "tcp" {
		return "127.0.0.1"
	}
	return ""
}

func startFabric(t testing.TB, k harnessKnobs, prov string) *pair {
	srv, err := NewFabricServer(FabricOptions{Provider: prov, Node: fabricNode(prov), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewFabricClient(FabricClientOptions{Provider: prov, Node: fabricNode(prov), Logger: testLogger(t),
		TestingKnobs: FabricClientKnobs{AfterCopy: k.afterCopy}})
	if err != nil {
		_ = srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("server Close: %v", err)
		}
	})
	return &pair{srv: srv, cl: cl, revoked: func(k Key) bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if srv.table == nil {
			return true
		}
		for slot := range uint32(srv.opts.Slots) {
			if atomicmem.LoadUint64(srv.table, int(fabricSlotOffset(slot))) == uint64(k)|keyTombstone {
				return true
			}
		}
		return false
	}}
}
