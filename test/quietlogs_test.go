package test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// A healthy server's log says what happened at INFO and below; WARN and
// ERROR are for what an operator should look at. An operator who finds
// WARN and ERROR lines at every start learns to skip them, and then
// misses the real ones. These tests run what the README runs, healthy,
// and fail on any WARN or ERROR line, and on any line that is not one of
// slog's (a stray print, a panic).

// unhealthyLines returns the lines of a server's output that a healthy
// run must not have.
func unhealthyLines(out string) []string {
	var bad []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		if !strings.HasPrefix(l, "time=") || strings.Contains(l, " level=WARN ") || strings.Contains(l, " level=ERROR ") {
			bad = append(bad, l)
		}
	}
	return bad
}

// checkQuiet fails the test with every unhealthy line of each server's
// output (up to the byte offsets in upTo, when given).
func checkQuiet(t *testing.T, what string, servers []*cellServer, upTo []int) {
	t.Helper()
	for i, s := range servers {
		out := s.out.String()
		if upTo != nil {
			out = out[:upTo[i]]
		}
		lines := strings.Count(out, "\n")
		if bad := unhealthyLines(out); len(bad) > 0 {
			t.Errorf("%s: server %s logged %d of %d lines at WARN or ERROR, or not through slog:\n%s",
				what, s.id, len(bad), lines, strings.Join(bad, "\n"))
		} else {
			t.Logf("%s: server %s: %d lines, none at WARN or ERROR", what, s.id, lines)
		}
	}
}

// The quick start: one server with its embedded etcd starts, takes writes
// and reads, and stops cleanly, without a WARN or ERROR line.
func TestQuietLogsSingleServer(t *testing.T) {
	srv := startServer(t, serverOptions{cores: 1})
	c := srv.newClient(t, nil)
	for i := range 200 {
		mustPut(t, c, fmt.Sprintf("quiet/%04d", i), "value")
	}
	mustGet(t, c, "quiet/0100", "value")
	if code, out, errs := srv.cellctl(t, "check"); code != 0 {
		t.Fatalf("cellctl check: exit %d\n%s%s", code, out, errs)
	}
	srv.stop(t)
	if !strings.Contains(srv.out.String(), `msg="server: stopped cleanly"`) {
		t.Fatalf("the server did not log its clean stop:\n%s", srv.out.String())
	}
	checkQuiet(t, "start, writes, check, stop", []*cellServer{srv}, nil)
}

// The README's "Many servers": three servers started together, the first
// embedding etcd and the others joining it, every region replicated three
// ways; writes enough to split meganodes onto the other servers; every
// replica added, caught up and checked equal. No WARN or ERROR line on
// any server until the first is stopped (a peer stopping is, from the
// others' side, a peer gone: raft's errors about it are right).
func TestQuietLogsThreeServers(t *testing.T) {
	flags := []string{"--replicas", "3"}
	first := newServer(t, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "256KiB", flags: flags})
	servers := []*cellServer{first}
	for range 2 {
		servers = append(servers, newServer(t, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "256KiB",
			flags: flags, etcdEndpoint: first.etcd}))
	}
	for _, s := range servers {
		if err := s.spawn(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.stop(t) })
	}
	for _, s := range servers {
		if err := s.waitReady(t, 60*time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", s.id, err, s.out.String())
		}
	}

	c := first.newClient(t, nil)
	value := strings.Repeat("v", 200)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 1500 {
				mustPut(t, c, fmt.Sprintf("quiet/%d/%05d", w, i), value)
			}
		})
	}
	wg.Wait()
	mustGet(t, c, "quiet/1/01499", value)

	store, err := regiontable.OpenEtcd([]string{first.etcd}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rs := waitReplicated(t, store, 3)
	if len(rs) < 2 {
		t.Fatalf("the writes made %d regions, want meganodes split onto other servers: %+v", len(rs), rs)
	}
	if code, out, errs := first.cellctl(t, "check", "--wait"); code != 0 || !strings.Contains(out, fmt.Sprintf("replicas of %d regions equal", len(rs))) {
		t.Fatalf("cellctl check: exit %d\n%s%s", code, out, errs)
	}
	upTo := make([]int, len(servers))
	for i, s := range servers {
		upTo[i] = len(s.out.String())
	}
	checkQuiet(t, "start, writes, splits, replication, check", servers, upTo)
}
