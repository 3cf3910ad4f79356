package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cellstore/cell/wire"
)

// Tests against the shared in-process cluster (cluster_helper_test.go).

// dump node root dumps the tree's root node, as dump meganode root finds
// the root meganode.
func TestDumpNodeRoot(t *testing.T) {
	code, out, errs := runAt(t, "", "dump", "meganode", "root", "-w", "json")
	var md meganodeDump
	if err := json.Unmarshal([]byte(out), &md); code != 0 || err != nil {
		t.Fatalf("dump meganode root: exit %d, %v, stderr %q", code, err, errs)
	}
	code, out, errs = runAt(t, "", "dump", "node", "root")
	if code != 0 || errs != "" || !strings.HasPrefix(out, "node "+md.Root+" (copy ok)\n") {
		t.Fatalf("dump node root: exit %d, stderr %q, stdout %q; want node %s", code, errs, out, md.Root)
	}
	code, out2, _ := runAt(t, "", "dump", "node", md.Root)
	if code != 0 || out2 != out {
		t.Errorf("dump node %s: exit %d\n%s\nwant\n%s", md.Root, code, out2, out)
	}
}

// bench fails (exit 1, after its figures) when operations failed, and
// says how many; failed preload writes fail it before the run.
func TestBenchFailures(t *testing.T) {
	long := strings.Repeat("k", 300) + "/" // keys too large for 512-byte nodes
	base := []string{"bench", "--clients", "1", "--duration", "200ms", "--warmup", "50ms", "--no-progress", "--key-prefix", long}
	code, out, errs := runAt(t, "", append(base, "--workload", "put", "--keys", "0", "-w", "json")...)
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.Errors == 0 || r.Errors != r.Ops {
		t.Fatalf("put of too-large keys: exit %d, JSON %v (%d errors of %d ops), stderr %q", code, err, r.Errors, r.Ops, errs)
	}
	if want := fmt.Sprintf("cellctl: bench: %d of %d operations failed; first error: ", r.Errors, r.Ops); !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("stderr %q, want one line starting %q", errs, want)
	}
	code, out, errs = runAt(t, "", append(base, "--workload", "get", "--keys", "7")...)
	if code != 1 || out != "" || !strings.HasPrefix(errs, "cellctl: preload: 7 of 7 writes failed; first error: key ") {
		t.Errorf("preload of too-large keys: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runAt(t, "", "bench", "--clients", "1", "--duration", "100ms", "--warmup", "10ms", "--no-progress", "--keys", "20", "--key-prefix", "benchok/")
	if code != 0 {
		t.Errorf("a bench without failures: exit %d, stderr %q", code, errs)
	}
}

func TestPreloadError(t *testing.T) {
	if err := preloadError(5, 5, 0, nil); err != nil {
		t.Errorf("all stored: %v", err)
	}
	err := preloadError(1000, 10, preloadGiveUp, errors.New("boom"))
	if want := "preload: 100 of 1000 writes failed (gave up after 100 failures; 10 stored, 890 not tried); first error: boom"; err == nil || err.Error() != want {
		t.Errorf("gave up: %v\nwant %s", err, want)
	}
}

// put KEY and put KEY - read the value from standard input, byte for
// byte: values too long for a command line go in; values over the
// store's limit are refused before anything is sent.
func TestPutStdin(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 200<<10/16) + "\n" // 200 KiB and a newline
	code, out, errs := runAt(t, big, "put", "stdin/big")
	if code != 0 || out != "OK\n" || errs != "" {
		t.Fatalf("put from stdin: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = runAt(t, "", "get", "stdin/big")
	if code != 0 || out != big+"\n" {
		t.Fatalf("get of the stdin value: exit %d, %d bytes, want %d", code, len(out), len(big)+1)
	}
	code, out, errs = runAt(t, "x y", "put", "stdin/dash", "-")
	if code != 0 || out != "OK\n" {
		t.Fatalf("put KEY -: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, _ = runAt(t, "", "get", "stdin/dash"); out != "x y\n" {
		t.Errorf("put KEY - stored %q (exit %d), want the standard input", out, code)
	}
	code, _, errs = runAt(t, "6b 65\n79\n", "put", "--hex", "00", "-")
	if code != 0 {
		t.Fatalf("put --hex from stdin: exit %d, stderr %q", code, errs)
	}
	if code, out, _ = runAt(t, "", "get", "--hex", "00"); out != "6b6579\n" {
		t.Errorf("put --hex from stdin stored %q (exit %d)", out, code)
	}
	code, out, _ = runAt(t, "", "put", "stdin/empty")
	if code != 0 || out != "OK\n" {
		t.Errorf("put of an empty stdin: exit %d", code)
	}
}

func TestPutValueLimit(t *testing.T) {
	dead := deadAddr(t)
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{strings.Repeat("v", wire.MaxValueSize+1), []string{"put", "k"}, fmt.Sprintf("value of %d bytes on standard input is larger than the store's limit of %d bytes", wire.MaxValueSize+1, wire.MaxValueSize)},
		// Its true size, not the limit's.
		{strings.Repeat("v", 2<<20), []string{"put", "k", "-"}, "value of 2097152 bytes on standard input is larger"},
		{strings.Repeat("ab", wire.MaxValueSize+1), []string{"put", "--hex", "00"}, fmt.Sprintf("value of %d bytes on standard input is larger", wire.MaxValueSize+1)},
		{strings.Repeat("ab", 2*wire.MaxValueSize), []string{"put", "--hex", "00"}, fmt.Sprintf("hexadecimal value of %d characters on standard input is larger", 4*wire.MaxValueSize)},
		{"zz", []string{"put", "--hex", "00"}, "the value on standard input is not hexadecimal"},
	} {
		code, out, errs := runCellctlIn(tc.stdin, append(tc.args, "--endpoints", dead)...)
		if code != 1 || out != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// Every command prints in the four formats: simple, table (bordered),
// json (snake_case keys only) and fields ("name" : value lines).
func TestOutputFormats(t *testing.T) {
	for _, args := range [][]string{{"put", "fmt/a", "1"}, {"put", "fmt/b", "two words"}} {
		if code, _, errs := runAt(t, "", args...); code != 0 {
			t.Fatalf("%q: exit %d, %q", args, code, errs)
		}
	}
	fieldLine := regexp.MustCompile(`^"[^"]+" : (".*"|-?[0-9.e+-]+|true|false|null|\{\}|\[\])$`)
	for _, args := range [][]string{
		{"put", "fmt/c", "3"}, {"get", "fmt/a"}, {"del", "fmt/c"}, {"range", "fmt/", "--prefix"},
		{"status"}, {"members"}, {"regions"}, {"meganodes"}, {"check"},
		{"dump", "node", "root"}, {"dump", "meganode", "root"},
		{"bench", "--clients", "1", "--keys", "10", "--key-prefix", "fmtbench/", "--duration", "50ms", "--warmup", "10ms", "--no-progress"},
	} {
		for _, f := range outputFormats {
			runAt(t, "", "put", "fmt/c", "3") // for del
			code, out, errs := runAt(t, "", append(args, "-w", string(f))...)
			if code != 0 || errs != "" || out == "" {
				t.Errorf("%q -w %s: exit %d, stderr %q, stdout %q", args, f, code, errs, out)
				continue
			}
			switch f {
			case formatTable:
				if args[0] != "dump" && !strings.Contains(out, "+--") {
					t.Errorf("%q -w table: no borders:\n%s", args, out)
				}
			case formatJSON:
				var v any
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Errorf("%q -w json: %v:\n%s", args, err, out)
				}
				if k := upperKey(v); k != "" {
					t.Errorf("%q -w json: key %q is not snake_case", args, k)
				}
			case formatFields:
				for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
					if !fieldLine.MatchString(l) {
						t.Errorf("%q -w fields: line %q", args, l)
						break
					}
				}
			}
		}
	}
	// The key's version is the log index of its put: any positive number.
	code, out, _ := runAt(t, "", "get", "fmt/a", "-w", "table")
	wantTable := regexp.MustCompile(`^\+-------\+-------\+-+\+\n\| KEY   \| VALUE \| VERSION \|\n\+-------\+-------\+-+\+\n\| fmt/a \| 1     \| [1-9][0-9]* +\|\n\+-------\+-------\+-+\+\n$`)
	if code != 0 || !wantTable.MatchString(out) {
		t.Errorf("get -w table:\n%s\nwant\n%s", out, wantTable)
	}
	code, out, _ = runAt(t, "", "get", "fmt/b", "-w", "fields")
	wantFields := regexp.MustCompile(`^"key" : "fmt/b"\n"value" : "two words"\n"version" : [1-9][0-9]*\n$`)
	if code != 0 || !wantFields.MatchString(out) {
		t.Errorf("get -w fields:\n%s\nwant\n%s", out, wantFields)
	}
}

// upperKey returns a key of v's JSON objects with an upper-case letter.
func upperKey(v any) string {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if strings.ToLower(k) != k {
				return k
			}
			if k := upperKey(e); k != "" {
				return k
			}
		}
	case []any:
		for _, e := range v {
			if k := upperKey(e); k != "" {
				return k
			}
		}
	}
	return ""
}

// -w json of a missing key: a JSON error object on stdout, exit 1.
func TestMissingKeyJSON(t *testing.T) {
	for _, cmd := range []string{"get", "del"} {
		code, out, errs := runAt(t, "", cmd, "missing/key", "-w", "json")
		var e map[string]string
		if err := json.Unmarshal([]byte(out), &e); err != nil || code != 1 ||
			e["error"] != "key not found" || e["code"] != "not_found" || e["key"] != "missing/key" || len(e) != 3 {
			t.Errorf("%s -w json of a missing key: exit %d, stdout %q (%v)", cmd, code, out, err)
		}
		if !strings.HasPrefix(errs, "cellctl: key not found") {
			t.Errorf("%s: stderr %q", cmd, errs)
		}
	}
	code, out, _ := runAt(t, "", "get", "--hex", "ff00", "-w", "json")
	if want := "{\n  \"error\": \"key not found\",\n  \"code\": \"not_found\",\n  \"key\": \"ff00\"\n}\n"; code != 1 || out != want {
		t.Errorf("get --hex -w json: exit %d, %q", code, out)
	}
}

// put --if-absent / --if-version and del --if-version: a condition that
// holds applies and -w json shows the new version; one that does not exits
// 1 with "condition failed", the key's current version on stdout with -w
// json, and changes nothing.
func TestConditionalPutDel(t *testing.T) {
	putJSON := func(args ...string) (int, map[string]any, string) {
		code, out, errs := runAt(t, "", append(args, "-w", "json")...)
		var m map[string]any
		_ = json.Unmarshal([]byte(out), &m)
		return code, m, errs
	}
	code, m, errs := putJSON("put", "cond/a", "1", "--if-absent")
	v1, _ := m["version"].(float64)
	if code != 0 || m["ok"] != true || v1 == 0 {
		t.Fatalf("put --if-absent: exit %d, %v, %q", code, m, errs)
	}
	code, m, errs = putJSON("put", "cond/a", "2", "--if-absent")
	if code != 1 || m["code"] != "condition_failed" || m["version"] != v1 || !strings.HasPrefix(errs, "cellctl: condition failed") {
		t.Fatalf("second put --if-absent: exit %d, %v, %q", code, m, errs)
	}
	code, m, _ = putJSON("put", "cond/a", "3", "--if-version", fmt.Sprint(uint64(v1)))
	v2, _ := m["version"].(float64)
	if code != 0 || v2 <= v1 {
		t.Fatalf("put --if-version %v: exit %d, %v", v1, code, m)
	}
	if code, _, errs := runAt(t, "", "del", "cond/a", "--if-version", fmt.Sprint(uint64(v1))); code != 1 || !strings.Contains(errs, fmt.Sprintf("is at version %d", uint64(v2))) {
		t.Fatalf("del --if-version with a stale version: exit %d, %q", code, errs)
	}
	if code, out, _ := runAt(t, "", "get", "cond/a"); code != 0 || out != "3\n" {
		t.Fatalf("after a failed del: exit %d, %q", code, out)
	}
	if code, _, errs := runAt(t, "", "del", "cond/a", "--if-version", fmt.Sprint(uint64(v2))); code != 0 {
		t.Fatalf("del --if-version: exit %d, %q", code, errs)
	}
	if code, _, errs := runAt(t, "", "put", "cond/a", "4", "--if-absent", "--if-version", "0"); code == 0 || !strings.Contains(errs, "choose one") {
		t.Fatalf("both conditions: exit %d, %q", code, errs)
	}
}

// --print-value-only (etcdctl's): get and range print values only.
func TestPrintValueOnly(t *testing.T) {
	for _, args := range [][]string{{"put", "pvo/a", "1"}, {"put", "pvo/b", "x y"}} {
		if code, _, errs := runAt(t, "", args...); code != 0 {
			t.Fatalf("%q: exit %d, %q", args, code, errs)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "pvo/b", "--print-value-only"}, "x y\n"},
		{[]string{"get", "pvo/a", "--print-value-only", "-w", "table"}, "+-------+\n| VALUE |\n+-------+\n| 1     |\n+-------+\n"},
		{[]string{"range", "pvo/", "--prefix", "--print-value-only"}, "1\n\"x y\"\n"},
		{[]string{"range", "pvo/", "--prefix", "--keys-only"}, "pvo/a\npvo/b\n"},
	} {
		if code, out, errs := runAt(t, "", tc.args...); code != 0 || out != tc.want {
			t.Errorf("%q: exit %d, stderr %q, stdout\n%s\nwant\n%s", tc.args, code, errs, out, tc.want)
		}
	}
	if code, _, errs := runAt(t, "", "range", "pvo/", "--prefix", "--print-value-only", "--keys-only"); code != 1 || !strings.Contains(errs, "choose one") {
		t.Errorf("both: exit %d, %q", code, errs)
	}
}
