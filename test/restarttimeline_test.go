package test

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// restartTimeline says where a full-cluster restart's time went: from
// the kill (killedAt) to each container's start, each server's first log
// line after it, its "serving" line, and the lines that say a region has a leader
// again. A drill's unavailability is one number; these are its parts, so
// that a slow run says whether docker, the servers' start or the raft
// elections took the time.
func restartTimeline(t *testing.T, c *composeCluster, killedAt time.Time) string {
	t.Helper()
	starts := map[string]time.Time{}
	for _, s := range c.Cells {
		out, err := exec.Command("docker", "inspect", "-f", "{{.State.StartedAt}}", c.Container(t, s)).Output()
		if err != nil {
			t.Logf("docker inspect %s: %v", s, err)
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(out))); err == nil {
			starts[s] = at
		}
	}
	out, _ := c.composeErr(time.Minute, append([]string{"logs", "--no-color", "--timestamps", "--tail", "3000"}, c.Cells...)...)
	return timelineOf(killedAt, starts, out)
}

// timelineMarks are the log lines restartTimeline times, by a name of
// its own: a region is led once its group elects a server, whether the
// server leads it as it starts or takes it over after an election.
var timelineMarks = []struct{ name, msg string }{
	{"serving", `msg="server: serving"`},
	{"led", `msg="server: region's raft group leads and has applied everything committed"`}, // at start
	{"led", `msg="server: took the region over`},                                            // elected later
}

// timelineOf computes restartTimeline's line from the containers' start
// times and docker-compose logs --timestamps output ("service | time
// text" lines).
func timelineOf(killedAt time.Time, starts map[string]time.Time, logs string) string {
	since := func(at time.Time) time.Duration { return at.Sub(killedAt).Round(10 * time.Millisecond) }
	var started []time.Duration
	for _, at := range starts {
		started = append(started, since(at))
	}
	first := map[string]time.Duration{}
	marks := map[string][]time.Duration{}
	for _, l := range strings.Split(logs, "\n") {
		service, rest, ok := strings.Cut(l, "|")
		if !ok {
			continue
		}
		service = strings.TrimSpace(service)
		// docker-compose prefixes a line with the container's name,
		// project_service_1, or with service_1 when that is long.
		if i := strings.LastIndex(service, "_"); i > 0 {
			service = service[:i]
		}
		service = service[strings.LastIndex(service, "_")+1:]
		stamp, text, _ := strings.Cut(strings.TrimSpace(rest), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || at.Before(killedAt) || at.Before(starts[service]) {
			continue // the crashed process's, or before the restart
		}
		if _, ok := first[service]; !ok {
			first[service] = since(at)
		}
		for _, m := range timelineMarks {
			if strings.Contains(text, m.msg) {
				marks[m.name] = append(marks[m.name], since(at))
			}
		}
	}
	var firsts []time.Duration
	for _, d := range first {
		firsts = append(firsts, d)
	}
	var b strings.Builder
	b.WriteString("since the kill:")
	part := func(name string, ds []time.Duration) {
		if len(ds) == 0 {
			fmt.Fprintf(&b, " %s none;", name)
			return
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		fmt.Fprintf(&b, " %s %d, %v to %v;", name, len(ds), ds[0], ds[len(ds)-1])
	}
	part("containers started", started)
	part("first log lines", firsts)
	part("serving", marks["serving"])
	part("regions led", marks["led"])
	return strings.TrimSuffix(b.String(), ";")
}

func TestTimelineOf(t *testing.T) {
	kill := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	starts := map[string]time.Time{"cell1": kill.Add(1100 * time.Millisecond), "cell2": kill.Add(1300 * time.Millisecond)}
	logs := strings.Join([]string{
		`p_cell1_1  | 2026-12-03T09:59:59.000000000Z time=x level=INFO msg="server: serving"`, // before the kill
		`p_cell1_1  | 2026-12-03T10:00:01.200000000Z time=x level=INFO msg="raft: starting"`,
		`cell2_1  | 2026-12-03T10:00:01.250000000Z time=x level=INFO msg="raft: stopping"`, // before its container's start
		`p_cell2_1  | 2026-12-03T10:00:01.400000000Z time=x level=INFO msg="raft: starting"`,
		`p_cell1_1  | 2026-12-03T10:00:01.500000000Z time=x level=INFO msg="server: serving" server=cell1`,
		`p_cell2_1  | 2026-12-03T10:00:01.900000000Z time=x level=INFO msg="server: serving" server=cell2`,
		`p_cell2_1  | 2026-12-03T10:00:02.500000000Z time=x level=INFO msg="server: region's raft group leads and has applied everything committed" region=2`,
		`p_cell1_1  | 2026-12-03T10:00:03.250000000Z time=x level=WARN msg="server: took the region over (its group elected this server)" region=1`,
		`Attaching to p_cell1_1, p_cell2_1`,
	}, "\n")
	got := timelineOf(kill, starts, logs)
	want := "since the kill: containers started 2, 1.1s to 1.3s; first log lines 2, 1.2s to 1.4s; serving 2, 1.5s to 1.9s; regions led 2, 2.5s to 3.25s"
	if got != want {
		t.Errorf("timeline\n got %s\nwant %s", got, want)
	}
	if got := timelineOf(kill, nil, ""); got != "since the kill: containers started none; first log lines none; serving none; regions led none" {
		t.Errorf("empty timeline: %s", got)
	}
}
