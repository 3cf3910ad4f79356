package blink_test

// A delete-heavy workload's memory (issue 42, "space back after deletes";
// BENCHMARKS.md §15): insert N keys of the paper's workload into one
// meganode, delete 90% of them in random order, then insert as many fresh
// keys, reading the meganode's memory in use after each phase: the nodes
// in use times the node size, plus the extent bytes allocated to records
// (the mem5 buddy blocks).
//
//	go test ./blink -run '^$' -bench DeleteHeavy -benchtime 1x -count 2
//
// Today nodes are never merged or freed: a delete frees its record's
// extent block but not the leaf it emptied, so "B-after-delete" keeps
// every node of "B-before" and the re-insert grows from there.

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
)

// memoryInUse is a meganode's memory in use: its nodes (the header
// included) at the node size, and the region's extent bytes allocated.
func memoryInUse(r *meganode.Region, t *blink.Tree) (nodes int, bytes uint64) {
	nodes = t.Usage().Nodes
	return nodes, uint64(nodes)*uint64(t.NodeSize()) + r.Extents().Stats().InUse
}

// BenchmarkDeleteHeavy runs the three phases once per b.N on a fresh tree
// (the reported figures are the last round's; the time per op is the
// whole cycle). Metrics: B/key-before (memory in use ÷ N after the
// inserts), B-after-delete and B/live-key-after-delete (÷ the N/10 keys
// left), B-after-reinsert and B/key-after-reinsert (÷ N again), and the
// nodes in use after each phase.
func BenchmarkDeleteHeavy(b *testing.B) {
	for _, sz := range []struct {
		name string
		n    int
	}{{"100K", 100_000}, {"1M", 1_000_000}} {
		b.Run("keys="+sz.name, func(b *testing.B) {
			n := sz.n
			del := n - n/10
			// The first n records are blink's benchmarks' (seed 42); the
			// next del are the fresh keys inserted after the deletes.
			keys, vals, _ := workload(n+del, 42)
			order := rand.New(rand.NewPCG(9, 9)).Perm(n)[:del]
			var before, afterDel, afterIns uint64
			var nBefore, nAfterDel, nAfterIns int
			for range b.N {
				r, t := newDeleteHeavyTree(b, n+del)
				for i := range n {
					if err := t.Put(keys[i], vals[i]); err != nil {
						b.Fatal(err)
					}
				}
				nBefore, before = memoryInUse(r, t)
				for _, i := range order {
					if ok, err := t.Delete(keys[i]); err != nil || !ok {
						b.Fatalf("delete %x: %v, %v", keys[i], ok, err)
					}
				}
				nAfterDel, afterDel = memoryInUse(r, t)
				for i := n; i < n+del; i++ {
					if err := t.Put(keys[i], vals[i]); err != nil {
						b.Fatal(err)
					}
				}
				nAfterIns, afterIns = memoryInUse(r, t)
				b.StopTimer()
				r.Close()
				r.Remove()
				b.StartTimer()
			}
			b.ReportMetric(float64(before)/float64(n), "B/key-before")
			b.ReportMetric(float64(afterDel), "B-after-delete")
			b.ReportMetric(float64(afterDel)/float64(n-del), "B/live-key-after-delete")
			b.ReportMetric(float64(afterIns), "B-after-reinsert")
			b.ReportMetric(float64(afterIns)/float64(n), "B/key-after-reinsert")
			b.ReportMetric(float64(nBefore), "nodes-before")
			b.ReportMetric(float64(nAfterDel), "nodes-after-delete")
			b.ReportMetric(float64(nAfterIns), "nodes-after-reinsert")
		})
	}
}

// newDeleteHeavyTree makes a region as BenchmarkPointLookup's (backed by a
// file in /dev/shm, hugetlbfs where mounted) with one meganode room enough
// for keys keys without a split, and its tree. The caller closes and
// removes the region (its file).
func newDeleteHeavyTree(tb testing.TB, keys int) (*meganode.Region, *blink.Tree) {
	tb.Helper()
	// ~110 B of 1 KiB nodes and ~256 B of extent blocks per key (BENCHMARKS.md §1).
	mega := (uint64(keys)*200 + 64<<20) &^ (1<<20 - 1)
	size := mega + uint64(keys)*400 + 256<<20
	r, err := meganode.Create(meganode.Options{
		ID: 1, Size: size, MeganodeSize: mega, Meganodes: 1,
		Dir: tb.TempDir(), Name: fmt.Sprintf("cell-bench-delete-%d-%d", keys, rand.Uint64()),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := r.NewMeganode(0, blink.Full, blink.Options{FillThreshold: 1})
	if err != nil {
		r.Close()
		r.Remove()
		tb.Fatal(err)
	}
	return r, m.Tree()
}
