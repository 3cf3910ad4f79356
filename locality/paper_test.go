package locality

// Tests of the selector against the text of the Cell paper (USENIX ATC '16,
// §2.5 "Selectively Relaxed Locality"). Each test quotes the sentence it
// checks, in the style of etcd raft's raft_paper_test.go.

import (
	"testing"
	"time"
)

// TestRuleInequality checks the selection rule:
// "the client should choose server-side search if the following inequality
// holds: q_s/T_s < m × q_r/T_r (1)" and "Substituting q_s/T_s = l_s − RTT and
// q_r/T_r = l_r − RTT into inequality (1) gives us the final search choice
// strategy."
func TestRuleInequality(t *testing.T) {
	tests := []struct {
		name        string
		ls, lr, rtt time.Duration
		heights     []int // ObserveHeight calls; none keeps m = 5
		want        Method
	}{
		{"server queue short", 20 * us, 13 * us, 10 * us, nil, ServerSide},                   // 10 < 5·3
		{"server queue long", 40 * us, 13 * us, 10 * us, nil, ClientSide},                    // 30 ≥ 15
		{"equal is not less", 25 * us, 13 * us, 10 * us, nil, ClientSide},                    // 15 ≥ 15
		{"just below", 25*us - 1, 13 * us, 10 * us, nil, ServerSide},                         // 15−ε < 15
		{"taller meganodes favour server", 40 * us, 13 * us, 10 * us, []int{11}, ServerSide}, // 30 < 33
		{"shorter meganodes favour client", 20 * us, 13 * us, 10 * us, []int{3}, ClientSide}, // 10 ≥ 9
		{"idle NIC", 16 * us, 10 * us, 10 * us, nil, ClientSide},                             // 6 ≥ 0
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Outlier rejection and exploration off: this test is the bare rule.
			s, _ := mustSelector(t, Options{OutlierK: -1, Explore: -1})
			for _, h := range tt.heights {
				s.ObserveHeight(h)
			}
			e := s.Estimator(1)
			e.ObserveRead(tt.rtt)
			fillRead(e, tt.lr, DefaultWindow) // evicts the RTT sample from the window
			fillServer(e, tt.ls, DefaultWindow)
			snap := e.Snapshot()
			if snap.RTT != tt.rtt || snap.LR.Mean != tt.lr || snap.LS.Mean != tt.ls {
				t.Fatalf("estimates rtt=%v lr=%v ls=%v, want %v %v %v", snap.RTT, snap.LR.Mean, snap.LS.Mean, tt.rtt, tt.lr, tt.ls)
			}
			for range 10 {
				if c := e.Choose(); c.Method != tt.want || c.Explore {
					t.Fatalf("Choose() = %+v, want %v", c, tt.want)
				}
			}
		})
	}
}

// TestMovingAverageOfLastNSamples checks: "we use a moving average to
// estimate l_s and l_r: clients keep a history of the most recent n (e.g.
// 100) samples for each server connection and calculate the averages."
func TestMovingAverageOfLastNSamples(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	if got := s.Options().Window; got != 100 {
		t.Fatalf("default window = %d, want 100", got)
	}
	e := s.Estimator(1)
	// A slow ramp: no sample is an outlier, and only the last 100 count.
	for i := 1; i <= 250; i++ {
		e.ObserveServer(time.Duration(i)*us, 0, 0)
		e.ObserveRead(time.Duration(i) * us)
	}
	snap := e.Snapshot()
	want := 200500 * time.Nanosecond // mean of 151..250 µs
	if snap.LS.Mean != want || snap.LR.Mean != want {
		t.Errorf("l_s = %v, l_r = %v, want %v (the last 100 samples)", snap.LS.Mean, snap.LR.Mean, want)
	}
	if snap.LS.Samples != 100 || snap.LR.Samples != 100 || snap.LS.Dropped != 0 {
		t.Errorf("samples %d/%d dropped %d, want 100/100/0", snap.LS.Samples, snap.LR.Samples, snap.LS.Dropped)
	}
}

// TestEstimatesArePerServerConnection checks that histories are kept "for
// each server connection".
func TestEstimatesArePerServerConnection(t *testing.T) {
	s, _ := mustSelector(t, Options{Explore: -1})
	a, b := s.Estimator(1), s.Estimator(2)
	fillRead(a, 10*us, 20)
	fillServer(a, 12*us, 20) // 2 ≥ 5·0: client side
	fillRead(b, 10*us, 1)
	fillRead(b, 14*us, 20)
	fillServer(b, 12*us, 20) // 2 < 5·3.8: server side
	if got := a.Choose().Method; got != ClientSide {
		t.Errorf("server 1 chose %v, want client", got)
	}
	if got := b.Choose().Method; got != ServerSide {
		t.Errorf("server 2 chose %v, want server", got)
	}
	if sa, sb := a.Snapshot(), b.Snapshot(); sa.LR.Mean != 10*us || sb.RTT != 10*us || sa.LS.Samples != 20 {
		t.Errorf("estimates leaked between connections: %+v %+v", sa, sb)
	}
	if s.Estimator(1) != a {
		t.Error("Estimator(1) returned a different estimator the second time")
	}
}

// TestOutlierDiscarded checks: "we discard any outlier sample s if
// |s − μ| ≥ Kσ, where μ and σ are the moving average and standard deviation,
// respectively, and K is a constant (e.g. 3)."
func TestOutlierDiscarded(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	if got := s.Options().OutlierK; got != 3 {
		t.Fatalf("default K = %v, want 3", got)
	}
	e := s.Estimator(1)
	// μ = 11 µs, σ = 1 µs exactly.
	for range 50 {
		e.ObserveServer(10*us, 0, 0)
		e.ObserveServer(12*us, 0, 0)
	}
	tests := []struct {
		sample  time.Duration
		dropped bool
	}{
		{14 * us, true},     // |s−μ| = 3σ: "≥", dropped
		{8 * us, true},      // below the mean too
		{100 * us, true},    // far out
		{14*us - 10, false}, // just inside
		{8*us + 10, false},  // just inside, below
		{11 * us, false},    // at the mean
	}
	for _, tt := range tests {
		before := e.Snapshot()
		e.ObserveServer(tt.sample, 0, 0)
		after := e.Snapshot()
		if got := after.LS.Dropped - before.LS.Dropped; got != map[bool]uint64{false: 0, true: 1}[tt.dropped] {
			t.Errorf("sample %v: dropped %d, want dropped=%v (μ=%v σ=%v)", tt.sample, got, tt.dropped, before.LS.Mean, before.LS.StdDev)
		}
		if tt.dropped && after.LS.Mean != before.LS.Mean {
			t.Errorf("sample %v was dropped but moved the mean %v → %v", tt.sample, before.LS.Mean, after.LS.Mean)
		}
		// Restore μ = 11, σ = 1 for the next case.
		for range 50 {
			e.ObserveServer(10*us, 0, 0)
			e.ObserveServer(12*us, 0, 0)
		}
	}
	// Reads are filtered the same way.
	for range 50 {
		e.ObserveRead(10 * us)
		e.ObserveRead(12 * us)
	}
	e.ObserveRead(30 * us)
	if got := e.Snapshot().LR.Dropped; got != 1 {
		t.Errorf("read outliers dropped = %d, want 1", got)
	}
}

// TestHistoryDiscardedWhenDropsOutnumberKeeps checks: "If we discard more
// samples than we keep in one moving period, we discard that connection's
// history of samples."
func TestHistoryDiscardedWhenDropsOutnumberKeeps(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	e := s.Estimator(1)
	for range 50 {
		e.ObserveServer(10*us, 1*us, 5*us)
		e.ObserveServer(12*us, 1*us, 5*us)
	}
	// A level shift: every new sample is an outlier against the old
	// history. The moving period is the last n = 100 samples offered.
	for i := 1; i <= 50; i++ {
		e.ObserveServer(100*us, 90*us, 5*us)
	}
	snap := e.Snapshot()
	if snap.LS.Resets != 0 || snap.LS.Dropped != 50 || snap.LS.Samples != 100 {
		t.Fatalf("after 50 drops and 50 keeps: resets %d dropped %d samples %d, want 0 50 100",
			snap.LS.Resets, snap.LS.Dropped, snap.LS.Samples)
	}
	e.ObserveServer(100*us, 90*us, 5*us) // 51 dropped > 49 kept
	snap = e.Snapshot()
	if snap.LS.Resets != 1 || snap.LS.Samples != 0 || snap.QueueTime != 0 {
		t.Fatalf("after 51 drops: resets %d samples %d queue %v, want 1 0 0", snap.LS.Resets, snap.LS.Samples, snap.QueueTime)
	}
	// The new level is learnt from scratch.
	fillServer(e, 100*us, 20)
	if snap = e.Snapshot(); snap.LS.Mean != 100*us || snap.LS.Samples != 20 {
		t.Errorf("after reset: l_s = %v over %d samples, want 100µs over 20", snap.LS.Mean, snap.LS.Samples)
	}
	if snap.LR.Samples != 0 || snap.LR.Resets != 0 {
		t.Errorf("l_r affected by l_s reset: %+v", snap.LR)
	}
}

// TestOccasionalOutliersDoNotDiscardHistory is the converse: as long as kept
// samples outnumber discarded ones in the moving period, the history stays.
func TestOccasionalOutliersDoNotDiscardHistory(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	e := s.Estimator(1)
	for range 50 {
		e.ObserveRead(10 * us)
		e.ObserveRead(12 * us)
	}
	for range 300 { // one outlier in three
		e.ObserveRead(10 * us)
		e.ObserveRead(500 * us)
		e.ObserveRead(12 * us)
	}
	snap := e.Snapshot()
	if snap.LR.Resets != 0 || snap.LR.Dropped != 300 || snap.LR.Mean != 11*us {
		t.Errorf("l_r = %+v, want mean 11µs, 300 dropped, no reset", snap.LR)
	}
}

// TestRTTIsLowestReadLatency checks: "We set RTT to be the lowest measured
// RDMA latency to the server."
func TestRTTIsLowestReadLatency(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	e := s.Estimator(1)
	for _, lat := range []time.Duration{20 * us, 15 * us, 18 * us} {
		e.ObserveRead(lat)
	}
	e.ObserveServer(5*us, 0, 0) // server-side latencies are not RDMA latencies
	if got := e.Snapshot().RTT; got != 15*us {
		t.Fatalf("RTT = %v, want 15µs", got)
	}
	for range 50 {
		e.ObserveRead(20 * us)
		e.ObserveRead(22 * us)
	}
	e.ObserveRead(2 * us) // an outlier for l_r, but still a measured latency
	snap := e.Snapshot()
	if snap.RTT != 2*us || snap.LR.Dropped != 1 {
		t.Errorf("RTT = %v (l_r dropped %d), want 2µs with the sample dropped from l_r", snap.RTT, snap.LR.Dropped)
	}
}

// TestHeightStartsAtFiveAndFollowsAverage checks: "For a 64MB meganode with
// 1KB nodes, we initially set m = 5, the estimated height of each meganode
// in nodes; as we traverse meganodes, we adjust this estimate based on the
// average meganode height."
func TestHeightStartsAtFiveAndFollowsAverage(t *testing.T) {
	s, _ := mustSelector(t, Options{Explore: -1})
	if got := s.M(); got != 5 {
		t.Fatalf("initial m = %v, want 5", got)
	}
	s.ObserveHeight(3)
	s.ObserveHeight(4)
	if got := s.M(); got != 3.5 {
		t.Fatalf("m after heights 3, 4 = %v, want 3.5", got)
	}
	s.ObserveHeight(0) // ignored
	if got := s.M(); got != 3.5 {
		t.Fatalf("m after height 0 = %v, want 3.5 (ignored)", got)
	}
	for range DefaultWindow {
		s.ObserveHeight(7)
	}
	if got := s.M(); got != 7 {
		t.Fatalf("m after 100 heights of 7 = %v, want 7", got)
	}
	// m enters the rule: l_s − RTT = 20µs, l_r − RTT = 3µs.
	e := s.Estimator(1)
	e.ObserveRead(10 * us)
	fillRead(e, 13*us, DefaultWindow) // evicts the RTT sample from the window
	fillServer(e, 30*us, 20)
	if got := e.Choose().Method; got != ServerSide { // 20 < 7·3
		t.Errorf("m=7: chose %v, want server", got)
	}
	for range DefaultWindow {
		s.ObserveHeight(6)
	}
	if got := e.Choose().Method; got != ClientSide { // 20 ≥ 6·3
		t.Errorf("m=6: chose %v, want client", got)
	}
}

// TestExplorationChoosesWorseMethod checks: "With a small probability p
// (e.g., 1%), we choose the method estimated to be worse for a given search
// to see if conditions have changed."
func TestExplorationChoosesWorseMethod(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ls     time.Duration
		better Method
	}{
		{"server better", 12 * us, ServerSide},
		{"client better", 60 * us, ClientSide},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The paper's p, without Cell's cap in time (the fake clock
			// stands still: the cap would stop exploration after its first
			// second's worth; see TestExplorationCappedInTime).
			s, _ := mustSelector(t, Options{MaxExploreRate: -1})
			if got := s.Options().Explore; got != 0.01 {
				t.Fatalf("default p = %v, want 0.01", got)
			}
			e := s.Estimator(1)
			e.ObserveRead(10 * us)
			fillRead(e, 14*us, 20) // m·(l_r − RTT) = 20µs
			fillServer(e, tt.ls, 20)
			const n = 200_000
			var explored, worse int
			for range n {
				c := e.Choose()
				if c.Method != tt.better {
					worse++
				}
				if c.Explore {
					explored++
					if c.Method == tt.better {
						t.Fatalf("exploration chose the better method %v", c.Method)
					}
				}
			}
			// Binomial(200000, 0.01): mean 2000, σ ≈ 44.5; ±5σ.
			if explored < 1777 || explored > 2223 || worse != explored {
				t.Errorf("explored %d, worse %d of %d, want ≈ 1%% and equal", explored, worse, n)
			}
			if d := e.Snapshot().Decisions; d.Explore != uint64(explored) || d.Total() != n {
				t.Errorf("decisions %+v, want explore %d of %d", d, explored, n)
			}
		})
	}
	t.Run("disabled", func(t *testing.T) {
		s, _ := mustSelector(t, Options{Explore: -1})
		e := s.Estimator(1)
		e.ObserveRead(10 * us)
		fillRead(e, 14*us, 20)
		fillServer(e, 12*us, 20)
		if d := countChoices(e, 10_000); d.Explore != 0 || d.Client != 0 {
			t.Errorf("with exploration off: %+v, want all server", d)
		}
	})
}

// TestIdleConnectionHistoryDiscarded checks: "If a client has not performed
// any searches on a connection for long enough (e.g., 3 seconds), that
// connection's history is discarded."
func TestIdleConnectionHistoryDiscarded(t *testing.T) {
	s, clk := mustSelector(t, Options{Explore: -1})
	if got := s.Options().IdleTimeout; got != 3*time.Second {
		t.Fatalf("default idle timeout = %v, want 3s", got)
	}
	e := s.Estimator(1)
	other := s.Estimator(2)
	e.ObserveRead(10 * us)
	fillRead(e, 11*us, 20)
	fillServer(e, 30*us, 20) // 20 ≥ 5·1: client side
	fillServer(other, 30*us, 20)
	if got := e.Choose().Method; got != ClientSide {
		t.Fatalf("before idling chose %v, want client", got)
	}
	clk.Advance(3*time.Second - 1)
	if got := e.Choose().Method; got != ClientSide {
		t.Fatalf("after 3s−1ns idle chose %v, want client (history kept)", got)
	}
	clk.Advance(3 * time.Second)
	// Cold again: no l_s sample, so the first choice is server-side.
	if got := e.Choose().Method; got != ServerSide {
		t.Errorf("after 3s idle chose %v, want server (cold start)", got)
	}
	snap := e.Snapshot()
	if snap.LS.Samples != 0 || snap.LR.Samples != 0 || snap.RTT != 0 || snap.IdleResets != 1 {
		t.Errorf("after idle: %+v, want empty history and one idle reset", snap)
	}
	if got := other.Snapshot(); got.LS.Samples != 20 {
		t.Errorf("the idle check of one connection touched another: %+v", got.LS)
	}
	// Observations count as activity too.
	fillServer(e, 30*us, 5)
	for range 4 {
		clk.Advance(2 * time.Second)
		e.ObserveServer(30*us, 0, 0)
	}
	if snap := e.Snapshot(); snap.IdleResets != 1 || snap.LS.Samples != 9 {
		t.Errorf("busy connection lost history: %+v", snap)
	}
}

// TestExplorationCappedInTime checks Cell's refinement of exploration
// (doc.go, "Exploration by time"): at most MaxExploreRate exploring
// choices per second on a connection, p of the hops below that rate, and
// none of it with PaperRule.
func TestExplorationCappedInTime(t *testing.T) {
	run := func(t *testing.T, opts Options, hopsPerSec, seconds int) (explored int) {
		s, clk := mustSelector(t, opts)
		e := s.Estimator(1)
		e.ObserveRead(10 * us)
		fillRead(e, 14*us, 20)
		fillServer(e, 60*us, 20) // client-side is better
		step := time.Second / time.Duration(hopsPerSec)
		for range hopsPerSec * seconds {
			clk.Advance(step)
			if e.Choose().Explore {
				explored++
			}
		}
		return explored
	}
	t.Run("fast connection", func(t *testing.T) {
		// 100K hops/s for 5 s: p would explore ~5,000 times; the cap
		// allows the first second's bucket (200) plus 200/s.
		got := run(t, Options{}, 100_000, 5)
		if got < 900 || got > 1200 {
			t.Errorf("explored %d times in 5 s at 100K hops/s, want ≈ 200 + 5·200", got)
		}
		if paper := run(t, Options{PaperRule: true}, 100_000, 5); paper < 4500 || paper > 5500 {
			t.Errorf("paper rule explored %d times, want ≈ 1%% of 500,000", paper)
		}
	})
	t.Run("slow connection", func(t *testing.T) {
		// 5,000 hops/s: p's 50 per second is under the cap.
		if got := run(t, Options{}, 5000, 20); got < 800 || got > 1200 {
			t.Errorf("explored %d of 100,000 hops at 5K hops/s, want ≈ 1%%", got)
		}
	})
}

// TestHopExplorationByCost: while client-side hops are cheaper than a
// server-side one, the server is explored with probability p scaled by
// the ratio of their costs (m·l_r over l_s), and at least once a second;
// the paper's rule explores with p flat. While server-side hops are the
// cheaper, client-side ones are explored with p (TestTable2 in
// locality/sim fails when they are scaled too: see doc.go).
func TestHopExplorationByCost(t *testing.T) {
	// Same-host shm: reads of 0.4 µs (RTT 0.3 µs), a server-side hop of
	// 85 µs. m = 5: a client-side hop costs 2 µs, so p·2/85 ≈ 0.0235%.
	setup := func(t *testing.T, opts Options) (*Estimator, *fakeClock) {
		opts.MaxExploreRate = -1 // the cap is TestExplorationCappedInTime's
		s, clk := mustSelector(t, opts)
		e := s.Estimator(1)
		e.ObserveRead(300 * time.Nanosecond)
		fillRead(e, 400*time.Nanosecond, 20)
		fillServer(e, 85*us, 20)
		return e, clk
	}
	const n = 400_000
	t.Run("scaled", func(t *testing.T) {
		e, _ := setup(t, Options{})
		d := countChoices(e, n) // the clock stands still: no floor
		// Binomial(400000, 0.01·2/85): mean 94, σ ≈ 9.7; ±5σ.
		if d.Explore < 46 || d.Explore > 142 || d.Server != d.Explore {
			t.Errorf("explored %d (server-side %d) of %d hops, want ≈ %.0f", d.Explore, d.Server, n, n*0.01*2/85)
		}
	})
	t.Run("paper rule", func(t *testing.T) {
		e, _ := setup(t, Options{PaperRule: true})
		// Binomial(400000, 0.01): mean 4000, σ ≈ 63; ±5σ.
		if d := countChoices(e, n); d.Explore < 3685 || d.Explore > 4315 {
			t.Errorf("paper rule explored %d of %d, want ≈ 1%%", d.Explore, n)
		}
	})
	t.Run("at least once a second", func(t *testing.T) {
		// p so small that draws never explore: the floor still does,
		// once per second of decisions.
		e, clk := setup(t, Options{Explore: 1e-12})
		explored := 0
		for range 10_000 { // 10 s at 1,000 hops a second
			clk.Advance(time.Millisecond)
			if c := e.Choose(); c.Explore {
				explored++
				if c.Method != ServerSide {
					t.Fatalf("exploration chose %v, the better method", c.Method)
				}
			}
		}
		if explored < 9 || explored > 10 {
			t.Errorf("explored %d times in 10 s, want once a second", explored)
		}
	})
	t.Run("server cheaper: p flat", func(t *testing.T) {
		s, _ := mustSelector(t, Options{MaxExploreRate: -1})
		e := s.Estimator(1)
		e.ObserveRead(10 * us)
		fillRead(e, 40*us, 20) // a client-side hop: 200 µs
		fillServer(e, 20*us, 20)
		if d := countChoices(e, n); d.Explore < 3685 || d.Explore > 4315 || d.Client != d.Explore {
			t.Errorf("explored %d (client-side %d) of %d, want ≈ 1%%", d.Explore, d.Client, n)
		}
	})
}
