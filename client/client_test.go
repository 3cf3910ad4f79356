package client

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/wire"
)

// TestRoundTrip puts, gets, checks and deletes keys against real servers
// in every mode with both providers.
func TestRoundTrip(t *testing.T) {
	rc := startReal(t, 1, nil)
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		for _, mode := range allModes {
			t.Run(mode.String()+"/"+provider, func(t *testing.T) {
				cfg := realConfig(t, rc)
				cfg.Mode, cfg.Provider = mode, provider
				roundTrip(t, mustClient(t, cfg), 300)
			})
		}
	}
	t.Run("adaptive/tcp/paper-rule", func(t *testing.T) {
		cfg := realConfig(t, rc)
		cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.Adaptive}, ProviderTCP
		cfg.Selector.PaperRule = true
		roundTrip(t, mustClient(t, cfg), 300)
	})
}

// TestRoundTripMultiMeganode is TestRoundTrip in a two-level tree over two
// servers (a root inner meganode and three leaf meganodes, the fixture
// cluster), where searches hop between meganodes and servers.
func TestRoundTripMultiMeganode(t *testing.T) {
	const n = 300
	cl := newTestCluster(t, clusterSpec{servers: 2, splits: splitsFor(n, 3)})
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		for _, mode := range allModes {
			t.Run(mode.String()+"/"+provider, func(t *testing.T) {
				cfg := testConfig(t, cl)
				cfg.Mode, cfg.Provider = mode, provider
				roundTrip(t, mustClient(t, cfg), n)
			})
		}
	}
}

// roundTrip puts n keys, reads them back with Get and Contains, deletes
// half, checks, deletes the rest, and checks the client's hop counts
// against its mode.
func roundTrip(t *testing.T, c *Client, n int) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	mustPut(t, c, n)
	for i := range n {
		v, err := c.Get(ctx, key(i))
		if err != nil || !bytes.Equal(v, value(i, 0)) {
			t.Fatalf("Get %s = %q, %v; want %q", key(i), v, err, value(i, 0))
		}
		ok, err := c.Contains(ctx, key(i))
		if err != nil || !ok {
			t.Fatalf("Contains %s = %v, %v", key(i), ok, err)
		}
	}
	if _, err := c.Get(ctx, []byte("absent")); !errors.Is(err, ErrNotFound) || !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get absent: %v, want ErrNotFound (and wire.ErrNotFound)", err)
	}
	if ok, err := c.Contains(ctx, []byte("absent")); ok || err != nil {
		t.Fatalf("Contains absent = %v, %v", ok, err)
	}
	for i := 0; i < n; i += 2 {
		if err := c.Delete(ctx, key(i)); err != nil {
			t.Fatalf("Delete %s: %v", key(i), err)
		}
	}
	if err := c.Delete(ctx, key(0)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
	for i := range n {
		_, err := c.Get(ctx, key(i))
		if i%2 == 0 && !errors.Is(err, ErrNotFound) || i%2 == 1 && err != nil {
			t.Fatalf("Get %s after deletes: %v", key(i), err)
		}
	}
	st := c.Stats()
	switch mode := c.sel.Mode(); mode.Kind {
	case locality.ServerOnly:
		if st.ClientHops != 0 {
			t.Errorf("server mode made %d client-side hops", st.ClientHops)
		}
	case locality.ClientOnly:
		if st.ServerHops != 0 || st.Reads == 0 {
			t.Errorf("client mode: %d server hops, %d reads", st.ServerHops, st.Reads)
		}
	case locality.Adaptive:
		if c.cfg.Provider == ProviderTCP && !c.cfg.Selector.PaperRule {
			// One-sided tcp reads cost the server CPU: adaptive searches
			// server-side (locality doc.go, "Reads that cost the server CPU").
			if st.ClientHops != 0 || st.ServerHops == 0 {
				t.Errorf("adaptive over tcp: server hops %d, client hops %d; want server only", st.ServerHops, st.ClientHops)
			}
		} else if st.ServerHops == 0 || st.ClientHops == 0 {
			t.Errorf("%v: server hops %d, client hops %d; want both", mode, st.ServerHops, st.ClientHops)
		}
	default:
		if st.ServerHops == 0 || st.ClientHops == 0 {
			t.Errorf("%v: server hops %d, client hops %d; want both", mode, st.ServerHops, st.ClientHops)
		}
	}
	t.Logf("hops s=%d c=%d reads=%d node cache %+v path cache %+v retries %v",
		st.ServerHops, st.ClientHops, st.Reads, st.NodeCache, st.PathCache, st.Retries)
	for i := 1; i < n; i += 2 {
		if err := c.Delete(ctx, key(i)); err != nil {
			t.Fatalf("cleanup Delete %s: %v", key(i), err)
		}
	}
}
