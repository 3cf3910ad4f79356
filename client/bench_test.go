package client

import (
	"bytes"
	"testing"

	"github.com/cellstore/cell/locality"
	cellserver "github.com/cellstore/cell/server"
)

// BenchmarkGet measures one goroutine's gets against a real server in
// process (one leaf meganode of 1 KiB nodes holding benchKeys keys, one
// server core), server-side and client-side, over the tcp responder and
// shared memory. The node cache is at its default (nodes 4 levels above
// the leaves: none in this tree), so every client-side get reads the
// meganode's nodes and the record. Run with -benchtime to taste:
//
//	go test -run '^$' -bench BenchmarkGet -benchmem ./client/
func BenchmarkGet(b *testing.B) {
	const benchKeys = 10000
	rc := startBenchServer(b, benchKeys)
	for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}} {
		for _, provider := range []string{ProviderTCP, ProviderSHM} {
			b.Run("mode="+mode.String()+"/provider="+provider, func(b *testing.B) {
				cfg := realConfig(b, rc)
				cfg.Mode, cfg.Provider = mode, provider
				cfg.NodeCacheMinLevel = DefaultNodeCacheMinLevel
				c := mustClient(b, cfg)
				ctx := b.Context()
				dst := make([]byte, 0, 256)
				keys := make([][]byte, benchKeys)
				for i := range keys {
					keys[i] = key(i)
				}
				// Warm up: connections, path cache, buffers.
				for i := range 100 {
					if _, err := c.GetAppend(ctx, dst[:0], keys[i]); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					k := keys[i%benchKeys]
					v, err := c.GetAppend(ctx, dst[:0], k)
					if err != nil || !bytes.HasPrefix(v, k) {
						b.Fatalf("Get %s = %q, %v", k, v, err)
					}
					i += 7919
				}
				st := c.Stats()
				b.ReportMetric(float64(st.Reads)/float64(b.N+100), "reads/op")
			})
		}
	}
}

// BenchmarkScan measures 100-pair forward ranges from one goroutine,
// server-side (one Range call) and client-side (leaves along right links,
// one vector read of the records per leaf).
func BenchmarkScan(b *testing.B) {
	const benchKeys = 10000
	rc := startBenchServer(b, benchKeys)
	for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}} {
		for _, provider := range []string{ProviderTCP, ProviderSHM} {
			b.Run("mode="+mode.String()+"/provider="+provider, func(b *testing.B) {
				cfg := realConfig(b, rc)
				cfg.Mode, cfg.Provider = mode, provider
				c := mustClient(b, cfg)
				ctx := b.Context()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					start := key(i % (benchKeys - 100))
					pairs, _, err := c.Range(ctx, start, nil, RangeOptions{Limit: 100})
					if err != nil || len(pairs) != 100 || !bytes.Equal(pairs[0].Key, start) {
						b.Fatalf("Range from %s: %d pairs, %v", start, len(pairs), err)
					}
					i += 7919
				}
			})
		}
	}
}

// startBenchServer starts one server holding one 16 MiB meganode of 1 KiB
// nodes and stores n keys in it.
func startBenchServer(b testing.TB, n int) *realCluster {
	rc := startReal(b, 1, func(o *cellserver.Options) {
		o.NodeSize, o.MeganodeSize, o.RegionSize = 1024, 16<<20, 64<<20
	})
	load := realConfig(b, rc)
	load.Mode = locality.Mode{Kind: locality.ServerOnly}
	mustPut(b, mustClient(b, load), n)
	return rc
}

// TestGetDoesNotAllocate: GetAppend into a caller's buffer allocates
// nothing in steady state, server-side and client-side, over shared memory
// and the tcp responder, client and server (in this process) counted
// together.
func TestGetDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector (make test runs this without it)")
	}
	const keys = 1000
	rc := startBenchServer(t, keys)
	for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}} {
		for _, provider := range []string{ProviderTCP, ProviderSHM} {
			cfg := realConfig(t, rc)
			cfg.Mode, cfg.Provider = mode, provider
			c := mustClient(t, cfg)
			ctx := t.Context()
			dst := make([]byte, 0, 256)
			ks := make([][]byte, keys)
			for i := range ks {
				ks[i] = key(i)
			}
			i := 0
			get := func() {
				k := ks[i%keys]
				i += 7
				v, err := c.GetAppend(ctx, dst[:0], k)
				if err != nil || !bytes.HasPrefix(v, k) {
					t.Fatalf("Get %s = %q, %v", k, v, err)
				}
			}
			for range 200 {
				get()
			}
			if allocs := testing.AllocsPerRun(1000, get); allocs > 0.2 {
				t.Errorf("mode %v, provider %s: %.2f allocations per get, want 0", mode, provider, allocs)
			}
		}
	}
}
