package meganode_test

// Memory per key of a meganode on the paper's workload (random keys of
// 8-64 bytes, values of 8-256 bytes, blink's benchmark workload with seed
// 42), with the extent allocator as it was (buddy blocks only) and with
// size classes (slab.go), against google/btree holding the same records
// (Go heap growth). Issue 42, item 1; BENCHMARKS.md, "Memory per key:
// size-class extents".
//
//	go test ./meganode -run '^$' -bench BytesPerKey -benchtime 1x -count 3
//
// Metrics per key: extent-B/key is the extent heap the records hold
// (buddy blocks, and with size classes the slabs whole: free slots,
// headers and tails included), record-B/key what is allocated to records
// (ExtentStats.InUse), node-B/key the tree's nodes, B/key the sum of
// extent and node bytes, and x-googlebtree B/key over google/btree's from
// the same run. After deleting 90% of the keys in random order:
// extent-B/key-after-delete (extent heap still held, ÷ N) and
// record-B/key-after-delete; after inserting as many fresh keys:
// extent-B/key-after-reinsert (÷ N).

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/paperload"
	"github.com/cellstore/cell/meganode"
	gbtree "github.com/google/btree"
)

type gbItem struct{ key, val []byte }

func gbLess(a, b gbItem) bool { return bytes.Compare(a.key, b.key) < 0 }

// googleBytesPerKey is the Go heap google/btree (degree 32) grows by
// holding copies of the records.
func googleBytesPerKey(keys, vals [][]byte) float64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	t := gbtree.NewG[gbItem](32, gbLess)
	for i := range keys {
		t.ReplaceOrInsert(gbItem{bytes.Clone(keys[i]), bytes.Clone(vals[i])})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(t)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(len(keys))
}

// extentHeld is the extent heap bytes not in free buddy blocks.
func extentHeld(e *meganode.Extents) uint64 {
	s, ss := e.Stats(), e.SlabStats()
	return s.InUse - ss.SlotBytes + ss.SlabBytes
}

func BenchmarkBytesPerKey(b *testing.B) {
	for _, n := range []int{100_000, 1 << 20} {
		// The first n records are inserted, then 90% of them deleted in
		// random order, then the next n-n/10 inserted.
		all, allVals := paperload.Records(2*n-n/10, 42)
		keys, vals := all[:n], allVals[:n]
		del := rand.New(rand.NewPCG(9, 9)).Perm(n)[:n-n/10]
		var google float64
		b.Run(fmt.Sprintf("keys=%d/impl=googlebtree", n), func(b *testing.B) {
			for range b.N {
				google = googleBytesPerKey(keys, vals)
			}
			b.ReportMetric(google, "B/key")
		})
		for _, sc := range []bool{false, true} {
			name := "buddy"
			if sc {
				name = "sizeclasses"
			}
			b.Run(fmt.Sprintf("keys=%d/impl=blink-%s", n, name), func(b *testing.B) {
				var ext, rec, nodes, extDel, recDel, extIns, put float64
				for range b.N {
					mega := (uint64(n)*200 + 64<<20) &^ (1<<20 - 1)
					r, err := meganode.Create(meganode.Options{
						ID: 1, Size: mega + uint64(n)*400 + 256<<20, MeganodeSize: mega, Meganodes: 1,
						SizeClasses: sc, Dir: b.TempDir(), Name: fmt.Sprintf("cell-bench-bpk-%d-%d", n, rand.Uint64()),
						Logger: slog.New(slog.DiscardHandler),
					})
					if err != nil {
						b.Fatal(err)
					}
					m, err := r.NewMeganode(0, blink.Full, blink.Options{FillThreshold: 1})
					if err != nil {
						b.Fatal(err)
					}
					t := m.Tree()
					start := time.Now()
					for i := range keys {
						if err := t.Put(keys[i], vals[i]); err != nil {
							b.Fatal(err)
						}
					}
					put = float64(time.Since(start).Nanoseconds()) / float64(n)
					e := r.Extents()
					ext = float64(extentHeld(e)) / float64(n)
					rec = float64(e.Stats().InUse) / float64(n)
					nodes = float64(t.Usage().Nodes*t.NodeSize()) / float64(n)
					for _, i := range del {
						if ok, err := t.Delete(keys[i]); !ok || err != nil {
							b.Fatalf("delete: %v %v", ok, err)
						}
					}
					extDel = float64(extentHeld(e)) / float64(n)
					recDel = float64(e.Stats().InUse) / float64(n)
					for i := n; i < len(all); i++ {
						if err := t.Put(all[i], allVals[i]); err != nil {
							b.Fatal(err)
						}
					}
					extIns = float64(extentHeld(e)) / float64(n)
					if err := r.Check(); err != nil {
						b.Fatal(err)
					}
					r.Close()
					r.Remove()
				}
				b.ReportMetric(ext, "extent-B/key")
				b.ReportMetric(rec, "record-B/key")
				b.ReportMetric(nodes, "node-B/key")
				b.ReportMetric(ext+nodes, "B/key")
				if google > 0 {
					b.ReportMetric((ext+nodes)/google, "x-googlebtree")
				}
				b.ReportMetric(extDel, "extent-B/key-after-delete")
				b.ReportMetric(recDel, "record-B/key-after-delete")
				b.ReportMetric(extIns, "extent-B/key-after-reinsert")
				b.ReportMetric(put, "ns/put")
			})
		}
	}
}
