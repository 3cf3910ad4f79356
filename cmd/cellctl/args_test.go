package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/client"
)

func TestByteArg(t *testing.T) {
	plain, hx := byteArg{}, byteArg{hex: true}
	for _, tc := range []struct {
		b    byteArg
		in   string
		want []byte
		bad  bool
	}{
		{plain, "hello", []byte("hello"), false},
		{plain, "", []byte{}, false},
		{plain, "a b\x00", []byte("a b\x00"), false},
		{hx, "6b6579", []byte("key"), false},
		{hx, "0x00ff", []byte{0, 0xff}, false},
		{hx, "00 ff", []byte{0, 0xff}, false},
		{hx, "zz", nil, true},
		{hx, "abc", nil, true},
	} {
		got, err := tc.b.parse("key", tc.in)
		if (err != nil) != tc.bad || !tc.bad && !bytes.Equal(got, tc.want) {
			t.Errorf("parse(%q, hex %v) = %q, %v", tc.in, tc.b.hex, got, err)
		}
	}
	for _, tc := range []struct {
		b          byteArg
		in         []byte
		text, cell string
		bin        string
	}{
		{plain, []byte("hello"), "hello", "hello", ""},
		{plain, []byte("a b"), "a b", `"a b"`, ""},
		{plain, []byte{}, "", `""`, ""},
		{plain, []byte{0, 0xff}, "\x00\xff", `"\x00\xff"`, "00ff"},
		{plain, []byte("héllo"), "héllo", "héllo", ""},
		{hx, []byte{0, 0xff}, "00ff", "00ff", ""},
	} {
		if got := tc.b.text(tc.in); got != tc.text {
			t.Errorf("text(%q) = %q, want %q", tc.in, got, tc.text)
		}
		if got := tc.b.cell(tc.in); got != tc.cell {
			t.Errorf("cell(%q) = %q, want %q", tc.in, got, tc.cell)
		}
		if got := tc.b.binary(tc.in); got != tc.bin {
			t.Errorf("binary(%q) = %q, want %q", tc.in, got, tc.bin)
		}
	}
}

func TestKeyError(t *testing.T) {
	b := byteArg{}
	err := b.keyError(fmt.Errorf("wrapped: %w", client.ErrNotFound), []byte("k1"))
	if err == nil || err.Error() != `key not found: "k1"` {
		t.Errorf("not found: %v", err)
	}
	err = byteArg{hex: true}.keyError(client.ErrNotFound, []byte{0xab})
	if err.Error() != "key not found: ab" {
		t.Errorf("hex not found: %v", err)
	}
	if err := b.keyError(context.DeadlineExceeded, nil); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "--command-timeout") {
		t.Errorf("deadline: %v", err)
	}
	other := errors.New("boom")
	if b.keyError(other, nil) != other || b.keyError(nil, nil) != nil {
		t.Error("other errors are passed on as they are")
	}
}

func TestParsePtr(t *testing.T) {
	for in, want := range map[string]blink.Ptr{
		"1:0x1000":      blink.MakePtr(1, 0x1000),
		"7:4096":        blink.MakePtr(7, 4096),
		" 3:0x400 ":     blink.MakePtr(3, 0x400),
		"1099511631872": blink.MakePtr(1, 0x1000),
		"0x10000001000": blink.MakePtr(1, 0x1000),
	} {
		got, err := parsePtr(in)
		if err != nil || got != want {
			t.Errorf("parsePtr(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "nil", "0:0x10", "1:", "1:zz", "16777216:0", "1:0x10000000000", "x:1", "-5"} {
		if p, err := parsePtr(in); err == nil {
			t.Errorf("parsePtr(%q) = %v, want an error", in, p)
		}
	}
	// What cellctl prints, it parses.
	p := blink.MakePtr(42, 0xabc000)
	if got, err := parsePtr(p.String()); err != nil || got != p {
		t.Errorf("round trip of %v: %v, %v", p, got, err)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte("abc"), []byte("abd")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xff\xff"), []byte("b")},
		{[]byte("\xff\xff"), nil},
		{[]byte{}, nil},
	} {
		if got := prefixEnd(tc.in); !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRangeBounds(t *testing.T) {
	for _, tc := range []struct {
		f          rangeFlags
		args       []string
		start, end []byte
		bad        bool
	}{
		{rangeFlags{}, []string{"a", "b"}, []byte("a"), []byte("b"), false},
		{rangeFlags{}, []string{""}, nil, nil, false},
		{rangeFlags{}, []string{"a", ""}, []byte("a"), nil, false},
		{rangeFlags{prefix: true}, []string{"user/"}, []byte("user/"), []byte("user0"), false},
		{rangeFlags{prefix: true}, []string{""}, nil, nil, false},
		{rangeFlags{prefix: true}, []string{"a", "b"}, nil, nil, true},
		{rangeFlags{b: byteArg{hex: true}}, []string{"00", "ff"}, []byte{0}, []byte{0xff}, false},
		{rangeFlags{b: byteArg{hex: true}}, []string{"0g"}, nil, nil, true},
		{rangeFlags{limit: -1}, []string{"a"}, nil, nil, true},
		{rangeFlags{}, []string{"z", "a"}, nil, nil, true},
		{rangeFlags{reverse: true}, []string{"b", "a"}, nil, nil, true},
		{rangeFlags{}, []string{"a", "a"}, []byte("a"), []byte("a"), false},
		{rangeFlags{b: byteArg{hex: true}}, []string{"ff", "00"}, nil, nil, true},
	} {
		start, end, err := tc.f.bounds(tc.args)
		if (err != nil) != tc.bad {
			t.Errorf("%+v %q: error %v", tc.f, tc.args, err)
			continue
		}
		if !tc.bad && (!bytes.Equal(start, tc.start) || (start == nil) != (tc.start == nil) || !bytes.Equal(end, tc.end) || (end == nil) != (tc.end == nil)) {
			t.Errorf("%+v %q: [%q, %q), want [%q, %q)", tc.f, tc.args, start, end, tc.start, tc.end)
		}
	}
}

func TestBenchParams(t *testing.T) {
	def := func() benchParams {
		return benchParams{Mode: "adaptive", Provider: "tcp", Clients: 1, InFlight: 1, Conns: 1, Duration: time.Second,
			Keys: 10, Cache: "on", Workload: "get", ValueSize: 8, KeyPrefix: "b/"}
	}
	p := def()
	p.Mode, p.Provider, p.Cache, p.Workload = "RATIO=50", "SHM", "OFF", "Mixed"
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	if p.Mode != "ratio=50" || p.Keyspace != 10 || p.Provider != "shm" || p.Cache != "off" || p.Workload != "mixed" {
		t.Errorf("normalised params %+v", p)
	}
	cfg := p.config(client.Config{Endpoints: []string{"e:1"}})
	if cfg.Mode.String() != "ratio=50" || cfg.Provider != "shm" || cfg.NodeCacheBytes >= 0 || cfg.PathCacheEntries >= 0 || cfg.ConnsPerServer != 1 {
		t.Errorf("client config %+v", cfg)
	}
	p = def()
	p.Keys, p.Workload = 0, "put"
	if err := p.validate(); err != nil || p.Keyspace != 100000 {
		t.Errorf("put without keys: %v, keyspace %d", err, p.Keyspace)
	}
	// YCSB workloads fix the share of puts and default to zipfian keys.
	for w, pct := range map[string]float64{"ycsb-a": 50, "YCSB-B": 5, "ycsb-c": 0} {
		p = def()
		p.Workload = w
		if err := p.validate(); err != nil || p.WritePercent != pct || !p.mixed || p.Distribution != "zipfian" {
			t.Errorf("%s: %v, %v%% puts, mixed %v, distribution %q", w, err, p.WritePercent, p.mixed, p.Distribution)
		}
		if _, ok := p.keys.(*scrambledZipfian); !ok {
			t.Errorf("%s: key chooser %T", w, p.keys)
		}
	}
	p = def()
	p.Workload, p.Distribution = "ycsb-b", "Uniform"
	if err := p.validate(); err != nil || p.Distribution != "uniform" {
		t.Errorf("ycsb-b, uniform: %v, %q", err, p.Distribution)
	}
	p = def()
	if err := p.validate(); err != nil || p.Distribution != "uniform" || p.mixed {
		t.Errorf("get: %v, distribution %q, mixed %v", err, p.Distribution, p.mixed)
	}
	// --phases: named or numbered, --duration their sum.
	p = def()
	p.Phases = "base=2s, load=1.5s,500ms"
	if err := p.validate(); err != nil || p.Duration != 4*time.Second ||
		!slices.Equal(p.phases, []phase{{"base", 2 * time.Second}, {"load", 1500 * time.Millisecond}, {"3", 500 * time.Millisecond}}) {
		t.Errorf("phases: %v, duration %v, %+v", err, p.Duration, p.phases)
	}
	p = def()
	p.Phases, p.Duration, p.durationSet = "1s,1s", 2*time.Second, true
	if err := p.validate(); err != nil {
		t.Errorf("phases with the same --duration: %v", err)
	}
	for name, edit := range map[string]func(*benchParams){
		"ycsb percent":  func(p *benchParams) { p.Workload, p.writePercentSet = "ycsb-b", true },
		"distribution":  func(p *benchParams) { p.Distribution = "pareto" },
		"interval":      func(p *benchParams) { p.Interval = time.Millisecond },
		"intervals":     func(p *benchParams) { p.Interval, p.Duration = 10*time.Millisecond, time.Hour },
		"phase":         func(p *benchParams) { p.Phases = "a=1s,b=" },
		"phase zero":    func(p *benchParams) { p.Phases = "0s" },
		"phase name":    func(p *benchParams) { p.Phases = "=1s" },
		"phases sum":    func(p *benchParams) { p.Phases, p.durationSet = "1s,2s", true },
		"mode":          func(p *benchParams) { p.Mode = "fast" },
		"ratio":         func(p *benchParams) { p.Mode = "ratio=101" },
		"provider":      func(p *benchParams) { p.Provider = "rdma" },
		"cache":         func(p *benchParams) { p.Cache = "maybe" },
		"workload":      func(p *benchParams) { p.Workload = "scan" },
		"clients":       func(p *benchParams) { p.Clients = 0 },
		"in-flight":     func(p *benchParams) { p.InFlight = 0 },
		"conns":         func(p *benchParams) { p.Conns = 65 },
		"duration":      func(p *benchParams) { p.Duration = 0 },
		"warmup":        func(p *benchParams) { p.Warmup = -1 },
		"value size":    func(p *benchParams) { p.ValueSize = 1<<20 + 1 },
		"write percent": func(p *benchParams) { p.WritePercent = 101 },
		"reads no keys": func(p *benchParams) { p.Keys = 0 },
		"prefix":        func(p *benchParams) { p.KeyPrefix = "" },
	} {
		p := def()
		edit(&p)
		if err := p.validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, p)
		}
	}
}

func TestAppendKey(t *testing.T) {
	if got := string(appendKey(nil, "b/", 42)); got != "b/000000000042" {
		t.Errorf("appendKey = %q", got)
	}
	if got := string(appendKey([]byte("x"), "", 1234567890123)); got != "x1234567890123" {
		t.Errorf("appendKey of a wide number = %q", got)
	}
	v := []byte("zzzzzzzzzz")
	putUint64(v, 0xabc)
	if string(v) != "00000abczz" {
		t.Errorf("putUint64: %q", v)
	}
}

// Argument errors fail before any connection, on one line, exit 1.
func TestArgumentErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"put"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"put", "k", "v", "w"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"put", "--hex", "zz", "00"}, `key "zz" is not hexadecimal`},
		{[]string{"put", "--hex", "00", "q"}, `value "q" is not hexadecimal`},
		{[]string{"get"}, "accepts 1 arg(s)"},
		{[]string{"get", "a", "b"}, "accepts 1 arg(s)"},
		{[]string{"del"}, "accepts 1 arg(s)"},
		{[]string{"range"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"range", "a", "b", "--prefix"}, "--prefix takes no END"},
		{[]string{"range", "a", "--limit", "-2"}, "--limit -2"},
		{[]string{"range", "z", "a"}, `START "z" is after END "a"`},
		{[]string{"dump", "node", "1:zz"}, `pointer "1:zz"`},
		{[]string{"dump", "meganode", "bogus"}, `pointer "bogus"`},
		{[]string{"dump", "meganode", "root", "--levels", "-1"}, "--levels -1"},
		{[]string{"dump", "nothing"}, `unknown command "nothing"`},
		{[]string{"bench", "--mode", "fast"}, "--mode"},
		{[]string{"bench", "--provider", "rdma"}, `--provider "rdma"`},
		{[]string{"bench", "--workload", "scan"}, `--workload "scan"`},
		{[]string{"bench", "--clients", "0"}, "--clients 0"},
		{[]string{"bench", "--keys", "0"}, "--keys N"},
		{[]string{"bench", "--target", "redis"}, `--target "redis"`},
		{[]string{"bench", "--target", "etcd"}, "--etcd-bench-endpoints"},
		{[]string{"bench", "--target", "etcd", "--etcd-bench-endpoints", "a:1,,b:2"}, "empty endpoint"},
		{[]string{"bench", "--target", "etcd", "--etcd-bench-endpoints", "a:1", "--etcd-prefix-bench", ""}, "--etcd-prefix-bench"},
		{[]string{"status", "extra"}, `unknown command "extra"`},
		{[]string{"get", "k", "--endpoints", ""}, "--endpoints"},
		{[]string{"get", "k", "--endpoints", "a:1,,b:2"}, "empty endpoint"},
	} {
		code, out, errs := runCellctl(tc.args...)
		if code != 1 || out != "" {
			t.Errorf("%q: exit %d, stdout %q", tc.args, code, out)
		}
		if !strings.HasPrefix(errs, "cellctl: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: stderr %q, want one line with %q", tc.args, errs, tc.want)
		}
	}
}

// An unreachable etcd is one clear error within --command-timeout.
func TestUnreachableCluster(t *testing.T) {
	ln := deadAddr(t)
	for _, args := range [][]string{{"get", "k"}, {"status"}, {"dump", "meganode", "root"}} {
		start := time.Now()
		code, out, errs := runCellctl(append(args, "--endpoints", ln, "--command-timeout", "300ms", "--dial-timeout", "300ms")...)
		if code != 1 || out != "" || !strings.HasPrefix(errs, "cellctl: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, ln) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%q took %v", args, d)
		}
	}
}
