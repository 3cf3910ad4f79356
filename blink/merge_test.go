package blink

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
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
