package client

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/locality"
)

// getAll checks that c.Get returns value(i, 0) for keys 0..n-1.
func getAll(t *testing.T, c *Client, n int) {
	t.Helper()
	ctx := testCtx(t, 20*time.Second)
	for i := range n {
		v, err := c.Get(ctx, key(i))
		if err != nil || !bytes.Equal(v, value(i, 0)) {
			t.Fatalf("Get %s = %q, %v; want %q", key(i), v, err, value(i, 0))
		}
	}
}

// leafRoot returns the local root of the leaf meganode holding key.
func (cl *testCluster) leafRoot(k []byte) (blink.Ptr, *blink.Tree) {
	m := cl.leafOf(k, false)
	return m.Tree().Root(), m.Tree()
}

// TestStaleCachedNode poisons the node cache with copies of other nodes
// under the pointers the traversal uses: a cached copy that does not
// cover the key is dropped and read fresh, and every result stays right.
func TestStaleCachedNode(t *testing.T) {
	const n = 300
	cl := newTestCluster(t, clusterSpec{servers: 2, splits: splitsFor(n, 3)})
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		t.Run(provider, func(t *testing.T) {
			cfg := testConfig(t, cl)
			cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.ClientOnly}, provider
			c := mustClient(t, cfg)
			mustPut(t, c, n)
			getAll(t, c, n) // warm the caches
			// Swap the cached copies of the three leaf meganodes' roots.
			var roots []blink.Ptr
			var copies [][]byte
			for _, i := range []int{0, n / 2, n - 1} {
				p, tree := cl.leafRoot(key(i))
				buf := make([]byte, 512)
				if !tree.NodeBytes(p, buf) || blink.CheckCopy(buf) != blink.OK {
					t.Fatalf("cannot copy root %v", p)
				}
				if _, ok := c.nodes.get(p); !ok {
					t.Fatalf("root %v of a leaf meganode not cached", p)
				}
				roots, copies = append(roots, p), append(copies, buf)
			}
			for i, p := range roots {
				c.nodes.put(p, copies[(i+1)%len(copies)])
			}
			before := c.Stats()
			getAll(t, c, n)
			after := c.Stats()
			if after.Retry("stale-cache") == before.Retry("stale-cache") {
				t.Errorf("no stale-cache retries counted (%v)", after.Retries)
			}
			if after.NodeCache.Invalidations == before.NodeCache.Invalidations {
				t.Error("no cached node was dropped")
			}
			for i, p := range roots {
				if v, ok := c.nodes.get(p); ok && bytes.Equal(v, copies[(i+1)%len(copies)]) {
					t.Errorf("poisoned copy of %v still cached", p)
				}
			}
		})
	}
}

// TestRightLinkDropsCachedParent checks paper §2.3: "if they follow a
// right-link pointer, they invalidate any information cached from the
// parent node". A cached parent goes stale when its child splits; a
// search through it lands left of the key, follows the right link, drops
// the parent, and the next search reads it fresh.
func TestRightLinkDropsCachedParent(t *testing.T) {
	cl := newTestCluster(t, clusterSpec{})
	cfg := testConfig(t, cl)
	cfg.Mode = locality.Mode{Kind: locality.ClientOnly}
	c := mustClient(t, cfg)
	ctx := testCtx(t, 20*time.Second)
	const n = 100
	mustPut(t, c, n)
	getAll(t, c, n)
	root, tree := cl.leafRoot(key(0))
	if _, ok := c.nodes.get(root); !ok {
		t.Fatal("local root not cached")
	}
	if h, _ := tree.Header(); h.Height != 2 {
		t.Fatalf("height %d, want 2 (the test relies on a root above the leaves)", h.Height)
	}
	// Split the leaf holding key 50 by inserting keys just after it, through
	// the tree directly so that the client's cached root stays stale.
	var extra [][]byte
	for j := range 40 {
		k := fmt.Appendf(nil, "%s-%02d", key(50), j)
		if err := tree.Put(k, k); err != nil {
			t.Fatal(err)
		}
		extra = append(extra, k)
	}
	before := c.Stats()
	last := extra[len(extra)-1]
	if v, err := c.Get(ctx, last); err != nil || !bytes.Equal(v, last) {
		t.Fatalf("Get %s = %q, %v", last, v, err)
	}
	after := c.Stats()
	if after.NodeCache.Invalidations == before.NodeCache.Invalidations {
		t.Fatal("following a right link did not drop the cached parent")
	}
	if _, ok := c.nodes.get(root); ok {
		t.Fatal("the stale parent is still cached")
	}
	// The next search reads the root fresh (and caches the new copy).
	for _, k := range extra {
		if v, err := c.Get(ctx, k); err != nil || !bytes.Equal(v, k) {
			t.Fatalf("Get %s = %q, %v", k, v, err)
		}
	}
	getAll(t, c, n)
}

// TestStalePathEntry plants path cache entries that lie: a leaf meganode
// claimed to cover keys of another, and a pointer that is not a
// meganode header. Both search methods drop them and restart from the
// root.
func TestStalePathEntry(t *testing.T) {
	const n = 300
	cl := newTestCluster(t, clusterSpec{servers: 2, splits: splitsFor(n, 3)})
	for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := testConfig(t, cl)
			cfg.Mode = mode
			c := mustClient(t, cfg)
			mustPut(t, c, n)
			other := cl.leafOf(key(n-1), false).Ptr()
			// The last leaf meganode "covers" everything at level 0.
			c.paths.insert(meganodeInfo{ptr: other, level: 0, height: 2, rng: keyRange{}})
			before := c.Stats()
			getAll(t, c, n/3)
			after := c.Stats()
			if after.PathCache.Invalidations == before.PathCache.Invalidations {
				t.Error("lying path entry not dropped")
			}
			// A tree node posing as a meganode header.
			c.paths.insert(meganodeInfo{ptr: other + 512, level: 0, height: 2, rng: keyRange{}})
			getAll(t, c, n)
			t.Logf("retries %v path %+v", c.Stats().Retries, c.Stats().PathCache)
		})
	}
}

// TestHopFromNodePointer: a server may answer a hop with Next pointing at
// any node of a meganode (the right link out of a split meganode leads to
// the new meganode's root node, not its header). A client-side hop that
// starts there walks from that node.
func TestHopFromNodePointer(t *testing.T) {
	cl := newTestCluster(t, clusterSpec{})
	cfg := testConfig(t, cl)
	cfg.Mode = locality.Mode{Kind: locality.ClientOnly}
	c := mustClient(t, cfg)
	mustPut(t, c, 50)
	root, _ := cl.leafRoot(key(7))
	ctx := testCtx(t, 5*time.Second)
	for _, i := range []int{0, 7, 49} {
		op := searchOp{c: c, kind: opGet, key: key(i), t: c.topo.Load(), sc: c.getScratch(512)}
		h := hopState{meganodeInfo: meganodeInfo{ptr: root, level: -1}}
		_, done, err := op.clientHop(ctx, &h)
		if err != nil || !done || !op.res.found || !bytes.Equal(op.res.value, value(i, 0)) {
			t.Fatalf("hop from node %v for %s: done %v found %v value %q, %v", root, key(i), done, op.res.found, op.res.value, err)
		}
	}
}
