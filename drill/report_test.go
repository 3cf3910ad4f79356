package drill

import (
	"testing"
	"time"
)

func TestUnavailable(t *testing.T) {
	d := func(ms ...int) []time.Duration {
		out := make([]time.Duration, len(ms))
		for i, m := range ms {
			out[i] = time.Duration(m) * time.Millisecond
		}
		return out
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		success  []time.Duration
		from, to time.Duration
		want     time.Duration
	}{
		{"steady", d(0, 10, 20, 30, 40, 50), 15 * ms, 50 * ms, 10 * ms},
		{"outage", d(0, 10, 20, 300, 310, 320), 25 * ms, 330 * ms, 280 * ms},
		{"never back", d(0, 10, 20), 25 * ms, 500 * ms, 480 * ms},
		{"no success at all", nil, 100 * ms, 500 * ms, 400 * ms},
	} {
		if got := unavailable(tc.success, tc.from, tc.to); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The phases and per-fault rates of a made-up history: one op every 10 ms
// for 3 s, none succeeding during the fault (1 s to 1.5 s).
func TestSummarize(t *testing.T) {
	var ops []Op
	for i := 0; i < 300; i++ {
		at := time.Duration(i) * 10 * time.Millisecond
		o := OK
		if at >= time.Second && at < 1500*time.Millisecond {
			o = Failed
		}
		ops = append(ops, Op{Stage: StageLoad, Kind: Get, Key: "k", Outcome: o, Call: at, Return: at + time.Millisecond})
	}
	faults := []FaultEvent{{Kind: Kill, Server: "a", Fault: time.Second, Heal: 1500 * time.Millisecond}}
	r := Summarize(ops, faults, 0, 3*time.Second, Placement{})
	if len(r.Phases) != 3 {
		t.Fatalf("phases %+v", r.Phases)
	}
	before, during, after := r.Phases[0], r.Phases[1], r.Phases[2]
	if before.Name != PhaseBefore || during.Name != PhaseDuring || after.Name != PhaseAfter {
		t.Fatalf("phases %+v", r.Phases)
	}
	if before.OpsPS != 100 || during.OpsPS != 0 || during.ErrPS != 100 || after.OpsPS != 100 {
		t.Errorf("rates before %v, during %v (errors %v), after %v", before.OpsPS, during.OpsPS, during.ErrPS, after.OpsPS)
	}
	f := r.Faults[0]
	// The last success before the fault returned at 0.991 s, the first
	// after at 1.501 s.
	if f.Unavailable != 510*time.Millisecond || r.Unavailability.Max != f.Unavailable {
		t.Errorf("unavailable %v, spread %+v", f.Unavailable, r.Unavailability)
	}
	if f.Before != 100 || f.During != 0 || f.After != 100 {
		t.Errorf("fault rates %v %v %v", f.Before, f.During, f.After)
	}
	if len(r.Timeline) != 3 || r.Timeline[1].Failed != 50 || r.Timeline[1].OK != 50 {
		t.Errorf("timeline %+v", r.Timeline)
	}
	if r.Latency.P50 != time.Millisecond {
		t.Errorf("latency %+v", r.Latency)
	}
}
