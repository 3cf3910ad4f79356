package blink_test

// Side-by-side benchmarks of the B-link tree inside one meganode (over a
// real mapped region and the mem5 extent allocator) against google/btree
// and tidwall/btree, on the paper's workload: random keys of 8-64 bytes and
// values of 8-256 bytes. Results and commands are in BENCHMARKS.md.
//
//	go test ./blink -run '^$' -bench 'PointLookup|Insert|ConcurrentLookup' -benchmem

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/paperload"
	"github.com/cellstore/cell/meganode"
	gbtree "github.com/google/btree"
	tbtree "github.com/tidwall/btree"
)

type item struct{ key, val []byte }

func itemLess(a, b item) bool { return bytes.Compare(a.key, b.key) < 0 }

// workload returns the paper's records (internal/paperload: n distinct
// random keys of 8-64 bytes, values of 8-256 bytes) and an access order (a
// random permutation).
func workload(n int, seed uint64) (keys, vals [][]byte, order []int32) {
	src := paperload.NewSource(seed)
	keys, vals = src.Records(n)
	r := src.Rand()
	order = make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	return keys, vals, order
}

// treeImpl is what the benchmarks need from each implementation.
type treeImpl interface {
	put(k, v []byte)
	get(k []byte, dst []byte) ([]byte, bool)
	close()
}

type blinkImpl struct {
	region *meganode.Region
	tree   *blink.Tree
}

func newBlink(tb testing.TB, keys int) *blinkImpl {
	// Room for the keys plus headroom for Insert's extra keys: measured
	// ~110 B of nodes and ~256 B of extent blocks per key at 1 KiB nodes.
	mega := (uint64(keys)*170 + 256<<20) &^ (1<<20 - 1)
	size := mega + uint64(keys)*400 + 1<<30
	r, err := meganode.Create(meganode.Options{
		ID: 1, Size: size, MeganodeSize: mega, Meganodes: 1,
		Dir: tb.TempDir(), Name: fmt.Sprintf("cell-bench-%d-%d", keys, rand.Uint64()),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := r.NewMeganode(0, blink.Full, blink.Options{FillThreshold: 1})
	if err != nil {
		tb.Fatal(err)
	}
	return &blinkImpl{region: r, tree: m.Tree()}
}

func (b *blinkImpl) put(k, v []byte) {
	if err := b.tree.Put(k, v); err != nil {
		panic(err)
	}
}

func (b *blinkImpl) get(k, dst []byte) ([]byte, bool) {
	v, err := b.tree.Get(k, dst)
	return v, err == nil
}

// blinkCopyImpl is the blink tree read through validated node copies
// (GetCopied), the server-side lookup before the in-place search: the
// "before" of BENCHMARKS.md's comparison, measured in the same run on the
// same tree.
type blinkCopyImpl struct{ *blinkImpl }

func (b blinkCopyImpl) get(k, dst []byte) ([]byte, bool) {
	v, err := b.tree.GetCopied(k, dst)
	return v, err == nil
}

func (b *blinkImpl) close() {
	b.region.Close()
	b.region.Remove()
}

// bytesPerKey is the meganode memory in use (nodes) plus extent bytes
// allocated (buddy blocks), per key.
func (b *blinkImpl) bytesPerKey(keys int) float64 {
	nodes := b.tree.Usage().Nodes
	st := b.region.Extents().Stats()
	return float64(uint64(nodes)*uint64(b.tree.NodeSize())+st.InUse) / float64(keys)
}

type googleImpl struct{ t *gbtree.BTreeG[item] }

func (g *googleImpl) put(k, v []byte) { g.t.ReplaceOrInsert(item{k, v}) }
func (g *googleImpl) get(k, dst []byte) ([]byte, bool) {
	it, ok := g.t.Get(item{key: k})
	return append(dst, it.val...), ok
}
func (g *googleImpl) close() { g.t.Clear(false) }

type tidwallImpl struct{ t *tbtree.BTreeG[item] }

func (w *tidwallImpl) put(k, v []byte) { w.t.Set(item{k, v}) }
func (w *tidwallImpl) get(k, dst []byte) ([]byte, bool) {
	it, ok := w.t.Get(item{key: k})
	return append(dst, it.val...), ok
}
func (w *tidwallImpl) close() { w.t.Clear() }

var impls = []string{"blink", "googlebtree", "tidwallbtree"}

// lookupImpls adds blinkcopy: the same blink tree as blink (built once for
// both), read through node copies.
var lookupImpls = []string{"blink", "blinkcopy", "googlebtree", "tidwallbtree"}

var sizes = []struct {
	name string
	n    int
}{{"1M", 1 << 20}, {"10M", 10_000_000}}

// build fills a fresh implementation with the workload's first n keys and
// returns it with the Go heap it grew (for the Go trees, whose keys and
// values live on the heap; the blink trees live in the mapped region).
func build(tb testing.TB, impl string, keys, vals [][]byte, n int) (treeImpl, float64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var t treeImpl
	switch impl {
	case "blink":
		t = newBlink(tb, len(keys))
	case "googlebtree":
		t = &googleImpl{gbtree.NewG[item](32, itemLess)}
	case "tidwallbtree":
		t = &tidwallImpl{tbtree.NewBTreeGOptions[item](itemLess, tbtree.Options{NoLocks: true})}
	}
	for i := 0; i < n; i++ {
		// The Go trees keep their own copies, as a store would.
		if impl == "blink" {
			t.put(keys[i], vals[i])
		} else {
			t.put(bytes.Clone(keys[i]), bytes.Clone(vals[i]))
		}
	}
	if b, ok := t.(*blinkImpl); ok {
		return t, b.bytesPerKey(n)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return t, float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// extraKeys is how many fresh keys beyond the first n a workload holds, for
// BenchmarkInsert (past them it inserts suffixed variants).
const extraKeys = 1 << 20

// built caches one built tree at a time, so that the b.N rounds of one
// lookup benchmark share it instead of rebuilding.
var built struct {
	name   string
	t      treeImpl
	perKey float64
	cursor int // next fresh key index for BenchmarkInsert
}

func getBuilt(tb testing.TB, impl string, n int) (treeImpl, float64) {
	if impl == "blinkcopy" {
		t, perKey := getBuilt(tb, "blink", n)
		return blinkCopyImpl{t.(*blinkImpl)}, perKey
	}
	name := fmt.Sprintf("%s/%d", impl, n)
	if built.name == name {
		return built.t, built.perKey
	}
	if built.t != nil {
		built.t.close()
		built.t = nil
	}
	keys, vals, _ := getWorkload(n)
	t, perKey := build(tb, impl, keys, vals, n)
	built.name, built.t, built.perKey, built.cursor = name, t, perKey, 0
	return t, perKey
}

func dropBuilt() {
	if built.t != nil {
		built.t.close()
	}
	built.name, built.t = "", nil
}

// cache of workloads by size, so impls compare on the same keys.
var (
	wlMu sync.Mutex
	wl   = map[int]struct {
		keys, vals [][]byte
		order      []int32
	}{}
)

func getWorkload(n int) ([][]byte, [][]byte, []int32) {
	wlMu.Lock()
	defer wlMu.Unlock()
	w, ok := wl[n]
	if !ok {
		clear(wl) // keep one size in memory at a time
		w.keys, w.vals, w.order = workload(n+extraKeys, 42)
		w.order = w.order[:0]
		for _, i := range rand.New(rand.NewPCG(7, 7)).Perm(n) {
			w.order = append(w.order, int32(i))
		}
		wl[n] = w
	}
	return w.keys, w.vals, w.order
}

func BenchmarkPointLookup(b *testing.B) {
	for _, sz := range sizes {
		for _, impl := range lookupImpls {
			b.Run(fmt.Sprintf("impl=%s/keys=%s", impl, sz.name), func(b *testing.B) {
				keys, _, order := getWorkload(sz.n)
				t, perKey := getBuilt(b, impl, sz.n)
				dst := make([]byte, 0, 512)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					k := keys[order[i%sz.n]]
					if _, ok := t.get(k, dst[:0]); !ok {
						b.Fatalf("key %x missing", k)
					}
				}
				b.StopTimer()
				b.ReportMetric(perKey, "bytes/key")
			})
		}
	}
}

// BenchmarkInsert inserts new keys into a tree already holding keys=N. The
// tree is the one the lookup benchmark built (or is built once); a cursor
// that continues across b.N rounds makes every timed insert a fresh key.
func BenchmarkInsert(b *testing.B) {
	for _, sz := range sizes {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("impl=%s/keys=%s", impl, sz.name), func(b *testing.B) {
				keys, vals, _ := getWorkload(sz.n)
				t, _ := getBuilt(b, impl, sz.n)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					c := built.cursor
					built.cursor++
					j := sz.n + c%extraKeys
					k := keys[j]
					if c >= extraKeys {
						b.StopTimer()
						k = fmt.Appendf(bytes.Clone(k[:min(len(k), 48)]), "#%d", c)
						b.StartTimer()
					}
					t.put(k, vals[j])
				}
			})
		}
	}
}

// BenchmarkConcurrentLookup: readers on every core while one writer
// inserts. blink readers take no lock; google/btree needs a RWMutex.
func BenchmarkConcurrentLookup(b *testing.B) {
	const n = 1 << 20
	for _, impl := range []string{"blink", "googlebtree"} {
		b.Run(fmt.Sprintf("impl=%s/keys=1M", impl), func(b *testing.B) {
			dropBuilt()
			keys, vals, order := getWorkload(n)
			half := n / 2
			t, _ := build(b, impl, keys, vals, half)
			defer t.close()
			var mu sync.RWMutex
			stop := make(chan struct{})
			var writes atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := half; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if i >= n {
						return
					}
					if impl == "blink" {
						t.put(keys[i], vals[i])
					} else {
						mu.Lock()
						t.put(keys[i], vals[i])
						mu.Unlock()
					}
					writes.Add(1)
				}
			}()
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]byte, 0, 512)
				for pb.Next() {
					i := int(next.Add(1))
					k := keys[order[i%n]%int32(half)]
					if impl == "blink" {
						t.get(k, dst[:0])
					} else {
						mu.RLock()
						t.get(k, dst[:0])
						mu.RUnlock()
					}
				}
			})
			b.StopTimer()
			close(stop)
			<-done
			b.ReportMetric(float64(writes.Load())/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
