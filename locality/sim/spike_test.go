package sim

import (
	"testing"
	"time"
)

// spikeForTest is the Fig. 7 experiment with its phases shortened from
// 1s/5s/2s to 20ms/30ms/30ms so that it runs in seconds under -race.
func spikeForTest(jitter time.Duration) Spike {
	ms := time.Millisecond
	return Spike{
		Model:      Model{NetJitter: jitter},
		Warmup:     20 * ms,
		Before:     20 * ms,
		Length:     30 * ms,
		After:      30 * ms,
		Bucket:     5 * ms,
		Resolution: ms / 2,
	}
}

func logSpike(t *testing.T, r SpikeResult) {
	t.Helper()
	for _, run := range []SpikeRun{r.Adaptive, r.ServerOnly} {
		t.Logf("%-8v before p50 %v p90 %v | spike p50 %v p90 %v | after p50 %v p90 %v | decisions server-side %.2f → %.2f → %.2f, shift %v, recover %v",
			run.Mode, run.Before.P50, run.Before.P90, run.During.P50, run.During.P90, run.After.P50, run.After.P90,
			run.ShiftShare[0], run.ShiftShare[1], run.ShiftShare[2], run.Shift, run.Recover)
	}
}

// checkSpikeShape checks what the paper says of Fig. 7 (§4.4.3): "Cell is
// able to very rapidly switch [...] maintaining low median and 90th
// percentile latencies compared to server-side search."
func checkSpikeShape(t *testing.T, r SpikeResult) {
	t.Helper()
	a, s := r.Adaptive, r.ServerOnly
	if s.During.P50 < 20*s.Before.P50 {
		t.Errorf("server-only: spike p50 %v is not far above the base p50 %v: the spike does not overload the servers", s.During.P50, s.Before.P50)
	}
	if a.During.P50 > s.During.P50/4 || a.During.P90 > s.During.P90/2 {
		t.Errorf("spike latency p50/p90: adaptive %v/%v, server-only %v/%v; want adaptive ≤ 1/4 and 1/2 of them",
			a.During.P50, a.During.P90, s.During.P50, s.During.P90)
	}
	if a.Shift < 0 || a.Shift > 2*time.Millisecond {
		t.Errorf("adaptive selectors shifted after %v, want within 2ms", a.Shift)
	}
	if a.During.Searches != s.During.Searches || a.Before.Searches != s.Before.Searches {
		t.Errorf("the runs were handed different searches: %d/%d vs %d/%d", a.Before.Searches, a.During.Searches, s.Before.Searches, s.During.Searches)
	}
}

// TestSpike runs the model with the paper's parameters and constant
// network latency.
func TestSpike(t *testing.T) {
	r, err := spikeForTest(0).Run()
	if err != nil {
		t.Fatal(err)
	}
	logSpike(t, r)
	checkSpikeShape(t, r)
	// With constant network latency the minimum read latency is also the
	// typical one, so at base load m·(l_r − RTT) is about m times the
	// NIC's service jitter, below l_s − RTT (at least the CPU's 6.25µs):
	// the rule keeps searches client-side although each then takes m round
	// trips. This pins that property of the paper's rule in the model; an
	// improvement of the selector must be measured against it.
	if a := r.Adaptive; a.ShiftShare[0] > 0.1 {
		t.Errorf("base-load server-side share %.2f; the paper's rule in this model should stay client-side (≤ 0.1)", a.ShiftShare[0])
	}
}

// TestSpikeWithLatencySpread runs the model with network latency spread
// over its minimum (2µs mean, exponential): then the rule prefers the
// server side at base load and moves searches to the client side during
// the spike, as the paper describes: "Cell is able to very rapidly switch
// the majority of its searches to client-side traversals".
func TestSpikeWithLatencySpread(t *testing.T) {
	r, err := spikeForTest(2 * time.Microsecond).Run()
	if err != nil {
		t.Fatal(err)
	}
	logSpike(t, r)
	checkSpikeShape(t, r)
	a, s := r.Adaptive, r.ServerOnly
	if before, during := a.ShiftShare[0], a.ShiftShare[1]; before < 0.6 || during > before-0.15 {
		t.Errorf("server-side share %.2f before and %.2f during the spike; want a server-side majority that drops by 0.15 or more", before, during)
	}
	if d := a.ShiftShare[2] - a.ShiftShare[0]; d < -0.1 || d > 0.1 {
		t.Errorf("server-side share %.2f after the spike, %.2f before; want back within 0.1", a.ShiftShare[2], a.ShiftShare[0])
	}
	if a.Before.P50 > s.Before.P50*3/2 {
		t.Errorf("base-load p50: adaptive %v, server-only %v; want within 1.5×", a.Before.P50, s.Before.P50)
	}
}

func TestSpikeDeterministic(t *testing.T) {
	p := Spike{Warmup: time.Millisecond, Before: 2 * time.Millisecond, Length: 2 * time.Millisecond, After: 2 * time.Millisecond, Bucket: time.Millisecond, Resolution: 100 * time.Microsecond}
	a, err := p.Run()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Run()
	if a.Adaptive.During != b.Adaptive.During || a.Adaptive.Shift != b.Adaptive.Shift || len(a.Adaptive.Timeline) != 6 {
		t.Errorf("same seed, different results: %+v vs %+v", a.Adaptive, b.Adaptive)
	}
}

// TestSpikeQueueAware measures the queue-aware estimate of l_s (the
// default; locality.Options.IgnoreServerTimes turns it off) against the
// paper's estimate on the same spike, with latency spread (the setting in
// which the paper's rule shows Fig. 7's shape), the spike 1 s long and
// 1.5 s after it (the paper's 5 s and 2 s take too long under -race;
// BENCHMARKS.md §4 has those, over six seeds). After the spike the paper's
// estimate learns that the servers are idle again only from the 1% of
// searches it explores server-side, through a window of 100 latencies
// that still holds the spike's; the servers' reports of their queueing say
// it within a few replies. Asserted: the server-side share returns to its
// base level in less than half the time, p90 after the spike is lower, and
// base load and the spike's median are no worse. (The spike's p90 moves
// both ways with the seed, by up to 40%: not asserted.)
func TestSpikeQueueAware(t *testing.T) {
	run := func(ignore bool) SpikeResult {
		ms := time.Millisecond
		p := Spike{Model: Model{NetJitter: 2 * time.Microsecond}, Warmup: 100 * ms, Before: 200 * ms, Length: time.Second,
			After: 1500 * ms, Bucket: 250 * ms, Resolution: ms}
		p.Model.Selector.IgnoreServerTimes = ignore
		r, err := p.Run()
		if err != nil {
			t.Fatal(err)
		}
		logSpike(t, r)
		return r
	}
	paper, queue := run(true), run(false)
	checkSpikeShape(t, queue)
	p, q := paper.Adaptive, queue.Adaptive
	t.Logf("after the spike: the paper's estimate recovered in %v, p90 %v; queue-aware in %v, p90 %v", p.Recover, p.After.P90, q.Recover, q.After.P90)
	if q.Recover*2 >= p.Recover || q.After.P90 >= p.After.P90 {
		t.Errorf("after the spike: queue-aware recovered in %v with p90 %v, the paper's estimate in %v with p90 %v; want half the time and a lower p90",
			q.Recover, q.After.P90, p.Recover, p.After.P90)
	}
	if d := q.ShiftShare[0] - p.ShiftShare[0]; d < -0.05 || d > 0.05 {
		t.Errorf("base-load server-side share %.2f, the paper's estimate %.2f: want within 0.05", q.ShiftShare[0], p.ShiftShare[0])
	}
	if q.Before.P50 > p.Before.P50*11/10 || q.Before.P90 > p.Before.P90*11/10 || q.During.P50 > p.During.P50*11/10 {
		t.Errorf("p50/p90 before %v/%v, spike p50 %v; the paper's estimate %v/%v and %v: want no more than 10%% worse",
			q.Before.P50, q.Before.P90, q.During.P50, p.Before.P50, p.Before.P90, p.During.P50)
	}
}
