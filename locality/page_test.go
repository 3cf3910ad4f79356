package locality

import (
	"testing"
	"time"
)

// fillPage offers count pages of pairs pairs, each taking lat, to method
// m's page estimate.
func fillPage(e *Estimator, m Method, lat time.Duration, pairs, count int) {
	for range count {
		e.ObservePage(m, lat, pairs)
	}
}

// choosePages makes n page decisions and counts them by method.
func choosePages(e *Estimator, n int) (server, client, explore int) {
	for range n {
		c := e.ChoosePage()
		if c.Method == ServerSide {
			server++
		} else {
			client++
		}
		if c.Explore {
			explore++
		}
	}
	return server, client, explore
}

// Cold start: server-side until a server-side page was measured, then
// client-side until a client-side one was, then the cheaper per pair.
func TestPageColdStart(t *testing.T) {
	s, _ := mustSelector(t, Options{Explore: -1})
	e := s.Estimator(1)
	if c := e.ChoosePage(); c.Method != ServerSide || c.Explore {
		t.Fatalf("first page: %+v, want server-side", c)
	}
	e.ObservePage(ServerSide, 100*us, 10)
	if c := e.ChoosePage(); c.Method != ClientSide || c.Explore {
		t.Fatalf("after a server-side page: %+v, want client-side", c)
	}
	e.ObservePage(ClientSide, 50*us, 10)
	if c := e.ChoosePage(); c.Method != ClientSide {
		t.Fatalf("client 5µs/pair, server 10µs/pair: %+v", c)
	}
	snap := e.Snapshot()
	if snap.PageServer.Mean != 10*us || snap.PageClient.Mean != 5*us || snap.PageServerBetter {
		t.Errorf("snapshot: server %v, client %v per pair, server better %v", snap.PageServer.Mean, snap.PageClient.Mean, snap.PageServerBetter)
	}
	if snap.PageDecisions != (Decisions{Server: 1, Client: 2}) {
		t.Errorf("page decisions %+v", snap.PageDecisions)
	}
	// Hop decisions are not page decisions.
	if snap.Decisions.Total() != 0 {
		t.Errorf("hop decisions %+v after pages only", snap.Decisions)
	}
}

// The cheaper method per pair is chosen, whatever the page sizes: a
// server page of 100 pairs in 200µs (2µs/pair) beats client pages of 10
// pairs in 50µs (5µs/pair), though each server page takes longer.
func TestPageCheaperPerPair(t *testing.T) {
	s, _ := mustSelector(t, Options{Explore: -1})
	e := s.Estimator(1)
	fillPage(e, ServerSide, 200*us, 100, 20)
	fillPage(e, ClientSide, 50*us, 10, 20)
	if srv, cli, _ := choosePages(e, 100); srv != 100 || cli != 0 {
		t.Errorf("server 2µs/pair, client 5µs/pair: %d server, %d client pages", srv, cli)
	}
	// The server slows down (a level shift: the old window is dropped
	// once outliers outnumber kept samples), and pages move client-side.
	fillPage(e, ServerSide, 2000*us, 100, 100)
	if srv, cli, _ := choosePages(e, 100); cli != 100 {
		t.Errorf("server 20µs/pair, client 5µs/pair: %d server, %d client pages", srv, cli)
	}
	if snap := e.Snapshot(); snap.PageServer.Resets == 0 || snap.PageServer.Mean != 20*us {
		t.Errorf("after the shift: server estimate %+v", snap.PageServer)
	}
	// A page of no pairs counts as one.
	e2 := s.Estimator(2)
	e2.ObservePage(ServerSide, 30*us, 0)
	if m := e2.Snapshot().PageServer.Mean; m != 30*us {
		t.Errorf("empty page: %v per pair", m)
	}
	// Non-positive latencies are ignored.
	e2.ObservePage(ClientSide, 0, 5)
	if n := e2.Snapshot().PageClient.Observed; n != 0 {
		t.Errorf("zero latency observed: %d", n)
	}
}

// Exploration picks the worse method with probability Explore scaled by
// the ratio of the costs (cheaper/dearer), within the pages' own token
// bucket (hops exploring do not starve pages), and at least once a
// second.
func TestPageExploration(t *testing.T) {
	s, clk := mustSelector(t, Options{Explore: 0.5, MaxExploreRate: 10})
	e := s.Estimator(1)
	fillPage(e, ServerSide, 100*us, 1, 20)
	fillPage(e, ClientSide, 10*us, 1, 20)
	// Hops spend their bucket first.
	fillServer(e, 100*us, 20)
	fillRead(e, 10*us, 20)
	for range 1000 {
		e.Choose()
	}
	srv, cli, explore := choosePages(e, 1000)
	if explore != 10 || srv != 10 || cli != 990 {
		t.Errorf("1000 pages at once: %d server (%d exploring), %d client; want 10 exploring (one second's tokens)", srv, explore, cli)
	}
	clk.Advance(time.Second)
	// One second's tokens, and maybe one for the second without
	// exploration if the first draw fails.
	if _, _, explore = choosePages(e, 1000); explore != 10 && explore != 11 {
		t.Errorf("a second later: %d exploring, want 10 or 11", explore)
	}
	// Uncapped: p·lo/hi = 0.5·10/100 = 5% of the pages.
	s1, _ := mustSelector(t, Options{Explore: 0.5, MaxExploreRate: -1})
	e1 := s1.Estimator(1)
	fillPage(e1, ServerSide, 100*us, 1, 20)
	fillPage(e1, ClientSide, 10*us, 1, 20)
	if _, _, explore = choosePages(e1, 20000); explore < 800 || explore > 1200 {
		t.Errorf("costs 10 to 1: %d of 20000 pages exploring, want ≈ 1000 (5%%)", explore)
	}
	// With PaperRule, the paper's p: 50%.
	s2, _ := mustSelector(t, Options{Explore: 0.5, PaperRule: true})
	e2 := s2.Estimator(1)
	fillPage(e2, ServerSide, 100*us, 1, 20)
	fillPage(e2, ClientSide, 10*us, 1, 20)
	if _, _, explore = choosePages(e2, 2000); explore < 900 || explore > 1100 {
		t.Errorf("paper rule: %d of 2000 pages exploring, want ≈ 1000", explore)
	}
	// A method 10^4 times dearer is explored about once a second, no
	// less: 10 seconds of 100 pages each.
	s3, clk3 := mustSelector(t, Options{})
	e3 := s3.Estimator(1)
	fillPage(e3, ServerSide, 10000*us, 1, 20)
	fillPage(e3, ClientSide, 1*us, 1, 20)
	explore = 0
	for range 10 {
		_, _, x := choosePages(e3, 100)
		explore += x
		clk3.Advance(time.Second)
	}
	if explore < 9 || explore > 11 {
		t.Errorf("costs 10^4 to 1: %d exploring pages in 10 s, want ≈ 10", explore)
	}
	// Without exploration, never the worse one.
	s4, _ := mustSelector(t, Options{Explore: -1})
	e4 := s4.Estimator(1)
	fillPage(e4, ServerSide, 100*us, 1, 20)
	fillPage(e4, ClientSide, 10*us, 1, 20)
	if srv, _, _ := choosePages(e4, 10000); srv != 0 {
		t.Errorf("no exploration: %d server-side pages", srv)
	}
}

// Fixed modes force the method whatever the estimates; ratio=P sends
// exactly P% of the pages server-side, as it does hops, on a credit of
// their own.
func TestPageModes(t *testing.T) {
	for _, tc := range []struct {
		mode     Mode
		srv, cli int
	}{
		{Mode{Kind: ServerOnly}, 100, 0},
		{Mode{Kind: ClientOnly}, 0, 100},
		{RatioMode(30), 30, 70},
		{RatioMode(0), 0, 100},
		{RatioMode(100), 100, 0},
	} {
		s, _ := mustSelector(t, Options{Mode: tc.mode})
		e := s.Estimator(1)
		// Estimates that would say otherwise.
		if tc.srv > 0 {
			fillPage(e, ServerSide, 100*us, 1, 20)
			fillPage(e, ClientSide, 1*us, 1, 20)
		} else {
			fillPage(e, ServerSide, 1*us, 1, 20)
			fillPage(e, ClientSide, 100*us, 1, 20)
		}
		var srv, cli int
		for i := range 100 {
			if i%3 == 0 {
				e.Choose() // hops interleaved do not move the pages' ratio
			}
			if e.ChoosePage().Method == ServerSide {
				srv++
			} else {
				cli++
			}
		}
		if srv != tc.srv || cli != tc.cli {
			t.Errorf("%v: %d server, %d client pages; want %d, %d", tc.mode, srv, cli, tc.srv, tc.cli)
		}
	}
}

// A server whose one-sided reads cost its CPU (tcp) still has its pages
// decided by their measured costs: the hop refinement does not apply.
func TestPageSharedCPUMeasured(t *testing.T) {
	s, _ := mustSelector(t, Options{Explore: -1})
	e := s.Estimator(1)
	e.SetReadsShareServerCPU(true)
	fillPage(e, ServerSide, 100*us, 1, 20)
	fillPage(e, ClientSide, 10*us, 1, 20)
	if c := e.ChoosePage(); c.Method != ClientSide {
		t.Errorf("shared CPU, client pages cheaper: %+v", c)
	}
	if c := e.Choose(); c.Method != ServerSide {
		t.Errorf("shared CPU hop: %+v", c)
	}
}

// Idleness discards the page estimates with the rest; Remove keeps the
// page decisions in the selector's totals.
func TestPageIdleAndRemove(t *testing.T) {
	s, clk := mustSelector(t, Options{Explore: -1})
	e := s.Estimator(1)
	fillPage(e, ServerSide, 100*us, 1, 20)
	fillPage(e, ClientSide, 10*us, 1, 20)
	choosePages(e, 5)
	clk.Advance(DefaultIdleTimeout)
	if c := e.ChoosePage(); c.Method != ServerSide {
		t.Errorf("after idling: %+v, want the cold start's server-side", c)
	}
	snap := e.Snapshot()
	if snap.PageServer.Samples != 0 || snap.PageClient.Samples != 0 || snap.IdleResets != 1 {
		t.Errorf("after idling: %+v", snap)
	}
	s.Remove(1)
	if d := s.Snapshot().PageDecisions; d != (Decisions{Client: 5, Server: 1}) {
		t.Errorf("page decisions after Remove: %+v", d)
	}
}
