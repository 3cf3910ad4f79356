package test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/regiontable"
)

// startEmbeddedCluster starts n cellservers that each embed one member of a
// common etcd cluster (--etcd-initial-cluster, member names the server
// IDs), all at once: a member is ready only once a majority of them runs.
// It returns once every server serves; they stop when the test ends. A
// start that lost a port race to another process is retried.
func startEmbeddedCluster(t *testing.T, n int, o serverOptions) []*cellServer {
	t.Helper()
	for attempt := 1; ; attempt++ {
		srv := make([]*cellServer, n)
		var members []string
		for i := range srv {
			srv[i] = newServer(t, o)
			members = append(members, srv[i].id+"=http://"+srv[i].peer)
		}
		var err error
		for _, s := range srv {
			s.args = append(s.args, "--etcd-initial-cluster", strings.Join(members, ","))
			if err = s.spawn(); err != nil {
				t.Fatalf("start %s: %v", s.id, err)
			}
			t.Cleanup(func() { s.stop(t) })
		}
		for _, s := range srv {
			if err = s.waitReady(t, 60*time.Second); err != nil {
				err = fmt.Errorf("%s: %w\ncellserver output:\n%s", s.id, err, s.out.String())
				break
			}
		}
		if err == nil {
			return srv
		}
		for _, s := range srv {
			s.kill()
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("embedded etcd cluster did not start: %v", err)
		}
		t.Logf("cluster start %d lost a port race, retrying: %v", attempt, err)
	}
}

// The "no single point of failure": three servers each embed a
// member of one etcd cluster and replicate their regions three ways. After
// the first of them (the one a single embedded etcd would live in) is
// killed with SIGKILL, a new client and cellctl, given the three etcd
// endpoints as a new user would, still read every key and write new ones;
// the killed server restarts on the same addresses, its member rejoins and
// serves the same table.
func TestEmbeddedEtcdClusterSurvivesKill(t *testing.T) {
	srv := startEmbeddedCluster(t, 3, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "4MiB",
		flags: []string{"--replicas", "3", "--raft-heartbeat-timeout", "300ms"}})
	var eps []string
	for _, s := range srv {
		eps = append(eps, "http://"+s.etcd)
	}
	store, err := regiontable.OpenEtcd(eps, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ml, err := store.Client().MemberList(ctx)
	cancel()
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("etcd member list %+v, %v; want the three servers' members", ml, err)
	}
	for _, m := range ml.Members {
		if !slices.ContainsFunc(srv, func(s *cellServer) bool { return s.id == m.Name }) {
			t.Fatalf("etcd member %q is none of the servers", m.Name)
		}
	}
	waitReplicated(t, store, 3)
	withEndpoints := func(cfg *client.Config) { cfg.Endpoints = eps }
	c := srv[1].newClient(t, withEndpoints)
	const keys = 200
	for i := range keys {
		mustPut(t, c, fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i))
	}

	start := time.Now()
	srv[0].kill()
	t.Logf("killed %s (etcd member and server)", srv[0].id)
	fresh := srv[1].newClient(t, withEndpoints)
	for i := range keys {
		mustGet(t, fresh, fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i))
	}
	t.Logf("a new client read %d keys %v after the kill", keys, time.Since(start).Round(time.Millisecond))
	mustPut(t, fresh, "after-kill", "yes")
	mustGet(t, c, "after-kill", "yes")
	ctl := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCellctl(t, append([]string{"--endpoints", strings.Join(eps, ",")}, args...)...)
		if code != 0 {
			t.Fatalf("cellctl %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	ctl("put", "cellctl-after-kill", "yes")
	if out := ctl("get", "k0007"); !strings.Contains(out, "v7") {
		t.Fatalf("cellctl get k0007: %q", out)
	}
	if out := ctl("members"); strings.Contains(out, srv[0].id) {
		t.Logf("members still list %s (its lease has not run out yet)", srv[0].id)
	}

	srv[0].restart(t)
	for _, s := range srv {
		code, out, errOut := s.cellctl(t, "get", "cellctl-after-kill")
		if code != 0 || !strings.Contains(out, "yes") {
			t.Fatalf("cellctl get through %s's etcd member: exit %d: %q %s", s.id, code, out, errOut)
		}
	}
	mustGet(t, srv[0].newClient(t, nil), "after-kill", "yes")
}
