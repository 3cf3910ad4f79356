package test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// The drills of issue 9 against the docker-compose cluster (five
// cellservers, --replicas 3, three etcd members), each under a YCSB-style
// load of gets, puts and deletes run by cellctl drill from the host, each
// ending with every acknowledged write read back, porcupine's verdict
// "linearizable" and a clean cellctl check (runDrill fails the test
// otherwise):
//
//   - kill the leader (of the region holding the most drill keys);
//   - kill 2 of the 5 servers, one after the other;
//   - partition the leader from the others (docker network disconnect);
//   - pause the leader for 3 s, eight times its read lease;
//   - restart the whole cluster (every cellserver killed at once, then
//     started);
//   - kill a server and keep it dead until its replicas are replaced
//     (CELL_DEAD_AFTER=6s here), then bring it back.
//
// Each drill logs its figures (unavailability per fault, ops/s before,
// during and after) and, with CELL_DRILL_FIGURES set to a file name,
// appends them there (.ci/run prints that file). The CI schedule is short:
// one fault per drill, a few seconds of load around it. Skipped without
// docker, docker-compose, an engine, or a host that reaches the
// containers' addresses.
func TestComposeDrills(t *testing.T) {
	c := composeUp(t, "CELL_DEAD_AFTER=6s", "CELL_BALANCE_INTERVAL=5s", "CELL_RAFT_HEARTBEAT_TIMEOUT=300ms")
	if !c.HostReachesServers {
		t.Skipf("this process does not reach the containers at %s.2N: cellctl drill needs to", c.Net)
	}
	store := c.Table(t)
	waitReplicated(t, store, 3)
	services := strings.Join(c.Cells, ",")
	common := []string{"--endpoints", strings.Join(c.EtcdEndpoints, ","),
		"--keys", "300", "--clients", "6", "--workload", "get=50,put=40,delete=10", "--op-timeout", "3s"}
	compose := append([]string{"--compose-project", c.Project, "--compose-services", services}, common...)
	drillFigures := func(name string, r drillReport) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "drill %-28s ops ok %d failed %d unknown %d; lost %d; %s;", name, r.Operations.OK, r.Operations.Failed, r.Operations.Unknown, len(r.Lost), r.Linearizability.Verdict)
		for i, f := range r.Faults {
			fmt.Fprintf(&b, " fault %d on %s: unavailable %v;", i+1, f.Server, time.Duration(f.UnavailableNS).Round(time.Millisecond))
		}
		for _, p := range r.Phases {
			// The phase's length too: a heal that took as long as the gap
			// to the next fault leaves a "between" of milliseconds.
			fmt.Fprintf(&b, " %s %.2fs %.0f ok/s %.1f err/s;", p.Name, p.Seconds, p.OpsPS, p.ErrPS)
		}
		t.Log(b.String())
		appendFigures(b.String())
	}
	schedule := []string{"--fault-at", "3s", "--fault-duration", "4s", "--after", "5s"}

	t.Run("kill-leader", func(t *testing.T) {
		r := runDrill(t, append(append(compose, schedule...), "--fault", "kill", "--target", "leader")...)
		drillFigures("kill leader", r)
	})
	t.Run("kill-two-of-five", func(t *testing.T) {
		// Two kills, the second while the first victim is still down:
		// regions with both replicas there wait for a heal; nothing is lost.
		r := runDrill(t, append(compose, "--fault", "kill", "--target", "leader", "--faults", "2",
			"--fault-at", "3s", "--fault-duration", "5s", "--fault-every", "6s", "--after", "5s")...)
		drillFigures("kill 2 of 5 in turn", r)
	})
	t.Run("partition-leader", func(t *testing.T) {
		r := runDrill(t, append(append(compose, schedule...), "--fault", "partition", "--target", "leader")...)
		drillFigures("partition leader", r)
	})
	t.Run("pause-leader", func(t *testing.T) {
		// 3 s against a lease of 3/4 of the 300 ms heartbeat timeout.
		r := runDrill(t, append(compose, "--fault", "pause", "--target", "leader", "--fault-at", "3s", "--fault-duration", "3s", "--after", "5s")...)
		drillFigures("pause leader 3s", r)
	})
	t.Run("full-restart", func(t *testing.T) {
		ids := make([]string, len(c.Cells))
		for i, s := range c.Cells {
			ids[i] = c.Container(t, s)
		}
		// Every server crashes at once, and all start again together:
		// one docker start of them all starts them one after the
		// other (2.2 s for the five on a quiet machine), which the
		// drill would count against the store.
		all := strings.Join(ids, " ")
		restart := "docker kill " + all + " >/dev/null || exit 1; sleep 1; pids=; " +
			"for id in " + all + "; do docker start $id >/dev/null & pids=\"$pids $!\"; done; " +
			"for p in $pids; do wait $p || exit 1; done"
		r := runDrill(t, append(common, "--fault-cmd", restart, "--target", c.Cells[0],
			"--fault-at", "3s", "--fault-duration", "1s", "--after", "8s", "--recovery-timeout", "90s")...)
		drillFigures("full-cluster restart", r)
		if len(r.Faults) == 1 {
			line := restartTimeline(t, c, r.Start.Add(time.Duration(r.Faults[0].FaultNS)))
			t.Logf("full-cluster restart, %s", line)
			appendFigures("drill full-cluster restart, " + line)
		}
		waitReplicated(t, store, 3)
	})
	t.Run("dead-until-replaced", func(t *testing.T) {
		victim := c.Cells[len(c.Cells)-1]
		var (
			mu       sync.Mutex
			replaced time.Duration
		)
		watch, stopWatch := context.WithCancel(context.Background())
		defer stopWatch()
		go func() {
			// From the first moment the victim is not a member to the
			// moment no region lists it.
			var gone time.Time
			for watch.Err() == nil {
				ctx, cancel := context.WithTimeout(watch, 5*time.Second)
				st, err := store.Load(ctx)
				cancel()
				if err == nil {
					member := false
					for _, m := range st.Members {
						member = member || m.ID == victim
					}
					if !member && gone.IsZero() {
						gone = time.Now()
					}
					if !gone.IsZero() && !listsServer(st.Regions, victim) {
						mu.Lock()
						replaced = time.Since(gone)
						mu.Unlock()
						return
					}
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		// Down for 30 s: its membership lease (5 s) runs out, then
		// CELL_DEAD_AFTER (6 s), then its replicas are rebuilt elsewhere.
		r := runDrill(t, append(compose, "--fault", "kill", "--target", victim,
			"--fault-at", "3s", "--fault-duration", "30s", "--after", "5s")...)
		drillFigures("dead until re-replicated", r)
		mu.Lock()
		took := replaced
		mu.Unlock()
		if took == 0 {
			t.Fatalf("%s's replicas were not all replaced while it was down", victim)
		}
		t.Logf("%s's replicas replaced %v after it left the members", victim, took.Round(100*time.Millisecond))
		appendFigures(fmt.Sprintf("drill dead until re-replicated: replicas replaced %v after %s left the members (dead-after 6s)", took.Round(100*time.Millisecond), victim))
		// Back: it drops its stale replicas; every region has 3 again.
		waitReplicated(t, store, 3)
	})
}

// listsServer reports whether any region lists id as host or replica.
func listsServer(rs []regiontable.Region, id string) bool {
	for _, r := range rs {
		if holdsAny(r, id) {
			return true
		}
	}
	return false
}

// appendFigures appends a line to the file CELL_DRILL_FIGURES names, if
// any (.ci/run prints it after the tests).
func appendFigures(line string) {
	path := os.Getenv("CELL_DRILL_FIGURES")
	if path == "" {
		return
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}
