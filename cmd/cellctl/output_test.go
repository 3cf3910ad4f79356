package main

import (
	"bytes"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/wire"
)

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func render(t *testing.T, tables []*table) string {
	t.Helper()
	var b bytes.Buffer
	g := &globals{output: formatSimple, stdout: &b}
	if err := g.print(nil, func() []*table { return tables }); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTableAlignment(t *testing.T) {
	right := render(t, []*table{{title: "T", header: []string{"A", "BB"}, rows: [][]string{{"1", "2"}, {"333", "4"}}, notes: []string{"n"}}})
	if want := "T\n    A  BB\n    1   2\n  333   4\nn\n"; right != want {
		t.Errorf("right-aligned:\n%q\nwant\n%q", right, want)
	}
	left := render(t, []*table{{left: true, header: []string{"KEY", "VALUE"}, rows: [][]string{{"a", "1"}, {"long", "2"}}}})
	if want := "KEY   VALUE\na     1\nlong  2\n"; left != want {
		t.Errorf("left-aligned:\n%q\nwant\n%q", left, want)
	}
	if got := render(t, []*table{{rows: [][]string{{"OK"}}}}); got != "  OK\n" {
		t.Errorf("no header: %q", got)
	}
}

func TestRangeOutput(t *testing.T) {
	pairs := []client.KV{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b c"), Value: []byte{}}, {Key: []byte{0xff}, Value: []byte("x")}}
	f := rangeFlags{limit: 3}
	got := render(t, rangeTables(f, pairs, []byte("d")))
	want := "KEY     VALUE\na       1\n\"b c\"   \"\"\n\"\\xff\"  x\n(--limit 3 reached; more from d)\n"
	if got != want {
		t.Errorf("range table:\n%s\nwant\n%s", got, want)
	}
	f.keysOnly, f.reverse = true, true
	got = render(t, rangeTables(f, pairs[:1], []byte("a")))
	if want := "a\n(--limit 3 reached; more below a: pass it as END)\n"; got != want {
		t.Errorf("keys-only reverse table %q", got)
	}
	res := rangeOutput(rangeFlags{}, pairs, nil)
	js, _ := json.Marshal(res)
	// encoding/json writes the replacement character escaped up to Go
	// 1.26 and as itself from 1.27: the same JSON string either way.
	js = bytes.ReplaceAll(js, []byte(string(utf8.RuneError)), []byte(`\ufffd`))
	if want := `{"pairs":[{"key":"a","value":"1"},{"key":"b c","value":""},{"key":"\ufffd","key_hex":"ff","value":"x"}],"count":3,"more":false}`; string(js) != want {
		t.Errorf("range JSON %s\nwant %s", js, want)
	}
	res = rangeOutput(rangeFlags{b: byteArg{hex: true}, keysOnly: true}, pairs[:1], []byte("b"))
	js, _ = json.Marshal(res)
	if want := `{"pairs":[{"key":"61"}],"count":1,"more":true,"resume":"62"}`; string(js) != want {
		t.Errorf("hex keys-only JSON %s", js)
	}
}

func TestStatusOutput(t *testing.T) {
	s := serverStatus{ID: "s1", RPCAddr: "127.0.0.1:7070", Ping: 120 * time.Microsecond}
	fillStatus(&s, &wire.MetadataReply{
		NodeSize: 1024, MeganodeSize: 64 << 20,
		Hints:   wire.SelectorHints{Workers: 2, Queued: 3, QueueNanos: 1500, ServiceNanos: 4200},
		Regions: []wire.RegionInfo{{ID: 7, Epoch: 3, Size: 1 << 30, Raft: wire.RaftInfo{Role: wire.RoleLeader, Term: 4, LastIndex: 90, Commit: 90, Applied: 88}}},
		Meganodes: []wire.MeganodeStats{
			{Meganode: wire.Meganode{Ptr: blink.MakePtr(7, 0x1000), Height: 3, Range: wire.KeyRange{MinInf: true, Max: []byte("m")}}, UsedNodes: 10, Capacity: 100},
			{Meganode: wire.Meganode{Ptr: blink.MakePtr(7, 0x4001000), Height: 4, Range: wire.KeyRange{Min: []byte("m"), MaxInf: true}}, UsedNodes: 30, Capacity: 100},
		},
	})
	if s.Height != 4 || s.UsedNodes != 40 || s.Capacity != 200 || s.Fill != 0.2 || len(s.Meganodes) != 2 || s.Meganodes[0].Min != "-inf" || s.Meganodes[1].Max != "+inf" {
		t.Fatalf("status %+v", s)
	}
	s.Metrics = &serverMetrics{Ops: map[string]uint64{"get": 5, "put": 2}, Errors: 1, OneSided: 9}
	down := serverStatus{ID: "s2", RPCAddr: "127.0.0.1:7080", Error: "server 127.0.0.1:7080: connection refused"}
	out := render(t, statusTables(statusResult{Root: "7:0x1000", RootServer: "s1", Levels: 1, Meganodes: 2, Servers: []serverStatus{s, down}}))
	for _, want := range []string{
		"Servers (root meganode 7:0x1000 on s1, 1 level, 2 meganodes)",
		"SERVER  ADDRESS  REGION  EPOCH  SIZE  RAFT  TERM  APPLIED  LAG  MEGANODES  FILL  HEIGHT  WORKERS  QUEUED  QUEUE  SERVICE  PING",
		"s1  127.0.0.1:7070  7  3  1GiB  leader  4  88  2  2  20.0%  4  2  3  1.5µs  4.2µs  120.0µs",
		"s2  127.0.0.1:7080  -",
		"error: s2: server 127.0.0.1:7080: connection refused",
		"SERVER  GET  PUT  ERRORS  ONE-SIDED", "s1  5  2  1  9",
	} {
		if !strings.Contains(squeeze(out), want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}

// squeeze trims lines and makes every run of two or more spaces two
// spaces, so that tests do not depend on column widths.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = columnGap.ReplaceAllString(strings.TrimSpace(l), "  ")
	}
	return strings.Join(lines, "\n")
}

var columnGap = regexp.MustCompile(` {2,}`)

func TestBenchOutput(t *testing.T) {
	r := benchResult{
		Params: benchParams{Mode: "adaptive", Provider: "shm", Clients: 2, InFlight: 4, Conns: 1, Duration: time.Second,
			Warmup: time.Second, Keys: 100, Cache: "off", Workload: "get", ValueSize: 64, ServerPID: 1},
		Ops: 12345, Errors: 1, Throughput: 12345, latencies: latencies{Mean: 30 * time.Microsecond, P50: 20 * time.Microsecond, P99: 2 * time.Millisecond, P999: 9 * time.Millisecond, Max: 40 * time.Millisecond},
		ServerHops: 1, ClientHops: 3, ServerSide: 0.25, Retries: map[string]uint64{"torn": 2, "crc": 0, "invalid": 1},
		ServerCPUPerOp: ptr(1.5), ClientCPUPerOp: 10, M: 3.5, FirstError: "cell: unavailable:\nboom",
		ByOp: map[string]opResult{"get": {Ops: 12000, latencies: latencies{P50: 19 * time.Microsecond, P99: time.Millisecond, Mean: 25 * time.Microsecond}},
			"put": {Ops: 345, Errors: 1, latencies: latencies{P50: 40 * time.Microsecond, P99: 3 * time.Millisecond, Mean: 50 * time.Microsecond}}},
		PhaseResults: []benchWindow{{Name: "base", End: 1, Ops: 12345, Throughput: 12345, latencies: latencies{P50: 20 * time.Microsecond}, ServerSide: 0.25}},
	}
	out := squeeze(render(t, benchTables(r)))
	for _, want := range []string{
		"bench: get workload, 2 clients × 4 in flight (1 conn each), provider shm, cache off, 100 keys",
		"MODE  OPS  THROUGHPUT  MEAN  P50  P99  P99.9  MAX  SERVER-SIDE  ERRORS  SERVER CPU/OP  CLIENT CPU/OP",
		"adaptive  12345  12.3K/s  30.0µs  20.0µs  2.00ms  9.00ms  40.00ms  25.0%  1  1.50µs  10.00µs",
		"retries: invalid=1 torn=2", "m=3.50", "first error: cell: unavailable: boom",
		"get: 12000 ops, mean 25.0µs, p50 19.0µs, p99 1.00ms, p99.9 0.0µs, max 0.0µs, 0 errors", "put: 345 ops, mean 50.0µs, p50 40.0µs, p99 3.00ms, p99.9 0.0µs, max 0.0µs, 1 error",
		"Phases", "base  0.00s  1.00s  12345  12.3K/s  20.0µs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	if fmtFraction(-1) != "-" || fmtOpsRate(1.5e6) != "1.50M/s" || fmtOpsRate(999) != "999/s" || fmtRetries(nil) != "none" {
		t.Error("formatting helpers")
	}
	var b bytes.Buffer
	g := &globals{output: formatJSON, stdout: &b}
	if err := g.print(r, nil); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"throughput", "p50_ns", "p99_ns", "server_side_fraction", "retries", "server_cpu_us_per_op", "params", "by_op", "phases", "start_unix_ns"} {
		if _, ok := back[k]; !ok {
			t.Errorf("bench JSON lacks %q: %s", k, b.String())
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestFmtBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 1000: "1000B", 1024: "1KiB", 1536: "1.5KiB", 64 << 20: "64MiB", 1 << 30: "1GiB", 3 << 40: "3TiB", 5 << 50: "5120TiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	if h.quantile(0.5) != 0 || h.mean() != 0 {
		t.Fatal("empty histogram")
	}
	for i := 1; i <= 10000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {0.001, 10 * time.Microsecond}, {1, 10000 * time.Microsecond}} {
		got := h.quantile(tc.q)
		if d := float64(got-tc.want) / float64(tc.want); d < -0.016 || d > 0.016 {
			t.Errorf("quantile(%v) = %v, want %v ± 1.6%%", tc.q, got, tc.want)
		}
	}
	if h.mean() != 5000500*time.Nanosecond || h.n != 10000 {
		t.Errorf("mean %v, n %d", h.mean(), h.n)
	}
	var small histogram
	small.record(5)
	small.record(-3) // a clock step: counted as 0
	if small.quantile(1) != 5 || small.quantile(0.5) != 0 {
		t.Errorf("exact buckets: %v %v", small.quantile(1), small.quantile(0.5))
	}
	h.merge(&small)
	if h.n != 10002 {
		t.Errorf("merged n %d", h.n)
	}
	// Buckets are contiguous and cover every value.
	prevHi := int64(-1)
	for i := range histBuckets {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 || hi < lo || bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d: [%d, %d] after %d", i, lo, hi, prevHi)
		}
		prevHi = hi
		if hi == 1<<63-1 {
			break
		}
	}
	if prevHi != 1<<63-1 {
		t.Errorf("buckets end at %d", prevHi)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP cell_server_ops_total x
# TYPE cell_server_ops_total counter
cell_server_ops_total{op="get",status="OK"} 10
cell_server_ops_total{op="get",status="NotFound"} 2
cell_server_ops_total{op="put",status="OK"} 3
cell_server_ops_total{op="put",status="KeyTooLarge"} 1
cell_server_region_bytes{backing="file",region="7"} 3.3554432e+07
cell_server_onesided_reads_total{provider="tcp"} 42
cell_server_other{a="x,y",b="q\"z"} 1 1700000000
go_goroutines 12
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.Region != 7 || m.Backing != "file" || m.Ops["get"] != 12 || m.Ops["put"] != 3 || m.Errors != 1 || m.OneSided != 42 {
		t.Errorf("metrics %+v", m)
	}
	if _, err := parseMetrics(strings.NewReader("go_goroutines 1\n")); err == nil {
		t.Error("metrics of another program accepted")
	}
	name, labels, v, ok := parseSample(`x{a="1,2",b="c\"d"} 2.5`)
	if !ok || name != "x" || labels["a"] != "1,2" || labels["b"] != `c"d` || v != 2.5 {
		t.Errorf("parseSample: %q %v %v %v", name, labels, v, ok)
	}
	for _, bad := range []string{"x", "x{a=\"1\"", "x{} nan?", "x{a=\"1\"}"} {
		if _, _, _, ok := parseSample(bad); ok {
			t.Errorf("parseSample(%q) accepted", bad)
		}
	}
}

func TestDumpText(t *testing.T) {
	d := meganodeDump{Meganode: "1:0x1000", Level: 0, Height: 2, Root: "1:0x1400", InUse: 3, Capacity: 64,
		Header:  nodeDump{Ptr: "1:0x1000", Check: "ok (meganode header)", Description: "meganode header: ..."},
		Levels:  []levelDump{{Level: 1, Nodes: []nodeDump{{Ptr: "1:0x1400", Check: "ok", Description: "inner\n  [0] child"}}}},
		Skipped: 1,
	}
	got := meganodeText(d, false)
	want := "meganode 1:0x1000: level 0, local height 2, root 1:0x1400, nodes 3/64\n" +
		"node 1:0x1000 (copy ok (meganode header))\n  meganode header: ...\n\n" +
		"level 1: 1 node\nnode 1:0x1400 (copy ok)\n  inner\n    [0] child\n\n" +
		"(1 lower level not printed: --levels)\n"
	if got != want {
		t.Errorf("meganode text:\n%s\nwant\n%s", got, want)
	}
	// A node that is not a node decodes as such, without panicking.
	nd := describeNode(blink.MakePtr(1, 8), make([]byte, 1024), true)
	if nd.Check == "ok" || nd.Annotated == "" || len(nd.Hex) != 2048 {
		t.Errorf("zero node: %+v", nd.Check)
	}
}

func TestBorderedTable(t *testing.T) {
	var b bytes.Buffer
	g := &globals{output: formatTable, stdout: &b}
	tables := []*table{
		{title: "T", header: []string{"A", "BB"}, rows: [][]string{{"1", "2"}, {"333", "µ"}}, notes: []string{"n"}},
		{left: true, header: []string{"KEY"}},
	}
	if err := g.print(nil, func() []*table { return tables }); err != nil {
		t.Fatal(err)
	}
	want := "T\n+-----+----+\n| A   | BB |\n+-----+----+\n|   1 |  2 |\n| 333 |  µ |\n+-----+----+\nn\n\n+-----+\n| KEY |\n+-----+\n"
	if b.String() != want {
		t.Errorf("bordered:\n%s\nwant\n%s", b.String(), want)
	}
}

func TestFieldsOutput(t *testing.T) {
	v := struct {
		Key    string            `json:"key"`
		N      int               `json:"n"`
		OK     bool              `json:"ok"`
		List   []map[string]any  `json:"list"`
		Empty  []int             `json:"empty"`
		Nested struct{ A *int }  `json:"nested"`
		M      map[string]string `json:"m"`
	}{Key: "a \"b\"\n", N: 3, OK: true, List: []map[string]any{{"x": 1.5}, {"y": "z"}}, M: map[string]string{}}
	var b bytes.Buffer
	g := &globals{output: formatFields, stdout: &b}
	if err := g.printFields(v); err != nil {
		t.Fatal(err)
	}
	want := `"key" : "a \"b\"\n"` + "\n" + `"n" : 3` + "\n" + `"ok" : true` + "\n" + `"list[0].x" : 1.5` + "\n" +
		`"list[1].y" : "z"` + "\n" + `"empty" : null` + "\n" + `"nested.A" : null` + "\n" + `"m" : {}` + "\n"
	if b.String() != want {
		t.Errorf("fields:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	g.output = formatTable
	if err := g.printLine(kvResult{Key: "k", OK: true}, "OK"); err != nil {
		t.Fatal(err)
	}
	if want := "+-----+------+\n| KEY | OK   |\n+-----+------+\n| k   | true |\n+-----+------+\n"; b.String() != want {
		t.Errorf("printLine table:\n%s\nwant\n%s", b.String(), want)
	}
	for _, f := range []string{"simple", "TABLE", "json", "fields"} {
		var of outputFormat
		if err := of.Set(f); err != nil {
			t.Errorf("-w %s: %v", f, err)
		}
	}
}
