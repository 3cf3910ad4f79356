package test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
)

// The docker-compose cluster as a user runs it (docs/cluster.md): make
// images, docker-compose up -d, then cellctl in the client container, and
// from the host through the published etcd ports. Every region is
// replicated three ways; SIGKILL of the container hosting the root
// meganode's region loses nothing, a new cellctl reads every key and
// writes; the container starts again on its address and volume and
// becomes healthy. Skipped without docker, docker-compose or an engine.
func TestCompose(t *testing.T) {
	c := composeUp(t)
	start := time.Now()

	status := c.Cellctl(t, "status")
	for _, s := range c.Cells {
		if !strings.Contains(status, c.Net+".2"+strings.TrimPrefix(s, "cell")+":7070") {
			t.Fatalf("cellctl status in the client container does not list %s:\n%s", s, status)
		}
	}
	c.Cellctl(t, "put", "compose/hello", "world")
	if out := c.Cellctl(t, "get", "compose/hello"); strings.TrimSpace(out) != "world" {
		t.Fatalf("cellctl get compose/hello in the client container: %q", out)
	}

	// From the host: cellctl finds the cluster through a published etcd
	// port; reading and writing also needs the servers' addresses.
	code, out, errOut := runCellctl(t, "--endpoints", strings.Join(c.EtcdEndpoints, ","), "members")
	if code != 0 {
		t.Fatalf("cellctl members from the host: exit %d: %s%s", code, out, errOut)
	}
	for _, s := range c.Cells {
		if !strings.Contains(out, s+"/") {
			t.Fatalf("cellctl members from the host does not list %s:\n%s", s, out)
		}
	}
	const keys = 100
	if c.HostReachesServers {
		if code, out, errOut := runCellctl(t, "--endpoints", c.EtcdEndpoints[1], "status"); code != 0 {
			t.Fatalf("cellctl status from the host: exit %d: %s%s", code, out, errOut)
		}
		cl := newComposeClient(t, c)
		for i := range keys {
			mustPut(t, cl, fmt.Sprintf("compose/k%03d", i), fmt.Sprintf("v%d", i))
		}
	} else {
		t.Logf("this process does not reach the servers at %s.2N: host clients skipped, the client container only", c.Net)
	}

	// Lose the root meganode's host: its replicas take the region over.
	table := c.Table(t)
	waitReplicated(t, table, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	root, err := table.Root(ctx)
	var region = root.Region()
	e, err2 := table.Region(ctx, region)
	cancel()
	if err != nil || err2 != nil {
		t.Fatalf("root %v (%v), its region (%v)", root, err, err2)
	}
	victim := e.Host
	killed := time.Now()
	c.Kill(t, victim)
	t.Logf("killed %s, host of the root's region %d", victim, region)
	if out := c.Cellctl(t, "get", "compose/hello"); strings.TrimSpace(out) != "world" {
		t.Fatalf("cellctl get compose/hello after killing %s: %q", victim, out)
	}
	t.Logf("first read after the kill answered in %v", time.Since(killed).Round(time.Millisecond))
	c.Cellctl(t, "put", "compose/after-kill", "yes")
	if c.HostReachesServers {
		cl := newComposeClient(t, c)
		for i := range keys {
			mustGet(t, cl, fmt.Sprintf("compose/k%03d", i), fmt.Sprintf("v%d", i))
		}
	}
	if out := c.Cellctl(t, "range", "compose/", "--prefix"); strings.Count(out, "compose/") < 2 {
		t.Fatalf("cellctl range compose/ --prefix after the kill:\n%s", out)
	}

	// Back on the same address and volume: a follower of its old region.
	c.Start(t, victim)
	waitFor(t, func() bool {
		code, out, _ := c.Exec(t, c.Client, "cellctl", "members")
		return code == 0 && strings.Contains(out, victim)
	}, victim+" among the members again", 60*time.Second)
	waitReplicated(t, table, 3)
	if out := c.Cellctl(t, "check"); !strings.HasPrefix(out, "ok") {
		t.Fatalf("cellctl check after the restart:\n%s", out)
	}
	t.Logf("checks took %v after the cluster was up", time.Since(start).Round(100*time.Millisecond))
}

// newComposeClient is a client on the host, through the published etcd
// ports; closed when the test ends.
func newComposeClient(t *testing.T, c *composeCluster) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Endpoints: c.EtcdEndpoints,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("client.New(%v): %v", c.EtcdEndpoints, err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}
