package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cellstore/cell/regiontable/embedded"
)

// startBenchEtcd starts an embedded etcd on free loopback ports with its
// data in a temporary directory, stopped at cleanup.
func startBenchEtcd(t *testing.T) *embedded.Etcd {
	t.Helper()
	var lastErr error
	for range 3 { // a port may be taken between deadAddr and etcd's listen
		e, err := embedded.Start(embedded.Options{Dir: t.TempDir(), ClientAddr: deadAddr(t), PeerAddr: deadAddr(t), Logger: quietLogger})
		if err == nil {
			t.Cleanup(func() { _ = e.Close() })
			return e
		}
		lastErr = err
	}
	t.Fatalf("start embedded etcd: %v", lastErr)
	return nil
}

// etcdBenchRun runs cellctl bench --target etcd with args and decodes its
// JSON result.
func etcdBenchRun(t *testing.T, ep string, args ...string) benchResult {
	t.Helper()
	base := []string{"bench", "--target", "etcd", "--etcd-bench-endpoints", ep, "--clients", "3", "--in-flight", "2",
		"--duration", "300ms", "--warmup", "100ms", "--value-size", "40", "--no-progress", "-w", "json"}
	code, out, errs := runCellctl(append(base, args...)...)
	if code != 0 {
		t.Fatalf("%q: exit %d, stderr %q", args, code, errs)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%q: JSON %v:\n%s", args, err, out)
	}
	if r.Params.Target != targetEtcd || r.Ops == 0 || r.Throughput <= 0 || r.Errors != 0 || r.FirstError != "" {
		t.Fatalf("%q: target %q, %d ops, %.0f/s, %d errors (%s)", args, r.Params.Target, r.Ops, r.Throughput, r.Errors, r.FirstError)
	}
	return r
}

// countKeys counts the keys under prefix.
func countKeys(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// The etcd target runs every workload against etcd's KV API: the preload
// stores exactly --keys keys under --etcd-prefix-bench, puts update only
// keys of the keyspace, and gets and searches find them.
func TestBenchEtcdTarget(t *testing.T) {
	e := startBenchEtcd(t)
	ep := strings.Join(e.Endpoints(), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	r := etcdBenchRun(t, ep, "--workload", "put", "--keys", "300")
	if n := countKeys(t, cli, "/cellbench/"); n != 300 {
		t.Errorf("after put: %d keys under /cellbench/, want 300", n)
	}
	if o, ok := r.ByOp["put"]; !ok || o.Ops != r.Ops || r.P50 <= 0 || r.ServerSide != -1 {
		t.Errorf("put: by op %+v, p50 %v, server-side %v", r.ByOp, r.P50, r.ServerSide)
	}
	if r.Params.Mode != "" || r.Params.Provider != "" || r.Params.EtcdPrefix != "/cellbench/" || len(r.Params.EtcdEndpoints) != 1 {
		t.Errorf("params %+v", r.Params)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/cellbench/bench/000000000299")
	if err != nil || len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != 40 {
		t.Errorf("the last preloaded key: %v, %+v", err, resp)
	}

	for _, w := range []string{"get", "search"} {
		r = etcdBenchRun(t, ep, "--workload", w, "--keys", "0", "--keyspace", "300")
		if r.NotFound != 0 || r.ByOp[w].Ops != r.Ops {
			t.Errorf("%s of stored keys: %d not found, by op %+v", w, r.NotFound, r.ByOp)
		}
		// Keys 300..599 were never stored: not found, not errors.
		r = etcdBenchRun(t, ep, "--workload", w, "--keys", "0", "--keyspace", "600")
		if r.NotFound == 0 || r.NotFound >= r.Ops {
			t.Errorf("%s over twice the stored keys: %d of %d not found", w, r.NotFound, r.Ops)
		}
	}
	r = etcdBenchRun(t, ep, "--workload", "ycsb-a", "--keys", "0", "--keyspace", "300")
	if r.ByOp["get"].Ops == 0 || r.ByOp["put"].Ops == 0 || r.NotFound != 0 || r.Params.Distribution != "zipfian" {
		t.Errorf("ycsb-a: by op %+v, %d not found, %s", r.ByOp, r.NotFound, r.Params.Distribution)
	}
	if n := countKeys(t, cli, "/cellbench/"); n != 300 {
		t.Errorf("after the workloads: %d keys, want 300", n)
	}

	// Another prefix: its own keys, the others untouched.
	etcdBenchRun(t, ep, "--workload", "put", "--keys", "50", "--keyspace", "50", "--etcd-prefix-bench", "/other/")
	if n, m := countKeys(t, cli, "/other/"), countKeys(t, cli, "/cellbench/"); n != 50 || m != 300 {
		t.Errorf("--etcd-prefix-bench /other/: %d keys there, %d under /cellbench/", n, m)
	}

	// The table marks the target.
	code, out, errs := runCellctl("bench", "--target", "etcd", "--etcd-bench-endpoints", ep, "--workload", "get", "--keys", "0",
		"--keyspace", "300", "--clients", "1", "--duration", "100ms", "--warmup", "0s", "--no-progress")
	if code != 0 {
		t.Fatalf("table: exit %d, %s", code, errs)
	}
	out = squeeze(out)
	for _, want := range []string{"bench, target etcd at " + ep + " (keys under /cellbench/): get workload, 1 client × 1 in flight", "TARGET  OPS  THROUGHPUT", "\netcd  "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "meganode hops") {
		t.Errorf("etcd table with Cell's notes:\n%s", out)
	}
}

// An unreachable etcd target is one clear error within --dial-timeout.
func TestBenchEtcdUnreachable(t *testing.T) {
	addr := deadAddr(t)
	start := time.Now()
	code, out, errs := runCellctl("bench", "--target", "etcd", "--etcd-bench-endpoints", addr, "--dial-timeout", "300ms",
		"--workload", "put", "--no-progress")
	if code != 1 || out != "" || !strings.HasPrefix(errs, "cellctl: etcd at "+addr) || strings.Count(errs, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
