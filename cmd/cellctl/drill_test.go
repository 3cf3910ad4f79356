package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/drill"
)

// Flag errors are found before anything starts, and said on one line.
// The endpoints and the cellserver binary lead nowhere, so that a case
// that got past its flags could not reach a cluster.
func TestDrillFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "ycsb-z", "--local", "3"}, "--workload"},
		{[]string{"--fault", "explode", "--local", "3"}, "--fault"},
		{[]string{"--heal-at", "20s", "--fault-duration", "3s", "--local", "3"}, "give one"},
		{[]string{"--fault-at", "10s", "--heal-at", "5s", "--local", "3"}, "--heal-at"},
		{[]string{"--local", "3", "--fault-cmd", "true"}, "give one"},
		{[]string{"--faults", "3", "--fault-duration", "5s", "--fault-every", "5s", "--local", "3"}, "fault every"},
		{[]string{"--clients", "-1", "--local", "3"}, "clients"},
		{[]string{}, "no target"},
		{[]string{"--local", "3", "--fault", "partition"}, "cannot be partitioned"},
	} {
		code, out, errs := runCellctl(append([]string{"drill", "--quiet", "--endpoints", "127.0.0.1:1", "--cellserver", "/nonexistent/cellserver"}, tc.args...)...)
		if code == 0 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want one line about %s", tc.args, code, out, errs, tc.want)
		}
	}
}

// The tables of a report: phases, faults, unavailability, verdict.
func TestDrillTables(t *testing.T) {
	s := time.Second
	r := &drill.Report{
		Workload: drill.Workload{Mix: drill.Mix{Get: 50, Put: 50}, Keys: 100, Clients: 4},
		Fault:    drill.Kill,
		Phases:   []drill.Phase{{Name: drill.PhaseBefore, Seconds: 5, OpsPS: 1000}, {Name: drill.PhaseDuring, Seconds: 4, OpsPS: 200, ErrPS: 3}},
		Faults: []drill.FaultStats{{FaultEvent: drill.FaultEvent{Kind: drill.Kill, Server: "cell-2", Fault: 5 * s, Heal: 9 * s},
			Unavailable: 1500 * time.Millisecond, ByRegion: map[uint32]time.Duration{1: 1500 * time.Millisecond}}},
		Regions:         []drill.RegionStats{{Region: 1, Keys: 100, Unavailable: drill.Spread{P50: 1500 * time.Millisecond, P99: 1500 * time.Millisecond, Max: 1500 * time.Millisecond}}},
		Unavailability:  drill.Spread{Max: 1500 * time.Millisecond},
		Lost:            []drill.Loss{{Key: "drill/k1", Allowed: []string{`"w1-3"`}}},
		Linearizability: drill.Linearizability{Verdict: drill.NotLinearizable, Keys: []string{"drill/k1"}, Visualization: "drill-drill_k1.html"},
		ClusterChecked:  true,
	}
	var b strings.Builder
	for _, tb := range drillTables(r) {
		if err := tb.write(&b); err != nil {
			t.Fatal(err)
		}
	}
	out := b.String()
	for _, want := range []string{"1 × kill", "cell-2", "5.0s", "9.0s", "1.500s", "lost writes:      1; drill/k1 = <absent>, want one of \"w1-3\"",
		"not linearizable (keys drill/k1); see drill-drill_k1.html", "cluster check:    ok", "result:           FAIL"} {
		if !strings.Contains(out, want) {
			t.Errorf("tables lack %q:\n%s", want, out)
		}
	}
}
