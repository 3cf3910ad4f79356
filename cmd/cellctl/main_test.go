package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/buildinfo"
)

func runCellctl(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// runCellctlIn runs cellctl with stdin as its standard input.
func runCellctlIn(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = runIO(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestErrorsAreOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"nosuch"},
		{"sim", "table2", "-w", "yaml"},
		{"sim", "table2", "--max-cores", "x"},
		{"sim", "spike", "--cores", "-1"},
		{"sim", "table2", "--ratio-step", "0.0001", "--min-cores", "3", "--max-cores", "2"},
		{"sim", "spike", "extra-arg"},
		{"sim", "bogus"},
		{"members", "extra-arg"},
		{"check", "--attempts", "0"},
		{"meganodes", "--endpoints", ""},
	} {
		code, out, errs := runCellctl(args...)
		if code == 0 || out != "" {
			t.Errorf("%q: exit %d, stdout %q; want failure and nothing on stdout", args, code, out)
		}
		if !strings.HasPrefix(errs, "cellctl: ") || strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "\n") {
			t.Errorf("%q: stderr %q, want one line starting with cellctl:", args, errs)
		}
	}
}

func TestGlobalFlags(t *testing.T) {
	t.Setenv("CELL_ENDPOINTS", "")
	root := newRootCommand(&bytes.Buffer{}, &bytes.Buffer{})
	if f := root.PersistentFlags().Lookup("endpoints"); f == nil || f.DefValue != "[127.0.0.1:2379]" {
		t.Errorf("--endpoints flag %+v, want default 127.0.0.1:2379", f)
	}
	t.Setenv("CELL_ENDPOINTS", "etcd1:2379,etcd2:2379")
	if f := newRootCommand(&bytes.Buffer{}, &bytes.Buffer{}).PersistentFlags().Lookup("endpoints"); f == nil || f.DefValue != "[etcd1:2379,etcd2:2379]" {
		t.Errorf("--endpoints flag %+v with CELL_ENDPOINTS set, want default etcd1:2379,etcd2:2379", f)
	}
	if f := root.PersistentFlags().ShorthandLookup("w"); f == nil || f.Name != "write-out" || f.DefValue != "simple" {
		t.Errorf("-w flag %+v, want --write-out defaulting to simple", f)
	}
	if f := root.PersistentFlags().Lookup("etcd-prefix"); f == nil || f.DefValue != "/cell" {
		t.Errorf("--etcd-prefix flag %+v, want default /cell", f)
	}
	g := &globals{endpoints: []string{" a:1", "b:2 "}, etcdPrefix: "/other"}
	if eps, err := g.etcdEndpoints(); err != nil || strings.Join(eps, ",") != "a:1,b:2" {
		t.Errorf("endpoints %q, %v", eps, err)
	}
	if cfg, err := g.clientConfig(); err != nil || cfg.EtcdPrefix != "/other" {
		t.Errorf("client config %+v, %v: want the region table's prefix", cfg, err)
	}
	g.endpoints = []string{"a:1", ""}
	if _, err := g.etcdEndpoints(); err == nil {
		t.Error("an empty endpoint was accepted")
	}
}

var tinyTable2 = []string{"sim", "table2", "--servers", "1", "--clients", "2", "--outstanding", "4",
	"--max-cores", "2", "--warmup", "1ms", "--duration", "2ms", "--ratio-step", "25"}

func TestSimTable2(t *testing.T) {
	code, out, errs := runCellctl(tinyTable2...)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"CORES", "SERVER-ONLY", "CLIENT-ONLY", "BEST FIXED", "CELL/BEST", "RTT 15µs", "m=5"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 5 { // title, header, 2 rows, note
		t.Errorf("%d lines, want 5:\n%s", lines, out)
	}

	code, out, _ = runCellctl(append(tinyTable2, "-w", "json")...)
	var res struct {
		Rows []struct {
			Cores    int `json:"cores"`
			Adaptive struct {
				Mode string  `json:"mode"`
				Rate float64 `json:"rate"`
			} `json:"adaptive"`
			Sweep []json.RawMessage `json:"sweep"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
		t.Fatalf("exit %d, JSON %v:\n%s", code, err, out)
	}
	if len(res.Rows) != 2 || res.Rows[1].Cores != 2 || res.Rows[0].Adaptive.Mode != "adaptive" ||
		res.Rows[0].Adaptive.Rate <= 0 || len(res.Rows[0].Sweep) != 3 {
		t.Errorf("JSON rows %+v", res.Rows)
	}
}

func TestSimSpike(t *testing.T) {
	args := []string{"sim", "spike", "--servers", "1", "--clients", "6", "--extra-clients", "9",
		"--warmup", "1ms", "--before", "2ms", "--length", "2ms", "--after", "2ms", "--bucket", "1ms", "--resolution", "250us"}
	code, out, errs := runCellctl(args...)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"Load spike", "2.5×", "adaptive", "server", "shift after the onset", "Timeline", "SERVER-ONLY P50"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCellctl(append(args, "--write-out", "json")...)
	var res struct {
		Adaptive struct {
			During   struct{ Searches uint64 } `json:"during"`
			Timeline []json.RawMessage         `json:"timeline"`
		} `json:"adaptive"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Adaptive.During.Searches == 0 || len(res.Adaptive.Timeline) != 6 {
		t.Errorf("exit %d, JSON %v, %+v", code, err, res)
	}
}

// Every flag has a CELLCTL_ variable; the command line wins; bad values
// name the variable; CELL_ENDPOINTS stays a fallback of --endpoints.
func TestFlagsFromEnv(t *testing.T) {
	t.Setenv("CELL_ENDPOINTS", "")
	t.Setenv("CELLCTL_WRITE_OUT", "json")
	code, out, errs := runCellctl(tinyTable2...)
	if code != 0 || !strings.HasPrefix(out, "{") {
		t.Errorf("CELLCTL_WRITE_OUT=json: exit %d, stderr %q, stdout %q", code, errs, out)
	}
	t.Setenv("CELLCTL_MAX_CORES", "1") // a command's own flag
	code, out, _ = runCellctl(withoutFlag(tinyTable2, "--max-cores")...)
	var res struct{ Rows []json.RawMessage }
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || len(res.Rows) != 1 {
		t.Errorf("CELLCTL_MAX_CORES=1: exit %d, %v, %d rows", code, err, len(res.Rows))
	}
	t.Setenv("CELLCTL_WRITE_OUT", "yaml")
	code, _, errs = runCellctl(tinyTable2...)
	if code != 1 || !strings.Contains(errs, `$CELLCTL_WRITE_OUT="yaml"`) {
		t.Errorf("CELLCTL_WRITE_OUT=yaml: exit %d, stderr %q", code, errs)
	}
	code, out, errs = runCellctl(append(tinyTable2, "-w", "json")...)
	if code != 0 || !strings.HasPrefix(out, "{") {
		t.Errorf("-w json over CELLCTL_WRITE_OUT=yaml: exit %d, stderr %q", code, errs)
	}
	t.Setenv("CELLCTL_WRITE_OUT", "")
	t.Setenv("CELLCTL_MAX_CORES", "many")
	code, _, errs = runCellctl(withoutFlag(tinyTable2, "--max-cores")...)
	if code != 1 || !strings.Contains(errs, `$CELLCTL_MAX_CORES="many" (--max-cores)`) {
		t.Errorf("CELLCTL_MAX_CORES=many: exit %d, stderr %q", code, errs)
	}

	// --endpoints: CELLCTL_ENDPOINTS, else CELL_ENDPOINTS; the flag wins.
	dead1, dead2, dead3 := deadAddr(t), deadAddr(t), deadAddr(t)
	t.Setenv("CELLCTL_COMMAND_TIMEOUT", "300ms")
	t.Setenv("CELLCTL_DIAL_TIMEOUT", "300ms")
	endpointIn := func(want string, args ...string) {
		t.Helper()
		start := time.Now()
		code, _, errs := runCellctl(append([]string{"get", "k"}, args...)...)
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("get %q: exit %d, stderr %q; want the endpoint %s", args, code, errs, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("get took %v: CELLCTL_COMMAND_TIMEOUT ignored?", d)
		}
	}
	t.Setenv("CELL_ENDPOINTS", dead1)
	endpointIn(dead1)
	t.Setenv("CELLCTL_ENDPOINTS", dead2)
	endpointIn(dead2)
	endpointIn(dead3, "--endpoints", dead3)
	t.Setenv("CELLCTL_COMMAND_TIMEOUT", "soon")
	code, _, errs = runCellctl("get", "k")
	if code != 1 || !strings.Contains(errs, "CELLCTL_COMMAND_TIMEOUT") {
		t.Errorf("CELLCTL_COMMAND_TIMEOUT=soon: exit %d, stderr %q", code, errs)
	}
}

// withoutFlag returns args without flag and its value.
func withoutFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// cellctl version prints the build (package buildinfo), in every format.
func TestVersion(t *testing.T) {
	in := buildinfo.Read(version)
	code, out, errs := runCellctl("version")
	if code != 0 || errs != "" || out != in.String("cellctl") || !strings.HasPrefix(out, "cellctl "+in.Version+"\n") {
		t.Errorf("version: exit %d, stderr %q, stdout %q", code, errs, out)
	}
	code, out, _ = runCellctl("version", "-w", "json")
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got != in {
		t.Errorf("version -w json: exit %d, %v, %+v", code, err, got)
	}
	for _, f := range []string{"table", "fields"} {
		if code, out, _ = runCellctl("version", "-w", f); code != 0 || !strings.Contains(out, "go_version") {
			t.Errorf("version -w %s: exit %d, %q", f, code, out)
		}
	}
}
