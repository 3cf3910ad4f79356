package client

import (
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
)

// TestConcurrentModel runs concurrent writers and readers against real
// servers in every mode, with both providers and with the caches on and
// off, and checks every read against a register model (linearizable
// single-writer registers) and the final state with a scan. The shm
// provider's readers copy straight from the region while the server's
// writers publish, so torn copies and reused records are met for real.
func TestConcurrentModel(t *testing.T) {
	rc := startReal(t, 1, nil)
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		for _, mode := range allModes {
			for _, cache := range []bool{true, false} {
				t.Run(runName(mode, provider, cache), func(t *testing.T) {
					cfg := realConfig(t, rc)
					cfg.Mode, cfg.Provider = mode, provider
					concurrentModel(t, cfg, cache)
				})
			}
		}
	}
}

// TestConcurrentModelMultiMeganode is TestConcurrentModel in a two-level
// tree over two servers (the fixture cluster), caches on.
func TestConcurrentModelMultiMeganode(t *testing.T) {
	cl := newTestCluster(t, clusterSpec{servers: 2, splits: splitsFor(400, 3)})
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		for _, mode := range allModes {
			t.Run(runName(mode, provider, true), func(t *testing.T) {
				cfg := testConfig(t, cl)
				cfg.Mode, cfg.Provider = mode, provider
				concurrentModel(t, cfg, true)
			})
		}
	}
}

func runName(mode locality.Mode, provider string, cache bool) string {
	c := "on"
	if !cache {
		c = "off"
	}
	return mode.String() + "/" + provider + "/cache=" + c
}

// concurrentModel runs the model check with a client for cfg and leaves
// the store empty.
func concurrentModel(t *testing.T, cfg Config, cache bool) {
	const n = 400
	dur := 250 * time.Millisecond
	if testing.Short() {
		dur = 80 * time.Millisecond
	}
	if !cache {
		cfg.NodeCacheBytes, cfg.PathCacheEntries = -1, -1
	}
	c := mustClient(t, cfg)
	m := runModel(t, c, n, 2, 3, dur, 7)
	checkFinal(t, testCtx(t, 30*time.Second), c, m)
	ctx := testCtx(t, 30*time.Second)
	for k := range m.final() {
		if err := c.Delete(ctx, []byte(k)); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
	}
	st := c.Stats()
	if !cache && (st.NodeCache.Hits+st.NodeCache.Inserts+st.PathCache.Hits+st.PathCache.Inserts) != 0 {
		t.Errorf("caches off but used: %+v %+v", st.NodeCache, st.PathCache)
	}
	t.Logf("ops %v hops s=%d c=%d retries %v", st.Ops, st.ServerHops, st.ClientHops, st.Retries)
}
