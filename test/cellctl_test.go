package test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// statusJSON is cellctl status -w json, decoded.
type statusJSON struct {
	Root    string
	Servers []struct {
		ID        string
		RPCAddr   string `json:"rpc_addr"`
		Regions   []struct{ ID uint32 }
		Meganodes []struct {
			Ptr    string
			Level  int
			Height int
		}
		Hints  struct{ Workers int }
		Height int
		Fill   float64
		Error  string
	}
}

func (s *cellServer) statusJSON(t *testing.T) statusJSON {
	t.Helper()
	code, out, errs := s.cellctl(t, "status", "-w", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Servers) != 1 {
		t.Fatalf("status: exit %d, %v, stderr %q, stdout %q", code, err, errs, out)
	}
	return st
}

// cellctl end to end against a running cellserver: put, get, del, range,
// status, dump and bench through --endpoints, their outputs (table and
// JSON) and exit codes, and errors as one line with exit status 1.
func TestCellctl(t *testing.T) {
	srv := startServer(t, serverOptions{cores: 1})
	run := func(args ...string) (string, string) {
		t.Helper()
		code, out, errs := srv.cellctl(t, args...)
		if code != 0 || errs != "" {
			t.Fatalf("cellctl %q: exit %d, stderr %q, stdout %q", args, code, errs, out)
		}
		return out, errs
	}
	fails := func(want string, args ...string) {
		t.Helper()
		code, out, errs := srv.cellctl(t, args...)
		if code != 1 || out != "" || !strings.HasPrefix(errs, "cellctl: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, want) {
			t.Fatalf("cellctl %q: exit %d, stdout %q, stderr %q; want exit 1 and one line with %q", args, code, out, errs, want)
		}
	}
	expect := func(got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("output %q, want %q", got, want)
		}
	}

	// put, get, del.
	out, _ := run("put", "fruit/apple", "red")
	expect(out, "OK\n")
	out, _ = run("get", "fruit/apple")
	expect(out, "red\n")
	run("put", "fruit/banana", "yellow")
	run("put", "fruit/cherry", "dark red") // a space in the value
	run("put", "veg/kale", "green")
	out, _ = run("get", "fruit/cherry")
	expect(out, "dark red\n")
	out, _ = run("get", "fruit/apple", "-w", "json")
	var kv struct{ Key, Value string }
	if err := json.Unmarshal([]byte(out), &kv); err != nil || kv.Key != "fruit/apple" || kv.Value != "red" {
		t.Fatalf("get JSON %q: %v", out, err)
	}
	fails(`key not found: "fruit/durian"`, "get", "fruit/durian")
	out, _ = run("put", "--hex", "00ff", "0x0102")
	expect(out, "OK\n")
	out, _ = run("get", "--hex", "00ff")
	expect(out, "0102\n")
	out, _ = run("get", "--hex", "00ff", "-w", "json")
	// The key's version is its put's log index: any positive number.
	if !regexp.MustCompile(`^\{\n  "key": "00ff",\n  "value": "0102",\n  "version": [1-9][0-9]*\n\}\n$`).MatchString(out) {
		t.Fatalf("get --hex -w json: %q", out)
	}
	out, _ = run("del", "--hex", "00ff")
	expect(out, "OK\n")
	fails("key not found: 00ff", "get", "--hex", "00ff")
	fails("key not found: 00ff", "del", "--hex", "00ff")

	// range.
	out, _ = run("range", "fruit/", "--prefix")
	want := "KEY           VALUE\nfruit/apple   red\nfruit/banana  yellow\nfruit/cherry  \"dark red\"\n"
	expect(out, want)
	out, _ = run("range", "fruit/b", "veg/zzz", "--keys-only")
	expect(out, "fruit/banana\nfruit/cherry\nveg/kale\n")
	out, _ = run("range", "", "--reverse", "--limit", "2", "--keys-only")
	expect(out, "veg/kale\nfruit/cherry\n(--limit 2 reached; more below fruit/cherry: pass it as END)\n")
	out, _ = run("range", "fruit/", "--prefix", "--limit", "2", "-w", "json")
	var rr struct {
		Pairs []struct {
			Key, Value string
			Version    uint64
		}
		Count  int
		More   bool
		Resume string
	}
	if err := json.Unmarshal([]byte(out), &rr); err != nil || rr.Count != 2 || !rr.More || rr.Resume != "fruit/cherry" ||
		rr.Pairs[1].Key != "fruit/banana" || rr.Pairs[1].Value != "yellow" || rr.Pairs[1].Version == 0 {
		t.Fatalf("range JSON %q: %v", out, err)
	}
	out, _ = run("range", "nothing/", "--prefix")
	expect(out, "KEY  VALUE\n")

	// del.
	out, _ = run("del", "veg/kale")
	expect(out, "OK\n")
	fails(`key not found: "veg/kale"`, "get", "veg/kale")
	fails(`key not found: "veg/kale"`, "del", "veg/kale")

	// Bad input: typed errors on one line.
	fails("key too large", "put", strings.Repeat("k", 129), "v")
	fails("empty key", "put", "", "v")
	fails("not hexadecimal", "get", "--hex", "xyz")

	// status, with and without the metrics.
	out, _ = run("status", "--metrics", srv.metrics)
	for _, want := range []string{"Servers (root meganode 1:0x", "on " + srv.id + ", 1 level, 1 meganode)", srv.id, srv.rpc, "MEGANODES", "Operations answered", "PUT", "cellctl meganodes"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	out, _ = run("status", "-w", "json")
	var st struct {
		Root    string
		Servers []struct {
			ID      string
			RPCAddr string `json:"rpc_addr"`
			Regions []struct {
				ID   uint32
				Raft struct {
					Role          string
					Term, Applied uint64
				}
			}
			Meganodes []struct {
				Ptr    string
				Height int
			}
			Hints  struct{ Workers int }
			Height int
			Fill   float64
			Error  string
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Servers) != 1 {
		t.Fatalf("status JSON %q: %v", out, err)
	}
	s := st.Servers[0]
	if s.RPCAddr != srv.rpc || s.Error != "" || len(s.Regions) != 1 || len(s.Meganodes) != 1 || s.Hints.Workers != 1 ||
		s.Height < 1 || s.Fill <= 0 || s.Meganodes[0].Ptr != st.Root {
		t.Fatalf("status %+v", st)
	}
	// The server leads its region's raft group and applied what it was
	// written (the puts above, the region's and the root's records).
	if r := s.Regions[0].Raft; r.Role != "leader" || r.Term < 1 || r.Applied < 4 {
		t.Fatalf("status: region's raft %+v", r)
	}

	// dump: the root meganode, then its local root node.
	out, _ = run("dump", "meganode", "root")
	if !strings.HasPrefix(out, "meganode "+st.Root+": level 0, local height ") || !strings.Contains(out, "(copy ok (meganode header))") ||
		!strings.Contains(out, `"fruit/apple" -> extent`) {
		t.Fatalf("dump meganode root:\n%s", out)
	}
	m := regexp.MustCompile(`root (\d+:0x[0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no local root in %q", out)
	}
	out, _ = run("dump", "node", m[1], "--hex")
	for _, want := range []string{"node " + m[1] + " (copy ok)", "head version", "tail version", "right link"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump node --hex lacks %q:\n%s", want, out)
		}
	}
	out, _ = run("dump", "meganode", st.Root, "-w", "json")
	var md struct {
		Meganode string
		Height   int
		Levels   []struct {
			Level int
			Nodes []struct{ Ptr, Check string }
		}
	}
	if err := json.Unmarshal([]byte(out), &md); err != nil || md.Meganode != st.Root || len(md.Levels) != md.Height || md.Levels[len(md.Levels)-1].Level != 0 {
		t.Fatalf("dump meganode JSON: %v\n%s", err, out)
	}
	for _, l := range md.Levels {
		for _, n := range l.Nodes {
			if n.Check != "ok" {
				t.Errorf("node %s at level %d: copy %s", n.Ptr, l.Level, n.Check)
			}
		}
	}
	fails("not a meganode header", "dump", "meganode", m[1])
	fails("out of bounds", "dump", "node", fmt.Sprintf("%d:0x%x", s.Regions[0].ID, 1<<40-8))
	fails("not in the region table", "dump", "node", "4242:0x1000")

	// bench: a short run of every workload, JSON, with the server's CPU.
	for _, wl := range []string{"put", "get", "search", "mixed", "ycsb-a", "ycsb-b", "ycsb-c"} {
		out, _ = run("bench", "--workload", wl, "--keys", "300", "--duration", "300ms", "--warmup", "100ms", "--clients", "2",
			"--in-flight", "2", "--mode", "ratio=50", "--cache", "off", "--no-progress", "--server-pid", fmt.Sprint(srv.pid()), "-w", "json")
		var br struct {
			Ops        uint64
			Errors     uint64
			NotFound   uint64 `json:"not_found"`
			Throughput float64
			P50        int64    `json:"p50_ns"`
			P99        int64    `json:"p99_ns"`
			ServerSide float64  `json:"server_side_fraction"`
			ServerCPU  *float64 `json:"server_cpu_seconds"`
			Retries    map[string]uint64
		}
		if err := json.Unmarshal([]byte(out), &br); err != nil {
			t.Fatalf("bench JSON: %v\n%s", err, out)
		}
		if br.Ops == 0 || br.Errors != 0 || br.NotFound != 0 || br.Throughput <= 0 || br.P50 <= 0 || br.P99 < br.P50 || br.ServerCPU == nil || *br.ServerCPU < 0 || br.Retries == nil {
			t.Errorf("bench %s: %s", wl, out)
		}
		if wl != "put" && (br.ServerSide < 0.2 || br.ServerSide > 0.8) {
			t.Errorf("bench %s at ratio=50: server-side fraction %v", wl, br.ServerSide)
		}
	}
	// Phases and intervals: exact figures of consecutive parts of the
	// measured window, adding up to the whole.
	out, _ = run("bench", "--workload", "ycsb-b", "--keys", "0", "--keyspace", "300", "--phases", "a=200ms,b=200ms", "--interval", "100ms",
		"--warmup", "0s", "--no-progress", "-w", "json")
	var wr struct {
		Ops    uint64
		ByOp   map[string]struct{ Ops uint64 } `json:"by_op"`
		Phases []struct {
			Name string
			Ops  uint64
		}
		Intervals []struct {
			Ops uint64
			P50 int64 `json:"p50_ns"`
		}
	}
	if err := json.Unmarshal([]byte(out), &wr); err != nil {
		t.Fatalf("bench JSON: %v\n%s", err, out)
	}
	sum := func(ops ...uint64) (n uint64) {
		for _, o := range ops {
			n += o
		}
		return n
	}
	var phaseOps, intervalOps []uint64
	for _, p := range wr.Phases {
		phaseOps = append(phaseOps, p.Ops)
	}
	for _, iv := range wr.Intervals {
		intervalOps = append(intervalOps, iv.Ops)
	}
	if len(wr.Phases) != 2 || wr.Phases[0].Name != "a" || len(wr.Intervals) != 4 || wr.Ops == 0 ||
		sum(phaseOps...) != wr.Ops || sum(intervalOps...) != wr.Ops || wr.ByOp["get"].Ops+wr.ByOp["put"].Ops != wr.Ops {
		t.Errorf("bench --phases --interval: %s", out)
	}
	out, _ = run("bench", "--workload", "get", "--keys", "0", "--keyspace", "300", "--duration", "200ms", "--warmup", "0s", "--no-progress")
	for _, want := range []string{"MODE", "THROUGHPUT", "P50", "P99", "SERVER-SIDE", "adaptive", "retries:"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench table lacks %q:\n%s", want, out)
		}
	}
}

// The cluster commands against a server whose tiny meganodes split into a
// tree of two levels or more: members and regions from the region table,
// meganodes in the tree's order with the root marked, check passing (the
// server's OpCheck and the cluster checks), and a cluster-wide status.
func TestCellctlCluster(t *testing.T) {
	srv := startServer(t, serverOptions{cores: 2, meganodeSize: "128KiB"})
	bulkLoad(t, srv, "ctl/", 6000)
	run := func(args ...string) string {
		t.Helper()
		code, out, errs := srv.cellctl(t, args...)
		if code != 0 || errs != "" {
			t.Fatalf("cellctl %q: exit %d, stderr %q, stdout %q", args, code, errs, out)
		}
		return out
	}
	contains := func(cmd, out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s output lacks %q:\n%s", cmd, w, out)
			}
		}
	}

	contains("members", run("members"), "MEMBER", srv.id, srv.rpc, srv.rdma)
	var members []struct {
		ID      string
		RPCAddr string `json:"rpc_addr"`
	}
	if err := json.Unmarshal([]byte(run("members", "-w", "json")), &members); err != nil || len(members) != 1 || members[0].ID != srv.id || members[0].RPCAddr != srv.rpc {
		t.Fatalf("members JSON %+v: %v", members, err)
	}

	contains("regions", run("regions"), "REGION", "data", srv.id, "yes")
	var regions []struct {
		ID   uint32
		Host string
		Live bool
	}
	if err := json.Unmarshal([]byte(run("regions", "-w", "json")), &regions); err != nil || len(regions) != 1 || regions[0].Host != srv.id || !regions[0].Live {
		t.Fatalf("regions JSON %+v: %v", regions, err)
	}

	var mn struct {
		Root      string
		Levels    int
		Meganodes []struct {
			Ptr, Host, Right, Min, Max string
			Level                      int
			Root                       bool
			Split                      string
		}
	}
	if err := json.Unmarshal([]byte(run("meganodes", "-w", "json")), &mn); err != nil {
		t.Fatal(err)
	}
	if mn.Levels < 2 || len(mn.Meganodes) < 3 {
		t.Fatalf("meganodes: %d levels, %d meganodes; want a tree of 2 levels or more", mn.Levels, len(mn.Meganodes))
	}
	top := mn.Meganodes[0]
	if !top.Root || top.Ptr != mn.Root || top.Level != mn.Levels-1 || top.Min != "-inf" || top.Max != "+inf" || top.Right != "nil" {
		t.Fatalf("first meganode %+v, root %s", top, mn.Root)
	}
	for i, m := range mn.Meganodes {
		if m.Host != srv.id || (m.Root != (i == 0)) {
			t.Errorf("meganode %d: %+v", i, m)
		}
		if i > 0 && m.Level > mn.Meganodes[i-1].Level {
			t.Errorf("meganode %d at level %d after level %d", i, m.Level, mn.Meganodes[i-1].Level)
		}
	}
	contains("meganodes", run("meganodes"), fmt.Sprintf("Meganodes (root %s, %d levels, %d meganodes", mn.Root, mn.Levels, len(mn.Meganodes)), "RIGHT", "root")

	out := run("check")
	if want := fmt.Sprintf("ok: 1 server, %d meganodes, %d levels, no region replicated\n", len(mn.Meganodes), mn.Levels); out != want {
		// Splits may still have been running: the counts can differ.
		if !strings.HasPrefix(out, "ok: 1 server, ") {
			t.Fatalf("check: %q, want %q", out, want)
		}
	}
	var ck struct {
		OK         bool
		Servers    int
		Levels     int
		Violations []string
	}
	if err := json.Unmarshal([]byte(run("check", "-w", "json")), &ck); err != nil || !ck.OK || ck.Servers != 1 || ck.Levels < 2 || len(ck.Violations) != 0 {
		t.Fatalf("check JSON %+v: %v", ck, err)
	}

	out = run("status")
	contains("status", out, "Servers (root meganode "+mn.Root+" on "+srv.id+", ", " levels, ", srv.rpc)
	var st struct {
		Root       string
		RootServer string `json:"root_server"`
		Levels     int
		Meganodes  int
		Servers    []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(run("status", "-w", "json")), &st); err != nil || st.RootServer != srv.id || st.Levels < 2 ||
		st.Meganodes < 3 || len(st.Servers) != 1 || st.Servers[0].ID != srv.id {
		t.Fatalf("status JSON %+v: %v", st, err)
	}
}
