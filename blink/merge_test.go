package blink

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// Tests of merges after deletes (merge.go).

func mergeKey(i int) string { return fmt.Sprintf("key%07d", i) + strings.Repeat("m", i%23) }

// nodeVersions returns the head version of every node slot of tr's meganode.
func nodeVersions(tr *Tree) []uint64 {
	v := make([]uint64, tr.size/uint64(tr.nodeSize))
	for i := range v {
		v[i] = tr.nodeBytes(MakePtr(tr.region, tr.base+uint64(i*tr.nodeSize))).headVersion()
	}
	return v
}

// mustNotLower fails if any node's version word is below its old value
// (docs/transactions.md §2.5), and returns the new versions.
func mustNotLower(tb testing.TB, tr *Tree, old []uint64, when string) []uint64 {
	tb.Helper()
	now := nodeVersions(tr)
	for i := range old {
		if now[i] < old[i] {
			tb.Fatalf("%s: node %d version went down from %d to %d", when, i, old[i], now[i])
		}
	}
	return now
}

// TestMergeSpaceBack: insert N keys, delete 90% in random order, and the
// nodes come back; re-inserting as many keys reuses them (the fresh area
// barely grows), with every invariant, the contents and the version words
// (never lowered) checked along the way.
func TestMergeSpaceBack(t *testing.T) {
	for _, legacy := range []uint64{0, 7} {
		t.Run(fmt.Sprintf("legacy=%d", legacy), func(t *testing.T) {
			tr, ext := newTestTree(t, testTreeOpts{nodeSize: 1024, meganodeSize: 8 << 20, extentBytes: 64 << 20, legacy: legacy})
			const n = 20000
			put := func(i int) {
				k := mergeKey(i)
				var err error
				if legacy != 0 {
					err = tr.PutWord([]byte(k), []byte("v"+k), MakeWord(legacy+uint64(i), i%3 == 0, false))
				} else {
					err = tr.Put([]byte(k), []byte("v"+k))
				}
				if err != nil {
					t.Fatalf("put %q: %v", k, err)
				}
			}
			r := rand.New(rand.NewPCG(1, 2))
			for _, i := range r.Perm(n) {
				put(i)
			}
			vers := nodeVersions(tr)
			before := tr.Usage()
			freshBefore := tr.nextFresh()
			live := map[int]bool{}
			for i := range n {
				live[i] = true
			}
			for j, i := range r.Perm(n)[:n*9/10] {
				ok, err := tr.Delete([]byte(mergeKey(i)))
				if !ok || err != nil {
					t.Fatalf("delete %d: %v %v", i, ok, err)
				}
				delete(live, i)
				if j%2000 == 0 {
					vers = mustNotLower(t, tr, vers, "deletes")
					mustCheck(t, tr)
				}
			}
			vers = mustNotLower(t, tr, vers, "deletes")
			mustCheck(t, tr)
			after := tr.Usage()
			t.Logf("nodes in use: %d after %d inserts, %d after deleting 90%% (height %d -> %d); %d records",
				before.Nodes, n, after.Nodes, before.Height, after.Height, ext.inUse)
			if after.Nodes*4 > before.Nodes {
				t.Fatalf("%d nodes in use before the deletes, %d after: not given back", before.Nodes, after.Nodes)
			}
			for i := range n {
				got, err := tr.Get([]byte(mergeKey(i)), nil)
				if live[i] != (err == nil) || live[i] && string(got) != "v"+mergeKey(i) {
					t.Fatalf("get %d (live %v): %q %v", i, live[i], got, err)
				}
				if legacy != 0 && live[i] {
					_, w, _ := tr.GetWord([]byte(mergeKey(i)), nil)
					if w != MakeWord(legacy+uint64(i), i%3 == 0, false) {
						t.Fatalf("word of %d after merges: %v", i, w)
					}
				}
			}
			// Re-insert as many keys: the freed nodes are reused.
			for _, i := range r.Perm(n * 9 / 10) {
				put(n + i)
			}
			mustNotLower(t, tr, vers, "re-insert")
			mustCheck(t, tr)
			t.Logf("after re-inserting %d keys: %d nodes in use, fresh area %d -> %d nodes", n*9/10, tr.Usage().Nodes, freshBefore, tr.nextFresh())
			if tr.nextFresh() > freshBefore+freshBefore/10 {
				t.Fatalf("fresh area grew from %d to %d nodes: freed nodes not reused", freshBefore, tr.nextFresh())
			}
		})
	}
}

// TestMergeLegacyIntoVersioned: a tree written in legacy mode and switched
// to versioned mode merges legacy leaves into versioned ones, their entries
// taking U as they read before; words of versioned entries are unchanged.
func TestMergeLegacyIntoVersioned(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, meganodeSize: 4 << 20})
	const n = 3000
	for i := range n {
		mustPut(t, tr, mergeKey(i), "v"+mergeKey(i))
	}
	const u = 99
	if err := tr.SetVersioning(u); err != nil {
		t.Fatal(err)
	}
	// Rewrite every 10th key with a word: its leaf becomes versioned.
	words := map[int]Word{}
	for i := 0; i < n; i += 10 {
		w := MakeWord(u+1+uint64(i), i%20 == 0, false)
		if err := tr.PutWord([]byte(mergeKey(i)), []byte("w"+mergeKey(i)), w); err != nil {
			t.Fatal(err)
		}
		words[i] = w
	}
	before := tr.Usage().Nodes
	for i := range n {
		if i%10 != 0 && i%7 != 0 {
			if ok, err := tr.Delete([]byte(mergeKey(i))); !ok || err != nil {
				t.Fatalf("delete %d: %v %v", i, ok, err)
			}
		}
	}
	mustCheck(t, tr)
	t.Logf("nodes %d -> %d", before, tr.Usage().Nodes)
	if tr.Usage().Nodes*2 > before {
		t.Fatalf("nodes %d -> %d: not merged", before, tr.Usage().Nodes)
	}
	for i := range n {
		if i%10 != 0 && i%7 != 0 {
			continue
		}
		v, w, err := tr.GetWord([]byte(mergeKey(i)), nil)
		want, wv := MakeWord(u, false, false), "v"+mergeKey(i)
		if ww, ok := words[i]; ok {
			want, wv = ww, "w"+mergeKey(i)
		}
		if err != nil || string(v) != wv || w != want {
			t.Fatalf("key %d: %q %v %v, want %q %v", i, v, w, err, wv, want)
		}
	}
}

// TestMergeDeterministic: two trees given the same operations end with
// byte-identical meganodes and records (the apply path replays).
func TestMergeDeterministic(t *testing.T) {
	run := func() []byte {
		tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, meganodeSize: 2 << 20, extentBytes: 4 << 20})
		r := rand.New(rand.NewPCG(5, 6))
		for range 30000 {
			k := mergeKey(r.IntN(4000))
			if r.IntN(5) < 2 {
				if err := tr.Put([]byte(k), []byte("v"+k)); err != nil && !errors.Is(err, ErrNeedsSplit) {
					t.Fatal(err)
				}
			} else if _, err := tr.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		return bytes.Clone(tr.mem)
	}
	a, b := run(), run()
	if !bytes.Equal(a, b) {
		t.Fatal("same operations, different images")
	}
}

// TestMergeDuringSplit: deletes below the split key during every step of a
// meganode split merge only nodes whose range ends at or below it; the
// split completes and both meganodes check.
func TestMergeDuringSplit(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 4)
	x := r.format(t, 0, Full)
	keys := fillTo(t, x, 0.75, func(i int) string { return scattered(2 * i) }, 0, 1)
	merged := 0
	run := &splitRun{r: r, x: x, copyLeaves: 2, freeNodes: 2}
	run.at = func(step string, s *splitRun) {
		if step == "chose" || step == "freed" {
			return
		}
		sep := string(s.sep)
		before := x.Usage().Nodes
		// Delete most keys below sep, from the top down to the boundary.
		var kept []string
		for j, k := range keys {
			if k < sep && j%5 != 0 {
				if ok, err := x.Delete([]byte(k)); !ok || err != nil {
					t.Fatalf("%s: delete %q: %v %v", step, k, ok, err)
				}
				continue
			}
			kept = append(kept, k)
		}
		keys = kept
		merged += before - x.Usage().Nodes
		mustCheck(t, x)
		mustFind(t, r, x, keys)
		mustScan(t, r, x, keys)
	}
	y := run.run(t)
	if merged == 0 {
		t.Fatal("no node merged during the split")
	}
	mustFind(t, r, x, keys)
	mustScan(t, r, x, keys)
	mustCheckLinks(t, x, y)
}

// staleSearch is a one-sided reader's Sagiv search from an arbitrary
// (possibly stale: freed, reused, merged away) node pointer start, over
// CopyNode and View.StepFor only: a copy that is invalid or does not cover
// key restarts from the local root. It returns key's value, read through
// the leaf entry's CRC.
func staleSearch(tr *Tree, buf node, key []byte, start Ptr) ([]byte, bool, error) {
	p := start
	for steps := 0; steps < 1<<20; steps++ {
		r := CopyNode(buf, tr.nodeBytes(p))
		if r == Torn {
			runtime.Gosched()
			continue
		}
		if r != OK {
			p = tr.Root()
			continue
		}
		st := View(buf).StepFor(key)
		switch st.Covers {
		case AboveMax:
			if !tr.local(st.Next) {
				return nil, false, fmt.Errorf("key %q: right link %v leaves the meganode", key, st.Next)
			}
			p = st.Next
			continue
		case OutOfRange:
			p = tr.Root()
			continue
		case Corrupt:
			return nil, false, fmt.Errorf("node %v: corrupt copy", p)
		}
		if !st.Next.IsNil() {
			p = st.Next
			continue
		}
		if !st.Found {
			return nil, false, nil
		}
		ext, n, crc := View(buf).Extent(st.Index)
		rec := atomicmem.Alloc(roundUp8(n))
		atomicmem.Load(rec, tr.mem[ext.Offset():ext.Offset()+uint64(len(rec))])
		k, v, err := DecodeExtent(rec[:n], crc)
		if errors.Is(err, ErrTorn) {
			continue // the record was reused: read the leaf again
		}
		if err != nil || !bytes.Equal(k, key) {
			return nil, false, fmt.Errorf("record %v: %v (key %q)", ext, err, k)
		}
		return bytes.Clone(v), true, nil
	}
	return nil, false, fmt.Errorf("key %q: no leaf reached", key)
}

// TestMergeConcurrentReaders: while the writer fills a key range and
// empties it again (every cycle merges most leaves, frees their nodes and
// reuses them with the next inserts), readers Get, iterate, and search
// one-sided from stale pointers to any node of the meganode; stable keys
// are always found with their values, churned ones are absent or right.
func TestMergeConcurrentReaders(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, meganodeSize: 4 << 20, extentBytes: 32 << 20})
	const keys = 3000
	stable := func(i int) bool { return i%10 == 0 }
	for i := 0; i < keys; i += 10 {
		mustPut(t, tr, mergeKey(i), "v"+mergeKey(i))
	}
	cycles := 40
	if testing.Short() || raceEnabled {
		cycles = 6
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var reads atomic.Int64
	for id := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(id), 77))
			buf := node(atomicmem.Alloc(tr.nodeSize))
			var dst []byte
			for !stop.Load() {
				reads.Add(1)
				i := r.IntN(keys)
				k := []byte(mergeKey(i))
				var v []byte
				var found bool
				var err error
				switch r.IntN(3) {
				case 0:
					dst, err = tr.Get(k, dst[:0])
					v, found = dst, err == nil
					if errors.Is(err, ErrNotFound) {
						err = nil
					}
				case 1:
					slot := 1 + r.IntN(int(tr.size/uint64(tr.nodeSize))-1)
					v, found, err = staleSearch(tr, buf, k, MakePtr(tr.region, tr.base+uint64(slot*tr.nodeSize)))
				default:
					// A short forward or backward scan from k: stable keys
					// in the range are all there, in order.
					lo, hi := k, []byte(mergeKey(min(i+200, keys)))
					it := tr.NewIter(&IterOptions{Lower: lo, Upper: hi})
					var got []string
					if r.IntN(2) == 0 {
						for ok := it.First(); ok; ok = it.Next() {
							got = append(got, string(it.Key()))
						}
					} else {
						for ok := it.Last(); ok; ok = it.Prev() {
							got = append(got, string(it.Key()))
						}
						slices.Reverse(got)
					}
					err := it.Error()
					it.Close()
					if err != nil {
						errs <- err
						return
					}
					want := 0
					for j := i; j < min(i+200, keys); j++ {
						if stable(j) {
							want++
						}
					}
					have := 0
					for j, g := range got {
						if j > 0 && got[j-1] >= g {
							errs <- fmt.Errorf("scan from %q: %q after %q", lo, g, got[j-1])
							return
						}
						var n int
						fmt.Sscanf(g, "key%07d", &n)
						if stable(n) {
							have++
						}
					}
					if have != want {
						errs <- fmt.Errorf("scan [%q, %q): %d stable keys, want %d (%d keys)", lo, hi, have, want, len(got))
						return
					}
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if stable(i) && !found || found && string(v) != "v"+string(k) {
					errs <- fmt.Errorf("key %q (stable %v): found %v value %q", k, stable(i), found, v)
					return
				}
			}
		}()
	}
	w := rand.New(rand.NewPCG(3, 4))
	maxNodes, minNodes := 0, 1<<30
	for c := 0; c < cycles && len(errs) == 0; c++ {
		for _, i := range w.Perm(keys) {
			if !stable(i) {
				mustPut(t, tr, mergeKey(i), "v"+mergeKey(i))
			}
		}
		maxNodes = max(maxNodes, tr.Usage().Nodes)
		for _, i := range w.Perm(keys) {
			if !stable(i) {
				if ok, err := tr.Delete([]byte(mergeKey(i))); !ok || err != nil {
					t.Fatalf("delete %d: %v %v", i, ok, err)
				}
			}
		}
		minNodes = min(minNodes, tr.Usage().Nodes)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d cycles, %d reads; nodes in use between %d and %d; retries: torn %d invalid %d out-of-range %d",
		cycles, reads.Load(), minNodes, maxNodes, tr.Stats.Torn.Load(), tr.Stats.Invalid.Load(), tr.Stats.OutOfRange.Load())
	if minNodes*2 > maxNodes {
		t.Fatalf("nodes in use between %d and %d: emptied leaves were not merged", minNodes, maxNodes)
	}
}
