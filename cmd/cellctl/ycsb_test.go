package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// ycsbParams returns validated bench parameters of workload w over keys
// preloaded keys.
func ycsbParams(t *testing.T, w string, keys int) *benchParams {
	t.Helper()
	p := &benchParams{Mode: "adaptive", Provider: "shm", Clients: 1, InFlight: 1, Conns: 1, Duration: time.Second,
		Keys: keys, Cache: "on", Workload: w, ValueSize: 8, KeyPrefix: "b/", Seed: 1}
	if err := p.validate(); err != nil {
		t.Fatalf("%s: %v", w, err)
	}
	return p
}

// steps draws n steps of p with a generator seeded with seed, acking
// every insert at once when ack.
func steps(p *benchParams, seed uint64, n int, ack bool) []benchStep {
	rng := rand.New(rand.NewPCG(seed, 1))
	var lat latestKeys
	out := make([]benchStep, 0, n)
	for range n {
		st := p.nextStep(rng, &lat)
		if ack && st.op == opInsert {
			p.inserts.ack()
		}
		out = append(out, st)
	}
	return out
}

// countOps counts steps by kind.
func countOps(sts []benchStep) [numBenchOps]int {
	var c [numBenchOps]int
	for _, st := range sts {
		c[st.op]++
	}
	return c
}

// share checks that kind op is pct% of n steps within ±tol points.
func share(t *testing.T, name string, c [numBenchOps]int, op benchOp, n int, pct, tol float64) {
	t.Helper()
	if got := 100 * float64(c[op]) / float64(n); got < pct-tol || got > pct+tol {
		t.Errorf("%s: %s %.2f%% of %d steps, want %v%% ± %v", name, benchOpNames[op], got, n, pct, tol)
	}
}

// Workload D: 95% gets, 5% inserts of consecutive new keys; gets favour
// the newest keys (latest), and follow the inserts as they are acked.
func TestYCSBD(t *testing.T) {
	const keys, n = 10000, 200000
	p := ycsbParams(t, "YCSB-D", keys)
	if p.Distribution != distLatest {
		t.Fatalf("ycsb-d distribution %q, want latest", p.Distribution)
	}
	sts := steps(p, 3, n, false)
	c := countOps(sts)
	share(t, "ycsb-d", c, opInsert, n, 5, 0.3)
	share(t, "ycsb-d", c, opGet, n, 95, 0.3)
	if c[opGet]+c[opInsert] != n {
		t.Errorf("ycsb-d ops %v", c)
	}
	next := keys
	hits := map[int]int{}
	for _, st := range sts {
		switch st.op {
		case opInsert:
			if st.idx != next {
				t.Fatalf("insert of key %d, want %d (consecutive after the preloaded keys)", st.idx, next)
			}
			next++
		case opGet:
			if st.idx < 0 || st.idx >= keys {
				t.Fatalf("get of key %d: no insert acked, want [0, %d)", st.idx, keys)
			}
			hits[st.idx]++
		}
	}
	// Latest: the newest key is the most popular (≈1/zeta(10^4) ≈ 9.8%
	// of the gets), then the one before it; the older half is rare.
	newest := float64(hits[keys-1]) / float64(c[opGet])
	if newest < 0.09 || newest > 0.11 || hits[keys-2] >= hits[keys-1] || hits[keys-2] < hits[keys-3] {
		t.Errorf("latest: newest key %.3f of gets, then %d, %d hits", newest, hits[keys-2], hits[keys-3])
	}
	old := 0
	for i := range keys / 2 {
		old += hits[i]
	}
	if f := float64(old) / float64(c[opGet]); f > 0.1 {
		t.Errorf("latest: the older half of the keys got %.3f of the gets", f)
	}
	// Acked inserts become the latest keys.
	p = ycsbParams(t, "ycsb-d", keys)
	sts = steps(p, 3, n, true)
	maxIdx := 0
	for _, st := range sts {
		if st.op == opGet {
			maxIdx = max(maxIdx, st.idx)
		}
	}
	if total := p.inserts.count(); maxIdx < keys || maxIdx >= total {
		t.Errorf("acked inserts: gets up to key %d, %d keys readable", maxIdx, total)
	}
	// Uniform gets on request.
	p = &benchParams{Mode: "adaptive", Provider: "shm", Clients: 1, InFlight: 1, Conns: 1, Duration: time.Second,
		Keys: keys, Cache: "on", Workload: "ycsb-d", Distribution: "uniform", ValueSize: 8, KeyPrefix: "b/"}
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	hits = map[int]int{}
	for _, st := range steps(p, 3, n, false) {
		if st.op == opGet {
			hits[st.idx]++
		}
	}
	if f := float64(hits[keys-1]) / float64(c[opGet]); f > 0.01 {
		t.Errorf("ycsb-d uniform: last key %.3f of gets", f)
	}
}

// Workload E: 95% scans of 1..100 pairs from a zipfian start key, 5%
// inserts.
func TestYCSBE(t *testing.T) {
	const keys, n = 10000, 200000
	p := ycsbParams(t, "ycsb-e", keys)
	sts := steps(p, 5, n, true)
	c := countOps(sts)
	share(t, "ycsb-e", c, opScan, n, 95, 0.3)
	share(t, "ycsb-e", c, opInsert, n, 5, 0.3)
	lengths := make([]int, ycsbMaxScanLength+1)
	sum := 0
	starts := map[int]int{}
	for _, st := range sts {
		if st.op != opScan {
			continue
		}
		if st.scan < 1 || st.scan > ycsbMaxScanLength || st.idx < 0 || st.idx >= keys {
			t.Fatalf("scan of %d from key %d", st.scan, st.idx)
		}
		lengths[st.scan]++
		sum += st.scan
		starts[st.idx]++
	}
	if mean := float64(sum) / float64(c[opScan]); mean < 49.5 || mean > 51.5 {
		t.Errorf("mean scan length %.2f, want ≈ 50.5", mean)
	}
	for l := 1; l <= ycsbMaxScanLength; l++ {
		if want := c[opScan] / ycsbMaxScanLength; lengths[l] < want*8/10 || lengths[l] > want*12/10 {
			t.Errorf("scan length %d drawn %d times, want ≈ %d", l, lengths[l], want)
		}
	}
	// Zipfian starts: the hottest key ≈ 3.8% of the scans.
	top := 0
	for _, v := range starts {
		top = max(top, v)
	}
	if f := float64(top) / float64(c[opScan]); f < 0.033 || f > 0.043 {
		t.Errorf("hottest start key %.4f of scans, want ≈ 0.038", f)
	}
}

// Workload F: 50% gets, 50% read-modify-writes, zipfian.
func TestYCSBF(t *testing.T) {
	const keys, n = 10000, 200000
	p := ycsbParams(t, "ycsb-f", keys)
	sts := steps(p, 7, n, false)
	c := countOps(sts)
	share(t, "ycsb-f", c, opRMW, n, 50, 0.5)
	share(t, "ycsb-f", c, opGet, n, 50, 0.5)
	for _, st := range sts {
		if st.idx < 0 || st.idx >= keys {
			t.Fatalf("key %d", st.idx)
		}
	}
}

// A seed fixes the operations of every workload; another seed changes
// them. The older workloads draw as they did before D, E and F.
func TestYCSBDeterministic(t *testing.T) {
	for _, w := range []string{"ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-e", "ycsb-f", "mixed", "get", "search", "put"} {
		a := steps(ycsbParams(t, w, 1000), 11, 2000, true)
		b := steps(ycsbParams(t, w, 1000), 11, 2000, true)
		if !slices.Equal(a, b) {
			t.Errorf("%s: two runs with one seed differ", w)
		}
		if c := steps(ycsbParams(t, w, 1000), 12, 2000, true); slices.Equal(a, c) {
			t.Errorf("%s: seeds 11 and 12 give the same operations", w)
		}
	}
	// ycsb-b as before: a key, then a put with probability 5%.
	p := ycsbParams(t, "ycsb-b", 1000)
	rng := rand.New(rand.NewPCG(11, 1))
	for i, st := range steps(p, 11, 2000, false) {
		idx := p.keys.next(rng)
		op := opGet
		if rng.Float64()*100 < 5 {
			op = opPut
		}
		if st != (benchStep{op: op, idx: idx}) {
			t.Fatalf("ycsb-b step %d: %+v, want %v of key %d", i, st, benchOpNames[op], idx)
		}
	}
}

// The mixes' flags: D, E and F have fixed mixes; latest is D's only.
func TestYCSBParams(t *testing.T) {
	for _, tc := range []struct {
		edit func(*benchParams)
		ok   bool
	}{
		{func(p *benchParams) { p.Workload = "ycsb-e" }, true},
		{func(p *benchParams) { p.Workload, p.writePercentSet = "ycsb-e", true }, false},
		{func(p *benchParams) { p.Workload, p.writePercentSet = "ycsb-f", true }, false},
		{func(p *benchParams) { p.Workload, p.Distribution = "ycsb-a", "latest" }, false},
		{func(p *benchParams) { p.Workload, p.Distribution = "ycsb-d", "zipfian" }, true},
		{func(p *benchParams) { p.Workload = "ycsb-g" }, false},
	} {
		p := &benchParams{Mode: "adaptive", Provider: "shm", Clients: 1, InFlight: 1, Conns: 1, Duration: time.Second,
			Keys: 10, Cache: "on", ValueSize: 8, KeyPrefix: "b/"}
		tc.edit(p)
		if err := p.validate(); (err == nil) != tc.ok {
			t.Errorf("%s distribution %q write-percent set %v: %v", p.Workload, p.Distribution, p.writePercentSet, err)
		}
	}
	p := ycsbParams(t, "ycsb-e", 10)
	p.Keyspace = 50
	if err := p.validate(); err != nil || p.inserts.take() != 50 {
		t.Errorf("inserts after --keyspace 50 --keys 10: %v", err)
	}
}
