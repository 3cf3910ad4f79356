package main

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
)

// YCSB's core workloads D, E and F (site.ycsb.workloads.CoreWorkload with
// workloads/workload{d,e,f}):
//
//   - ycsb-d: 95% reads, 5% inserts; reads choose keys with the "latest"
//     distribution (YCSB's SkewedLatestGenerator: the newest key is the
//     most popular, then the one before, zipfian over the keys inserted
//     so far).
//   - ycsb-e: 95% scans, 5% inserts; a scan starts at a key chosen
//     zipfian (scrambled, as reads are) and asks for a length drawn
//     uniformly from 1..100 (maxscanlength 100,
//     scanlengthdistribution uniform), ascending, values included.
//   - ycsb-f: 50% reads, 50% read-modify-writes (a get, then a put of
//     the same key, timed as one operation), keys zipfian.
//
// Inserts store new keys after the preloaded ones, in order
// (insertorder=ordered): key max(--keys, --keyspace) + i for the i-th
// insert of the run, numbered across all workers. Reads of the latest
// keys choose among the inserts acknowledged so far (YCSB's
// AcknowledgedCounterGenerator), so they do not race ahead of the writes.

// Workloads D, E and F.
const (
	workloadYCSBD = "ycsb-d"
	workloadYCSBE = "ycsb-e"
	workloadYCSBF = "ycsb-f"
)

// distLatest is ycsb-d's request distribution.
const distLatest = "latest"

// ycsbMaxScanLength is workload E's maxscanlength.
const ycsbMaxScanLength = 100

// ycsbInsertPercent is the share of inserts of D and E; F's share of
// read-modify-writes is ycsbRMWPercent.
const (
	ycsbInsertPercent = 5
	ycsbRMWPercent    = 50
)

// ycsbDescription describes the mix of every YCSB workload for the
// output's title.
var ycsbDescription = map[string]string{
	workloadYCSBA: "50% puts, 50% gets",
	workloadYCSBB: "5% puts, 95% gets",
	workloadYCSBC: "gets only",
	workloadYCSBD: "5% inserts, 95% gets of the latest keys",
	workloadYCSBE: "5% inserts, 95% scans of 1..100 pairs",
	workloadYCSBF: "50% read-modify-writes, 50% gets",
}

// insertCounter numbers the inserts of a run: keys base, base+1, ...
// Safe for concurrent use.
type insertCounter struct {
	base  int
	next  atomic.Int64 // inserts handed out
	acked atomic.Int64 // inserts done (approximately: a count, not a prefix)
}

// take returns the index of the next key to insert.
func (c *insertCounter) take() int { return c.base + int(c.next.Add(1)-1) }

// ack records one insert done.
func (c *insertCounter) ack() { c.acked.Add(1) }

// count returns the number of keys readable: the preloaded ones and the
// inserts acknowledged.
func (c *insertCounter) count() int { return c.base + int(c.acked.Load()) }

// latestKeys is YCSB's SkewedLatestGenerator for one worker: key
// n-1-z with z drawn from a zipfian (theta 0.99) over the n keys readable
// now. The zipfian's zeta(n) is kept up to date incrementally as n grows,
// as YCSB's ZipfianGenerator does.
type latestKeys struct {
	n     int     // items of z
	zetan float64 // zeta(n, theta)
	z     *zipfian
}

// zetaBase caches zeta(n, 0.99) of the preloaded keyspace, computed once
// per run (O(n)).
type zetaBase struct {
	n     int
	zetan float64
}

func newZetaBase(n int) zetaBase { return zetaBase{n: n, zetan: zeta(uint64(n), ycsbZipfianConstant)} }

// next returns a key index in [0, n) for n readable keys (n ≥ 1; n never
// decreases between calls).
func (l *latestKeys) next(rng *rand.Rand, base zetaBase, n int) int {
	if l.z == nil || n != l.n {
		if l.z == nil || n < l.n {
			l.n, l.zetan = base.n, base.zetan
			if n < base.n { // never in a run: the keyspace is the base
				l.n, l.zetan = n, zeta(uint64(n), ycsbZipfianConstant)
			}
		}
		for i := l.n + 1; i <= n; i++ {
			l.zetan += 1 / math.Pow(float64(i), ycsbZipfianConstant)
		}
		l.n = n
		l.z = newZipfian(uint64(n), ycsbZipfianConstant, l.zetan)
	}
	return n - 1 - int(l.z.next(rng))
}

// benchStep is one operation a worker is to run.
type benchStep struct {
	op  benchOp
	idx int // the key's index
	// scan is the scan's length (scan only).
	scan int
}

// nextStep draws the next operation of p's workload with rng. lat is the
// worker's latest-key state (ycsb-d).
func (p *benchParams) nextStep(rng *rand.Rand, lat *latestKeys) benchStep {
	switch p.Workload {
	case workloadYCSBD:
		if rng.Float64()*100 < ycsbInsertPercent {
			return benchStep{op: opInsert, idx: p.inserts.take()}
		}
		if p.Distribution == distLatest {
			return benchStep{op: opGet, idx: lat.next(rng, p.zetaBase, p.inserts.count())}
		}
		return benchStep{op: opGet, idx: p.keys.next(rng)}
	case workloadYCSBE:
		if rng.Float64()*100 < ycsbInsertPercent {
			return benchStep{op: opInsert, idx: p.inserts.take()}
		}
		idx := p.keys.next(rng)
		return benchStep{op: opScan, idx: idx, scan: 1 + rng.IntN(ycsbMaxScanLength)}
	case workloadYCSBF:
		idx := p.keys.next(rng)
		if rng.Float64()*100 < ycsbRMWPercent {
			return benchStep{op: opRMW, idx: idx}
		}
		return benchStep{op: opGet, idx: idx}
	}
	// The other workloads, drawn as they always were (a key, then the
	// kind), so that a seed gives the same operations as before.
	st := benchStep{op: opGet, idx: p.keys.next(rng)}
	switch {
	case p.Workload == workloadPut, p.mixed && rng.Float64()*100 < p.WritePercent:
		st.op = opPut
	case p.Workload == workloadSearch:
		st.op = opSearch
	}
	return st
}
