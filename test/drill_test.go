package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"
)

// cellctl drill --local 3 --replicas 3 under a load of gets, puts and
// deletes: two kills of the leader, a pause of the leader, a restart of a
// random server. Each time nothing acknowledged is lost, porcupine finds
// the history linearizable, cellctl check passes afterwards, and the
// report has a figure for each fault.
func TestDrillLocal(t *testing.T) {
	for _, tc := range []struct {
		fault, target string
		faults        int
	}{
		{"kill", "leader", 2},
		{"pause", "leader", 1},
		{"restart", "random", 1},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			r := runDrill(t, "--local", "3", "--replicas", "3",
				"--keys", "200", "--clients", "4", "--workload", "get=50,put=40,delete=10",
				"--fault", tc.fault, "--target", tc.target, "--faults", fmt.Sprint(tc.faults),
				"--fault-at", "1500ms", "--fault-duration", "1500ms", "--fault-every", "4s", "--after", "2s")
			if len(r.Faults) != tc.faults || r.Operations.OK == 0 {
				t.Fatalf("%d faults, %+v operations", len(r.Faults), r.Operations)
			}
			for i, f := range r.Faults {
				t.Logf("%s %d: %s, unavailable %v", tc.fault, i+1, f.Server, time.Duration(f.UnavailableNS).Round(time.Millisecond))
				if f.UnavailableNS <= 0 {
					t.Errorf("%s %d of %s: no unavailability window", tc.fault, i+1, f.Server)
				}
			}
			t.Logf("operations %+v", r.Operations)
		})
	}
}

// drillReport is the part of cellctl drill's JSON report the tests read.
type drillReport struct {
	Start      time.Time // the recorder's start: the faults' times count from it
	Operations struct{ OK, Failed, Unknown int }
	Faults     []struct {
		Server        string
		FaultNS       int64 `json:"fault_ns"`
		UnavailableNS int64 `json:"unavailable_ns"`
	}
	Phases []struct {
		Name    string
		Seconds float64 `json:"seconds"`
		OpsPS   float64 `json:"ops_per_sec"`
		ErrPS   float64 `json:"errors_per_sec"`
	}
	Lost            []json.RawMessage
	Linearizability struct{ Verdict string }
	ClusterChecked  bool     `json:"cluster_checked"`
	ClusterCheck    []string `json:"cluster_check"`
	Errors          []string
}

// runDrill runs cellctl drill with args and -w json, and fails the test
// unless the drill passed: nothing lost, the history linearizable, the
// cluster check clean. Porcupine's visualisation and the history are left
// in the test's temporary directory.
func runDrill(t *testing.T, args ...string) drillReport {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args = append([]string{"drill", "--artifacts", dir, "--history", dir + "/history.json", "-w", "json", "--quiet"}, args...)
	cmd := exec.CommandContext(ctx, bins.cellctl, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("cellctl drill: %v", err)
	}
	t.Logf("cellctl drill took %v", time.Since(start).Round(time.Millisecond))
	var r drillReport
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
		t.Fatalf("cellctl drill: %v (exit %v)\nstdout:\n%s\nstderr:\n%s", jerr, err, out.String(), errb.String())
	}
	if err != nil {
		t.Errorf("cellctl drill exited with %v: %s", err, errb.String())
	}
	if len(r.Lost) != 0 {
		t.Errorf("lost writes: %s", r.Lost)
	}
	if r.Linearizability.Verdict != "linearizable" {
		t.Errorf("history %s (artifacts in %s)", r.Linearizability.Verdict, dir)
	}
	if !r.ClusterChecked || len(r.ClusterCheck) != 0 || len(r.Errors) != 0 {
		t.Errorf("cluster check ran %v: %q; errors %q", r.ClusterChecked, r.ClusterCheck, r.Errors)
	}
	return r
}
