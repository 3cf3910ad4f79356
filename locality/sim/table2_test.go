package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// table2ForTest is Table 2 scaled to run in seconds under -race: one server
// instead of four (per-server dynamics are the same; the default load of
// 32 clients × 8 on 4 servers is 64 searches in flight per server, kept
// here), and short simulated runs. The adaptive runs warm up for 12ms,
// enough for the selectors to converge from a cold start (their l_r
// estimate is refreshed by 1% exploration only while server-side searches
// dominate); fixed ratios have nothing to learn and are steady after 2ms.
func table2ForTest() Table2 {
	return Table2{
		Model:         Model{Servers: 1},
		Load:          ClosedLoop{Clients: 8, Outstanding: 8, Warmup: 12 * time.Millisecond, Duration: 24 * time.Millisecond},
		FixedWarmup:   2 * time.Millisecond,
		FixedDuration: 4 * time.Millisecond,
	}
}

func formatRows(rows []Table2Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cores  server-only  client-only  adaptive (srv%%)  best fixed      adaptive/best  adaptive/sum\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%5d  %11.0f  %11.0f  %8.0f (%3.0f%%)  %8.0f %-6s  %13.3f  %12.3f\n",
			r.Cores, r.ServerOnly.Rate, r.ClientOnly.Rate, r.Adaptive.Rate, 100*r.Adaptive.ServerShare,
			r.BestFixed.Rate, r.BestFixed.Mode, r.VsBest, r.VsSum)
	}
	return b.String()
}

// TestTable2 checks the shape of the paper's Table 2 (§4.4.1) in the
// model: "Figure 6 shows that in most cases, especially when few resources
// are available, Cell meets or exceeds the throughput of the best
// hand-tuned fixed ratio", and §4.2: "Combining the two methods yields 93%
// of the aggregate throughput".
func TestTable2(t *testing.T) {
	rows, err := table2ForTest().Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", formatRows(rows))
	if len(rows) != 8 || rows[0].Cores != 1 || rows[7].Cores != 8 {
		t.Fatalf("rows for cores %d..%d, want 1..8", rows[0].Cores, rows[len(rows)-1].Cores)
	}
	for i, r := range rows {
		if r.VsBest < 0.98 {
			t.Errorf("%d cores: adaptive %.0f/s is %.3f of the best fixed ratio (%v, %.0f/s), want ≥ 0.98",
				r.Cores, r.Adaptive.Rate, r.VsBest, r.BestFixed.Mode, r.BestFixed.Rate)
		}
		if r.Adaptive.Rate < r.ServerOnly.Rate {
			t.Errorf("%d cores: adaptive %.0f/s below server-only %.0f/s", r.Cores, r.Adaptive.Rate, r.ServerOnly.Rate)
		}
		if i > 0 {
			prev := rows[i-1]
			if r.ServerOnly.Rate <= prev.ServerOnly.Rate || r.Adaptive.Rate <= prev.Adaptive.Rate {
				t.Errorf("%d cores: throughput did not grow with cores", r.Cores)
			}
			if r.Adaptive.ServerShare < prev.Adaptive.ServerShare-0.02 {
				t.Errorf("%d cores: adaptive server share %.2f fell from %.2f", r.Cores, r.Adaptive.ServerShare, prev.Adaptive.ServerShare)
			}
		}
	}
	if r := rows[0]; r.VsSum < 0.90 {
		t.Errorf("1 core: adaptive %.0f/s is %.3f of server-only + client-only (%.0f/s), want ≥ 0.90",
			r.Adaptive.Rate, r.VsSum, r.ServerOnly.Rate+r.ClientOnly.Rate)
	}
}

// TestClosedLoopMatchesQueueingBounds checks the model against what
// queueing theory says of it: saturated, server-only and client-only runs
// reach the CPU and NIC capacities, a fixed ratio P cannot exceed
// min(C_s/P, C_r/(1−P)), and an unloaded search takes its bare latency.
func TestClosedLoopMatchesQueueingBounds(t *testing.T) {
	m := Model{Servers: 1, Cores: 2}
	m.EnsureDefaults()
	load := ClosedLoop{Clients: 8, Outstanding: 8, Warmup: 2 * time.Millisecond, Duration: 4 * time.Millisecond}
	cs, cr := m.ServerCapacity(), m.ClientCapacity()
	for _, tt := range []struct {
		mode   string
		lo, hi float64
	}{
		{"server", 0.97 * cs, 1.01 * cs},
		{"client", 0.97 * cr, 1.01 * cr},
		{"ratio=20", 0.9 * cr / 0.8, 1.01 * cr / 0.8},
		{"ratio=90", 0.9 * cs / 0.9, 1.01 * cs / 0.9},
	} {
		r, err := RunClosedLoop(m, load, mustMode(t, tt.mode))
		if err != nil {
			t.Fatal(err)
		}
		if r.Rate < tt.lo || r.Rate > tt.hi {
			t.Errorf("%s: %.0f searches/s, want in [%.0f, %.0f]", tt.mode, r.Rate, tt.lo, tt.hi)
		}
	}
	// One client, one search at a time: no queueing at all.
	idle := ClosedLoop{Clients: 1, Outstanding: 1, Warmup: time.Millisecond, Duration: 4 * time.Millisecond}
	for _, tt := range []struct {
		mode string
		want time.Duration
	}{
		{"server", m.RTT + time.Duration(1e9/m.CoreRate)},
		{"client", time.Duration(m.M) * (m.RTT + time.Duration(1e9/m.NICRate))},
	} {
		r, err := RunClosedLoop(m, idle, mustMode(t, tt.mode))
		if err != nil {
			t.Fatal(err)
		}
		if d := r.P50 - tt.want; d < -tt.want/50 || d > tt.want/50 {
			t.Errorf("%s unloaded: p50 %v, want %v ± 2%%", tt.mode, r.P50, tt.want)
		}
	}
}

func TestDeterministic(t *testing.T) {
	m := Model{Servers: 2, Seed: 9}
	load := ClosedLoop{Clients: 4, Outstanding: 4, Warmup: time.Millisecond, Duration: 2 * time.Millisecond}
	a, err := RunClosedLoop(m, load, mustMode(t, "adaptive"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunClosedLoop(m, load, mustMode(t, "adaptive"))
	if a != b {
		t.Errorf("same seed, different results:\n%+v\n%+v", a, b)
	}
	m.Seed = 10
	c, _ := RunClosedLoop(m, load, mustMode(t, "adaptive"))
	if c == a {
		t.Errorf("different seeds gave identical results %+v", c)
	}
}
