package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
)

// TestStatusShowsFabric: status and members name each server's libfabric
// endpoints from its member entry.
func TestStatusShowsFabric(t *testing.T) {
	m := regiontable.Member{ID: "s1", RPCAddr: "h:1", Fabric: regiontable.FormatFabricEndpoints([]regiontable.FabricEndpoint{{Provider: "verbs;ofi_rxm", Addr: "fi_sockaddr_in://10.0.0.1:5"}})}
	res := statusResult{Servers: []serverStatus{{ID: m.ID, RPCAddr: m.RPCAddr, Fabric: fabricEndpoints(m)}, {ID: "s2", RPCAddr: "h:2"}}}
	var b bytes.Buffer
	for _, tb := range statusTables(res) {
		if err := tb.write(&b); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(b.String(), "FABRIC: s1 reads over verbs;ofi_rxm at fi_sockaddr_in://10.0.0.1:5") || strings.Contains(b.String(), "FABRIC: s2") {
		t.Fatalf("status:\n%s", b.String())
	}
	b.Reset()
	if err := membersTable(membersOutput([]regiontable.Member{m}, nil)).write(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "fabric: s1 reads over verbs;ofi_rxm at fi_sockaddr_in://10.0.0.1:5") {
		t.Fatalf("members:\n%s", b.String())
	}
}

// TestTransportParams: bench transport's flags are checked, fabric only in
// builds that have it.
func TestTransportParams(t *testing.T) {
	p := transportParams{ReadSize: 1024, RPCSize: 128, Duration: time.Second, Repeat: 1, FabricProvider: "shm"}
	if err := p.parse("tcp, shm,tcp", "1,16", "read,rpc,mix"); err != nil || len(p.Providers) != 2 || len(p.InFlight) != 2 || len(p.Workloads) != 3 || p.FabricProvider != "" {
		t.Fatalf("parse: %+v, %v", p, err)
	}
	for _, c := range []struct{ providers, inflight, workloads string }{
		{"udp", "1", "read"}, {"tcp", "0", "read"}, {"tcp", "x", "read"}, {"tcp", "1", "scan"},
	} {
		q := transportParams{ReadSize: 1024, Duration: time.Second, Repeat: 1}
		if err := q.parse(c.providers, c.inflight, c.workloads); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	q := transportParams{ReadSize: 1024, Duration: time.Second, Repeat: 1, FabricProvider: "shm"}
	err := q.parse("fabric,fabric/tcp,fabric/shm", "1", "read")
	if rdma.FabricBuilt != (err == nil) {
		t.Errorf("--providers fabric in a build with fabric %v: %v", rdma.FabricBuilt, err)
	}
	if err == nil && strings.Join(q.Providers, " ") != "fabric/shm fabric/tcp" {
		t.Errorf("fabric providers %q", q.Providers)
	}
	if err := q.parse("tcp/x", "1", "read"); err == nil {
		t.Error("tcp/x accepted")
	}
	for _, bad := range []transportParams{{ReadSize: 12, Duration: time.Second, Repeat: 1}, {ReadSize: 8, Repeat: 1}, {ReadSize: 8, Duration: time.Second}} {
		if err := bad.parse("tcp", "1", "read"); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestTransportTables: every round is printed, and the medians with
// several rounds.
func TestTransportTables(t *testing.T) {
	res := transportResult{Params: transportParams{ReadSize: 1024, RPCSize: 128, Duration: time.Second, Repeat: 2}, Region: 1, RegionSize: 1 << 30, Host: "s1", HostRPC: "h:1", ServerIdle: 3 * time.Millisecond}
	for round := 1; round <= 2; round++ {
		res.Rows = append(res.Rows,
			transportRow{Round: round, Workload: "read", Provider: "fabric/shm", InFlight: 16, Ops: 100, OpsPerSec: float64(1000 * round), P50: 3 * time.Microsecond, P99: 9 * time.Microsecond, ServerCPUPerOp: 250, ClientCPUPerOp: 2000},
			transportRow{Round: round, Workload: "rpc", InFlight: 16, Ops: 100, OpsPerSec: 500, ServerCPUPerOp: -1, Errors: 1, FirstError: "boom"})
	}
	var b bytes.Buffer
	for _, tb := range transportTables(res) {
		if err := tb.write(&b); err != nil {
			t.Fatal(err)
		}
	}
	out := b.String()
	for _, want := range []string{"fabric/shm", "0.25µs", "3.00µs", "median ops/s over the rounds", "2000", "first error: round 1 rpc -: boom", "server CPU idle: 3ms per second"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
