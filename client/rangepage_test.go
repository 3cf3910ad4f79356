package client

import (
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
	cellserver "github.com/cellstore/cell/server"
	"github.com/cellstore/cell/wire"
)

// rangePages runs n forward ranges of 10 pairs (one page each) from
// spread-out starts among keys key(0..keys) and returns the page
// decisions they added.
func rangePages(t *testing.T, c *Client, n, keys int) locality.Decisions {
	t.Helper()
	ctx := testCtx(t, 60*time.Second)
	before := c.Stats().Selector.PageDecisions
	for i := range n {
		pairs, _, err := c.Range(ctx, key((i*37)%(keys-10)), nil, RangeOptions{Limit: 10})
		if err != nil {
			t.Fatalf("range %d: %v", i, err)
		}
		if len(pairs) != 10 {
			t.Fatalf("range %d: %d pairs", i, len(pairs))
		}
	}
	after := c.Stats().Selector.PageDecisions
	return locality.Decisions{
		Server:  after.Server - before.Server,
		Client:  after.Client - before.Client,
		Explore: after.Explore - before.Explore,
	}
}

// pageClient is an adaptive shm client of rc with p = 10% (range pages
// explore with p scaled by the ratio of the costs, and at least once a
// second).
func pageClient(t *testing.T, rc *realCluster, edit func(*Config)) *Client {
	cfg := realConfig(t, rc)
	cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.Adaptive}, ProviderSHM
	cfg.Selector.Explore = 0.1
	if edit != nil {
		edit(&cfg)
	}
	return mustClient(t, cfg)
}

// TestRangePagesFollowCost: an adaptive client measures the cost per pair
// of range pages both ways and serves them the cheaper way. The server's
// Range calls are made slow (2 ms each, against microseconds for a
// client-side page over shm): both methods are measured (the cold start
// measures each), and pages go client-side but for exploration.
func TestRangePagesFollowCost(t *testing.T) {
	rc := startReal(t, 1, func(o *cellserver.Options) {
		o.TestingKnobs.BeforeHandle = func(op wire.Op) {
			if op == wire.OpRange {
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
	c := pageClient(t, rc, nil)
	const keys = 300
	mustPut(t, c, keys)
	rangePages(t, c, 50, keys) // both estimates filled
	d := rangePages(t, c, 300, keys)
	snap := c.Stats().Selector.Servers[0]
	t.Logf("slow Range calls: %+v; per pair: server %v (%d samples), client %v (%d samples)",
		d, snap.PageServer.Mean, snap.PageServer.Samples, snap.PageClient.Mean, snap.PageClient.Samples)
	if d.Client < d.Server || d.Server > d.Explore+2 {
		t.Errorf("slow server-side pages: %+v; want client-side but for exploration", d)
	}
	if snap.PageServer.Samples == 0 || snap.PageClient.Samples == 0 || snap.PageServerBetter {
		t.Errorf("page estimates: server %+v, client %+v, server better %v", snap.PageServer, snap.PageClient, snap.PageServerBetter)
	}
	// Hop decisions are apart: the puts' and pages' searches.
	if st := c.Stats(); st.ClientSideOps["range"] == 0 {
		t.Errorf("no range served client-side: %+v", st.ClientSideOps)
	}
}

// TestRangePagesServerWhenCheaper: the other way round, client-side pages
// made slow (each record read waits 5 ms): pages go server-side but for
// exploration. (A history reset can cost a cold-start
// choice or two, not counted as exploration: hence the slack of 2.)
func TestRangePagesServerWhenCheaper(t *testing.T) {
	rc := startReal(t, 1, nil)
	c := pageClient(t, rc, func(cfg *Config) {
		cfg.TestingKnobs.AfterExtentRead = func(uint64, []byte) { time.Sleep(5 * time.Millisecond) }
	})
	const keys = 300
	mustPut(t, c, keys)
	rangePages(t, c, 30, keys)
	d := rangePages(t, c, 200, keys)
	snap := c.Stats().Selector.Servers[0]
	t.Logf("slow client-side pages: %+v; per pair: server %v, client %v", d, snap.PageServer.Mean, snap.PageClient.Mean)
	if d.Server < d.Client || d.Client > d.Explore+2 {
		t.Errorf("slow client-side pages: %+v; want server-side but for exploration", d)
	}
	if snap.PageClient.Samples == 0 || !snap.PageServerBetter {
		t.Errorf("page estimates: server %+v, client %+v, server better %v", snap.PageServer, snap.PageClient, snap.PageServerBetter)
	}
}

// TestRangePagesModes: server, client and ratio=P force the pages'
// method, whatever they cost; reverse pages are server-side and no
// decision.
func TestRangePagesModes(t *testing.T) {
	rc := startReal(t, 1, nil)
	const keys = 100
	for _, tc := range []struct {
		mode     locality.Mode
		srv, cli uint64
	}{
		{locality.Mode{Kind: locality.ServerOnly}, 40, 0},
		{locality.Mode{Kind: locality.ClientOnly}, 0, 40},
		{locality.RatioMode(25), 10, 30},
	} {
		c := pageClient(t, rc, func(cfg *Config) { cfg.Mode = tc.mode })
		if tc.mode.Kind == locality.ServerOnly {
			mustPut(t, c, keys)
		}
		before := c.Stats()
		d := rangePages(t, c, 40, keys)
		after := c.Stats()
		if d.Server != tc.srv || d.Client != tc.cli || d.Explore != 0 {
			t.Errorf("%v: page decisions %+v, want %d server, %d client", tc.mode, d, tc.srv, tc.cli)
		}
		if got := after.ClientSideOps["range"] - before.ClientSideOps["range"]; got != tc.cli {
			t.Errorf("%v: %d ranges client-side, want %d", tc.mode, got, tc.cli)
		}
		// Reverse: server-side, no decision.
		ctx := testCtx(t, 10*time.Second)
		if _, _, err := c.Range(ctx, nil, nil, RangeOptions{Limit: 10, Reverse: true}); err != nil {
			t.Fatal(err)
		}
		if got := c.Stats().Selector.PageDecisions.Total(); got != 40 {
			t.Errorf("%v: %d page decisions after a reverse range, want 40", tc.mode, got)
		}
	}
}
