package main

import (
	"strings"
	"testing"
	"time"
)

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 levels"}, {1, "1 level"}, {2, "2 levels"}} {
		if got := plural(tc.n, "level"); got != tc.want {
			t.Errorf("plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := plural(uint64(1), "op"); got != "1 op" {
		t.Errorf("plural(uint64 1) = %q", got)
	}
}

// A replica that has not heard its leader's commit index since it started
// has a lag that is not known: "?", not 0.
func TestFmtLag(t *testing.T) {
	for _, tc := range []struct {
		applied, commit uint64
		want            string
	}{
		{0, 0, "?"},       // restarted, nothing restored or heard yet
		{500, 0, "?"},     // restored a snapshot at 500, not heard the leader
		{500, 300, "?"},   // a commit index from before it restored
		{500, 500, "0"},   // caught up
		{500, 520, "20"},  // 20 committed entries to apply
		{1, 1, "0"},       // a new group's first entry
		{1000, 1001, "1"}, //
	} {
		if got := fmtLag(tc.applied, tc.commit); got != tc.want {
			t.Errorf("fmtLag(applied %d, commit %d) = %q, want %q", tc.applied, tc.commit, got, tc.want)
		}
	}
}

// check's line says how many regions' replicas were compared, and when
// not all were, that --wait waits for them; singular and plural right.
func TestCheckSummary(t *testing.T) {
	for _, tc := range []struct {
		r    checkResult
		want string
	}{
		{checkResult{OK: true, Servers: 1, Meganodes: 1, Levels: 1}, "ok: 1 server, 1 meganode, 1 level, no region replicated"},
		{checkResult{OK: true, Servers: 3, Meganodes: 14, Levels: 2, Replicated: 3, ReplicasCompared: 3}, "ok: 3 servers, 14 meganodes, 2 levels, replicas of 3 regions equal"},
		{checkResult{OK: true, Servers: 3, Meganodes: 5, Levels: 2, Replicated: 1, ReplicasCompared: 1}, "ok: 3 servers, 5 meganodes, 2 levels, replicas of 1 region equal"},
		{checkResult{OK: true, Servers: 2, Meganodes: 14, Levels: 2, Replicated: 3, ReplicasCompared: 0},
			"ok: 2 servers, 14 meganodes, 2 levels, replicas of 0 of 3 regions equal; 3 not compared: a replica is down, restarting or catching up (--wait waits for them)"},
	} {
		if got := tc.r.summary(); got != tc.want {
			t.Errorf("summary of %+v:\n%s\nwant\n%s", tc.r, got, tc.want)
		}
		if whole := tc.r.ReplicasCompared == tc.r.Replicated; tc.r.whole() != whole {
			t.Errorf("whole() of %+v = %v", tc.r, !whole)
		}
	}
}

// members --wait N returns as soon as N servers are members; it waits
// through an etcd that does not answer yet, and fails after
// --wait-timeout, saying what it saw, when the members do not become N.
func TestMembersWait(t *testing.T) {
	code, out, errs := runAt(t, "", "members", "--wait", "1")
	if code != 0 || !strings.HasPrefix(out, "MEMBER ") || strings.Count(out, "\n") != 2 {
		t.Fatalf("members --wait 1 with one server: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	start := time.Now()
	code, out, errs = runAt(t, "", "members", "--wait", "2", "--wait-timeout", "700ms")
	if el := time.Since(start); code != 1 || out != "" || !strings.Contains(errs, "members --wait 2: 1 member after 700ms (") || el < 700*time.Millisecond {
		t.Errorf("members --wait 2 with one server: exit %d after %v, stdout %q, stderr %q", code, el, out, errs)
	}
	dead := deadAddr(t)
	start = time.Now()
	code, _, errs = runCellctl("members", "--wait", "1", "--wait-timeout", "700ms", "--endpoints", dead)
	if el := time.Since(start); code != 1 || !strings.Contains(errs, "members --wait 1: after 700ms: etcd at "+dead+": connection refused") || el < 700*time.Millisecond {
		t.Errorf("members --wait 1 with no etcd: exit %d after %v, stderr %q; want it to wait and then say why", code, el, errs)
	}
	if code, _, errs = runCellctl("members", "--wait", "-1", "--endpoints", dead); code != 1 || !strings.Contains(errs, "--wait -1") {
		t.Errorf("members --wait -1: exit %d, stderr %q", code, errs)
	}
}

// check --wait on a cluster that is whole returns at once; the shared
// cluster's one server replicates nothing.
func TestCheckWaitWhole(t *testing.T) {
	start := time.Now()
	code, out, errs := runAt(t, "", "check", "--wait")
	if code != 0 || !strings.HasPrefix(out, "ok: 1 server, ") || !strings.Contains(out, ", no region replicated") {
		t.Fatalf("check --wait: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("check --wait on a whole cluster took %v", el)
	}
}
