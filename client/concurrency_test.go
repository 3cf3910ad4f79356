package client

import (
	"testing"
	"time"
)

// TestConcurrentModel runs concurrent writers and readers in every mode,
// with both providers and with the caches on and off, in a two-level tree
// over two servers, and checks every read against a register model
// (linearizable single-writer registers) and the final state with a scan.
// Under the race detector the shm provider's readers copy straight from
// the region while the servers' writers publish, so torn copies and
// reused records are met for real.
func TestConcurrentModel(t *testing.T) {
	const n = 400
	dur := 300 * time.Millisecond
	if testing.Short() {
		dur = 100 * time.Millisecond
	}
	cl := newTestCluster(t, clusterSpec{servers: 2, splits: splitsFor(n, 3)})
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		for _, mode := range allModes {
			for _, cache := range []bool{true, false} {
				name := mode.String() + "/" + provider + "/cache=on"
				if !cache {
					name = mode.String() + "/" + provider + "/cache=off"
				}
				t.Run(name, func(t *testing.T) {
					cfg := testConfig(t, cl)
					cfg.Mode, cfg.Provider = mode, provider
					if !cache {
						cfg.NodeCacheBytes, cfg.PathCacheEntries = -1, -1
					}
					c := mustClient(t, cfg)
					m := runModel(t, c, n, 2, 3, dur, 7)
					checkFinal(t, testCtx(t, 30*time.Second), c, m)
					// Leave the cluster empty for the next run.
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
				})
			}
		}
	}
}
