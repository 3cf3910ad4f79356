package blink

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Scenario tests for node splits (paper §2.2: "If an insertion causes a leaf
// node L to split (because it is full), we lock L long enough to create a new
// node L' containing roughly half of L's contents, and set L's right-link
// pointer to L'. [...] The split key is then inserted into the parent as a
// separate, decoupled operation that may propagate further up the tree.")

// levelKeys returns, for one level, the keys of each node left to right,
// with each node's bounds, walking right links from the leftmost node.
func levelKeys(t *testing.T, tr *Tree, level int) []string {
	t.Helper()
	p := tr.Root()
	for {
		n := tr.nodeBytes(p)
		if n.level() == level {
			break
		}
		p = n.child(0)
	}
	var out []string
	for ; tr.local(p); p = tr.nodeBytes(p).rightLink() {
		n := tr.nodeBytes(p)
		var ks []string
		for i := 0; i < n.count(); i++ {
			ks = append(ks, strings.TrimRight(string(n.key(i)), "."))
		}
		out = append(out, fmt.Sprintf("[%s,%s)%s", fmtBound(n.minKey(), n.minInf(), "-inf"),
			fmtBound(n.maxKey(), n.maxInf(), "+inf"), strings.Join(ks, " ")))
	}
	return out
}

// pad makes every key 40 bytes so node capacities are predictable: a
// 512-byte leaf holds 7 such entries (2+2+40+20 = 64 bytes each).
func pad(k string) string { return k + strings.Repeat(".", 40-len(k)) }

func putKeys(t *testing.T, tr *Tree, keys ...string) {
	t.Helper()
	for _, k := range keys {
		mustPut(t, tr, pad(k), k)
	}
}

func leafCapacity(t *testing.T, tr *Tree) int {
	t.Helper()
	n := tr.nodeBytes(tr.Root())
	return (len(n) - offSlots - tailSize) / (slotSize + entrySize(40, extentPayload))
}

func TestSplitScenarios(t *testing.T) {
	base := []string{"k10", "k20", "k30", "k40", "k50", "k60", "k70"}
	cases := []struct {
		name   string
		insert string
		want   []string
	}{
		{"leftmost", "k05", []string{
			`[-inf,"k40`, `k05 k10 k20 k30`, `["k40`, `k40 k50 k60 k70`}},
		{"rightmost", "k99", []string{
			`[-inf,"k50`, `k10 k20 k30 k40`, `["k50`, `k50 k60 k70 k99`}},
		{"middle", "k45", []string{
			`[-inf,"k45`, `k10 k20 k30 k40`, `["k45`, `k45 k50 k60 k70`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
			putKeys(t, tr, base...)
			if got := leafCapacity(t, tr); got != len(base) {
				t.Fatalf("leaf holds %d 40-byte keys, scenario assumes %d", got, len(base))
			}
			if tr.height() != 1 {
				t.Fatalf("height %d before the split", tr.height())
			}
			putKeys(t, tr, c.insert)
			leaves := levelKeys(t, tr, 0)
			if len(leaves) != 2 {
				t.Fatalf("%d leaves after one split: %v", len(leaves), leaves)
			}
			got := strings.Join(leaves, " | ")
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("leaves %s: missing %s", got, w)
				}
			}
			// The split of the root leaf grew the tree by one level.
			if tr.height() != 2 {
				t.Errorf("height %d after the root leaf split, want 2", tr.height())
			}
			for _, k := range append(base, c.insert) {
				mustGet(t, tr, pad(k), k)
			}
		})
	}
}

// TestSplitCascadesToRoot fills the tree until a leaf split makes the parent
// split, and that the root, growing the height to 3; every step is checked.
func TestSplitCascadesToRoot(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	heights := map[int]int{}
	for i := 0; heights[3] == 0; i++ {
		if i > 10000 {
			t.Fatal("height never reached 3")
		}
		k := fmt.Sprintf("k%05d", (i*37)%10007)
		putKeys(t, tr, k)
		h := tr.height()
		if heights[h] == 0 {
			heights[h] = i + 1
			mustCheck(t, tr)
		}
	}
	if heights[2] == 0 || heights[3] <= heights[2] {
		t.Fatalf("heights reached at inserts %v", heights)
	}
	inner := levelKeys(t, tr, 1)
	if len(inner) < 2 {
		t.Fatalf("level 1 has %d nodes after the root split", len(inner))
	}
	root := levelKeys(t, tr, 2)
	if len(root) != 1 || !strings.HasPrefix(root[0], "[-inf,+inf)") {
		t.Fatalf("root level: %v", root)
	}
}

// TestFullMeganode: at the fill threshold, an insert of a new key returns
// ErrNeedsSplit and changes nothing; updates and deletes keep working.
func TestFullMeganode(t *testing.T) {
	tr, ext := newTestTree(t, testTreeOpts{nodeSize: 512, meganodeSize: 64 * 512, fill: 0.5})
	var n int
	var err error
	for n = 0; n < 10000; n++ {
		if err = tr.Put([]byte(pad(fmt.Sprintf("k%05d", n))), []byte("v")); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNeedsSplit) {
		t.Fatalf("after %d inserts: %v", n, err)
	}
	if used := tr.nodesInUse(); float64(used+tr.height()+1) <= 0.5*64 {
		t.Fatalf("refused at %d nodes in use, threshold not reached", used)
	}
	records := ext.inUse
	if _, gerr := tr.Get([]byte(pad(fmt.Sprintf("k%05d", n))), nil); gerr == nil {
		t.Fatal("refused key is present")
	}
	if ext.inUse != records {
		t.Fatal("refused insert leaked a record")
	}
	mustPut(t, tr, pad("k00000"), "updated")
	mustGet(t, tr, pad("k00000"), "updated")
	if ok, derr := tr.Delete([]byte(pad("k00001"))); !ok || derr != nil {
		t.Fatalf("delete when full: %v %v", ok, derr)
	}
}
