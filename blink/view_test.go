package blink

import (
	"fmt"
	"testing"
)

// TestViewTraversal searches with View.StepFor the way a one-sided client
// does, and compares with the server-side Search.
func TestViewTraversal(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	for i := 0; i < 3000; i++ {
		mustPut(t, tr, fmt.Sprintf("k%06d", i*7), "v")
	}
	hb := make([]byte, 512)
	tr.NodeBytes(tr.HeaderPtr(), hb)
	h, r := DecodeHeader(hb)
	if r != OK || h.Height < 3 || h.Root != tr.Root() || !h.Bounds.MinInf || !h.Bounds.MaxInf {
		t.Fatalf("header %v %v", h, r)
	}
	buf := make([]byte, 512)
	for i := 0; i < 3000*7; i += 5 {
		key := []byte(fmt.Sprintf("k%06d", i))
		p := h.Root
		var st Step
		for hops := 0; ; hops++ {
			if hops > 100 {
				t.Fatal("no leaf reached")
			}
			tr.NodeBytes(p, buf)
			if r := CheckCopy(buf); r != OK {
				t.Fatalf("copy of %v: %v", p, r)
			}
			st = View(buf).StepFor(key)
			if st.Covers != OK && st.Covers != AboveMax {
				t.Fatalf("step %v", st.Covers)
			}
			if st.Next.IsNil() {
				break
			}
			p = st.Next
		}
		want := i%7 == 0
		if st.Found != want {
			t.Fatalf("%s: found %v, want %v", key, st.Found, want)
		}
		if want {
			ext, n, crc := View(buf).Extent(st.Index)
			res, err := tr.Search(key)
			if err != nil || res.Extent != ext || res.Len != n || res.CRC != crc {
				t.Fatalf("%s: view %v/%d/%x, search %+v %v", key, ext, n, crc, res, err)
			}
		}
	}
	if got, err := tr.Header(); err != nil || got.Root != h.Root {
		t.Fatalf("Tree.Header = %v, %v", got, err)
	}
}

// TestViewStepInnerMeganode: in a leaf of an inner meganode, StepFor names
// the entry whose child meganode covers the key.
func TestViewStepInnerMeganode(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, level: 1})
	for i, k := range []string{"d", "m", "t"} {
		if err := tr.InsertChild([]byte(k), MakePtr(9, uint64(i+1)*4096)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 512)
	tr.NodeBytes(tr.Root(), buf)
	if r := CheckCopy(buf); r != OK {
		t.Fatal(r)
	}
	cases := []struct {
		key   string
		index int
		found bool
	}{{"d", 0, true}, {"e", 0, false}, {"m", 1, true}, {"s", 1, false}, {"z", 2, false}}
	for _, c := range cases {
		st := View(buf).StepFor([]byte(c.key))
		if st.Covers != OK || st.Index != c.index || st.Found != c.found {
			t.Errorf("StepFor(%q) = %+v, want index %d found %v", c.key, st, c.index, c.found)
		}
		res, err := tr.Search([]byte(c.key))
		if err != nil || res.Child != View(buf).Child(c.index) {
			t.Errorf("Search(%q) child %v, view says %v (%v)", c.key, res.Child, View(buf).Child(c.index), err)
		}
	}
}
