package blink

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/testutil"
)

func TestWordBits(t *testing.T) {
	cases := []struct {
		v      uint64
		lk, ph bool
		raw    Word
	}{
		{0, false, false, 0},
		{1, false, false, 1},
		{MaxVersion, false, false, 1<<62 - 1},
		{5, true, false, 1<<62 | 5},
		{0, false, true, 1 << 63},
		{7, true, true, 3<<62 | 7},
	}
	for _, c := range cases {
		w := MakeWord(c.v, c.lk, c.ph)
		if w != c.raw || w.Version() != c.v || w.Locked() != c.lk || w.Placeholder() != c.ph {
			t.Errorf("MakeWord(%d, %v, %v) = %#x (%d %v %v), want %#x", c.v, c.lk, c.ph, uint64(w), w.Version(), w.Locked(), w.Placeholder(), uint64(c.raw))
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MakeWord above MaxVersion did not panic")
		}
	}()
	MakeWord(MaxVersion+1, false, false)
}

func mustPutWord(tb testing.TB, tr *Tree, k, v string, w Word) {
	tb.Helper()
	if err := tr.PutWord([]byte(k), []byte(v), w); err != nil {
		tb.Fatalf("PutWord(%q): %v", k, err)
	}
}

func mustGetWord(tb testing.TB, tr *Tree, k, want string, ww Word) {
	tb.Helper()
	got, w, err := tr.GetWord([]byte(k), nil)
	if err != nil || string(got) != want || w != ww {
		tb.Fatalf("GetWord(%q) = %q, %v, %v; want %q, %v", k, got, w, err, want, ww)
	}
}

// TestVersioningModes: legacy mode refuses word operations, versioned
// mode refuses Put, the mode is in the header (Open, DecodeHeader) and
// SetVersioning is idempotent for one U only.
func TestVersioningModes(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	if v, u := tr.Versioning(); v || u != 0 {
		t.Fatalf("new tree: versioning %v %d", v, u)
	}
	mustPut(t, tr, "a", "1")
	for name, err := range map[string]error{
		"PutWord":        tr.PutWord([]byte("a"), []byte("x"), 5),
		"SetWord":        tr.SetWord([]byte("a"), 5),
		"PutPlaceholder": tr.PutPlaceholder([]byte("b"), 0),
	} {
		if !errors.Is(err, ErrNotVersioned) {
			t.Errorf("%s in legacy mode: %v", name, err)
		}
	}
	if _, w, err := tr.GetWord([]byte("a"), nil); w != 0 || err != nil {
		t.Errorf("GetWord in legacy mode: %v %v", w, err)
	}
	for _, u := range []uint64{0, MaxVersion + 1} {
		if err := tr.SetVersioning(u); !errors.Is(err, ErrVersioning) {
			t.Errorf("SetVersioning(%d): %v", u, err)
		}
	}
	h0, _ := tr.Header()
	if err := tr.SetVersioning(100); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetVersioning(100); err != nil {
		t.Fatalf("SetVersioning again with the same U: %v", err)
	}
	if err := tr.SetVersioning(101); !errors.Is(err, ErrVersioning) {
		t.Fatalf("SetVersioning with another U: %v", err)
	}
	h, err := tr.Header()
	if err != nil || !h.Versioned || h.Legacy != 100 || h.Version != h0.Version+2 || h0.Versioned {
		t.Fatalf("header after SetVersioning: %+v (before %+v), %v", h, h0, err)
	}
	if err := tr.Put([]byte("a"), []byte("2")); !errors.Is(err, ErrNeedsWord) {
		t.Fatalf("Put in versioned mode: %v", err)
	}
	mustGetWord(t, tr, "a", "1", MakeWord(100, false, false))
	re, err := Open(tr.mem, tr.region, tr.base, tr.ext, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, u := re.Versioning(); !v || u != 100 {
		t.Fatalf("Open: versioning %v %d", v, u)
	}
	// Config.Versioned: a meganode formatted versioned.
	vt, _ := newTestTree(t, testTreeOpts{nodeSize: 512, legacy: 7})
	if v, u := vt.Versioning(); !v || u != 7 {
		t.Fatalf("formatted versioned: %v %d", v, u)
	}
	if b := copyOK(t, vt, vt.Root()); !View(b).Versioned() {
		t.Fatal("root leaf of a versioned meganode is not versioned")
	}
	mem := atomicmem.Alloc(1 << 20)
	for _, c := range []Config{{Size: 64 << 10, Bounds: Full, Versioned: true}, {Size: 64 << 10, Bounds: Full, Legacy: 3}} {
		if _, err := Format(mem, c, &testExtents{}, Options{NodeSize: 512}); !errors.Is(err, ErrVersioning) {
			t.Errorf("Format(%+v): %v", c, err)
		}
	}
}

// TestWordsAPI drives every word operation on a versioned tree.
func TestWordsAPI(t *testing.T) {
	tr, ext := newTestTree(t, testTreeOpts{nodeSize: 512, legacy: 10})
	mustPutWord(t, tr, "b", "vb", MakeWord(11, false, false))
	mustPutWord(t, tr, "d", "vd", MakeWord(12, true, false))
	mustGetWord(t, tr, "b", "vb", MakeWord(11, false, false))
	mustGetWord(t, tr, "d", "vd", MakeWord(12, true, false))
	if err := tr.PutWord([]byte("e"), []byte("x"), MakeWord(0, true, false)); !errors.Is(err, ErrNeedsWord) {
		t.Fatalf("PutWord with version 0: %v", err)
	}
	// A placeholder bit in PutWord's word is cleared: the entry has a record.
	mustPutWord(t, tr, "b", "vb2", MakeWord(13, false, true))
	mustGetWord(t, tr, "b", "vb2", MakeWord(13, false, false))

	// SetWord changes the word only.
	if err := tr.SetWord([]byte("b"), MakeWord(14, true, false)); err != nil {
		t.Fatal(err)
	}
	mustGetWord(t, tr, "b", "vb2", MakeWord(14, true, false))
	if err := tr.SetWord([]byte("zz"), 5); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetWord of a missing key: %v", err)
	}
	if err := tr.SetWord([]byte("b"), MakeWord(0, true, false)); !errors.Is(err, ErrNeedsWord) {
		t.Fatalf("SetWord to version 0: %v", err)
	}
	v0 := copyOK(t, tr, tr.Root()).headVersion()
	if err := tr.SetWord([]byte("b"), MakeWord(14, true, false)); err != nil {
		t.Fatal(err)
	}
	if v := copyOK(t, tr, tr.Root()).headVersion(); v != v0 {
		t.Fatalf("an unchanged word published the leaf: %d -> %d", v0, v)
	}

	// Placeholders: invisible to reads, visible to Search's Word and View.
	records := ext.inUse
	if err := tr.PutPlaceholder([]byte("c"), MakeWord(0, true, false)); err != nil {
		t.Fatal(err)
	}
	if ext.inUse != records {
		t.Fatal("a placeholder allocated a record")
	}
	if err := tr.PutPlaceholder([]byte("b"), 0); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("PutPlaceholder over a record: %v", err)
	}
	ph := MakeWord(0, true, true)
	if _, err := tr.Get([]byte("c"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a placeholder: %v", err)
	}
	if _, _, err := tr.GetWord([]byte("c"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetWord of a placeholder: %v", err)
	}
	if ok, err := tr.Contains([]byte("c")); ok || err != nil {
		t.Fatalf("Contains of a placeholder: %v %v", ok, err)
	}
	res, err := tr.Search([]byte("c"))
	if err != nil || res.Found || res.Word != ph || !res.Extent.IsNil() {
		t.Fatalf("Search of a placeholder: %+v %v", res, err)
	}
	if _, _, err := tr.Value(res, []byte("c"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Value of a placeholder search: %v", err)
	}
	if res, _ := tr.Search([]byte("d")); !res.Found || res.Word != MakeWord(12, true, false) {
		t.Fatalf("Search of d: %+v", res)
	}
	// SetWord keeps the placeholder a placeholder; PutPlaceholder again
	// changes its word.
	if err := tr.SetWord([]byte("c"), MakeWord(3, false, false)); err != nil {
		t.Fatal(err)
	}
	if res, _ := tr.Search([]byte("c")); res.Found || res.Word != MakeWord(3, false, true) {
		t.Fatalf("placeholder after SetWord: %+v", res)
	}
	if err := tr.PutPlaceholder([]byte("c"), MakeWord(0, true, false)); err != nil {
		t.Fatal(err)
	}
	buf := copyOK(t, tr, tr.Root())
	v := View(buf)
	st := v.StepFor([]byte("c"))
	if !v.Versioned() || st.Found || !v.Placeholder(st.Index) || v.Word(st.Index) != ph {
		t.Fatalf("view of the placeholder: step %+v, word %v", st, v.Word(st.Index))
	}
	if st := v.StepFor([]byte("d")); !st.Found || v.Word(st.Index) != MakeWord(12, true, false) || v.Placeholder(st.Index) {
		t.Fatalf("view of d: %+v", st)
	}

	// Iteration and scans skip placeholders, at either end of a leaf too.
	for _, k := range []string{"a", "f"} {
		if err := tr.PutPlaceholder([]byte(k), MakeWord(1, true, false)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	err = tr.ScanWords(ScanOptions{}, func(k, v []byte, w Word) bool {
		got = append(got, fmt.Sprintf("%s=%s/%v", k, v, w))
		return true
	})
	if want := "b=vb2/v14 locked d=vd/v12 locked"; err != nil || strings.Join(got, " ") != want {
		t.Fatalf("ScanWords = %v, %v; want %s", got, err, want)
	}
	got = got[:0]
	tr.Scan(ScanOptions{Reverse: true}, func(k, v []byte) bool { got = append(got, string(k)); return true })
	if strings.Join(got, " ") != "d b" {
		t.Fatalf("reverse Scan = %v", got)
	}
	it := tr.NewIter(nil)
	for _, c := range []struct {
		op   func() bool
		want string
	}{
		{it.First, "b"}, {it.Next, "d"}, {it.Next, ""}, {it.Last, "d"}, {it.Prev, "b"}, {it.Prev, ""},
		{func() bool { return it.SeekGE([]byte("c")) }, "d"}, {func() bool { return it.SeekLT([]byte("d")) }, "b"},
		{func() bool { return it.SeekGE([]byte("e")) }, ""}, {func() bool { return it.SeekLT([]byte("b")) }, ""},
	} {
		ok := c.op()
		if ok != (c.want != "") || ok && string(it.Key()) != c.want {
			t.Fatalf("iterator at %q (%v), want %q", it.Key(), ok, c.want)
		}
		if ok && c.want == "d" && it.Word() != MakeWord(12, true, false) {
			t.Fatalf("Iter.Word at d: %v", it.Word())
		}
	}
	it.Close()

	// PutWord over a placeholder gives it a record; Delete removes either.
	mustPutWord(t, tr, "c", "vc", MakeWord(20, false, false))
	mustGetWord(t, tr, "c", "vc", MakeWord(20, false, false))
	if ext.inUse != records+1 {
		t.Fatalf("%d records, want %d", ext.inUse, records+1)
	}
	for _, k := range []string{"a", "c"} {
		if ok, err := tr.Delete([]byte(k)); !ok || err != nil {
			t.Fatalf("Delete(%q): %v %v", k, ok, err)
		}
	}
	if ext.inUse != records {
		t.Fatalf("%d records after deletes, want %d", ext.inUse, records)
	}
	if res, _ := tr.Search([]byte("a")); res.Found || res.Word != 0 {
		t.Fatalf("deleted placeholder: %+v", res)
	}
}

// TestLegacyLeafUpgrade: a tree switched to versioned mode reads its
// legacy leaves with U, and rewrites a leaf versioned when a write changes
// it, splitting it when the words no longer fit.
func TestLegacyLeafUpgrade(t *testing.T) {
	tr, ext := newTestTree(t, testTreeOpts{nodeSize: 512})
	// Small keys: a leaf of them is full long before the words fit.
	var keys []string
	for i := 0; i < 2000; i++ {
		k := fmt.Sprintf("%03x", i*7919%4096)
		mustPut(t, tr, k, "v"+k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	const u = 500
	if err := tr.SetVersioning(u); err != nil {
		t.Fatal(err)
	}
	legacyLeaves := func() (legacy, versioned int) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		p := Ptr(tr.mu.hdr.u64(hdrRoot))
		for n := tr.nodeBytes(p); n.level() > 0; n = tr.nodeBytes(p) {
			p = n.child(0)
		}
		for ; tr.local(p); p = tr.nodeBytes(p).rightLink() {
			if tr.nodeBytes(p).versioned() {
				versioned++
			} else {
				legacy++
			}
		}
		return legacy, versioned
	}
	l0, v0 := legacyLeaves()
	if v0 != 0 {
		t.Fatalf("%d versioned leaves before any write", v0)
	}
	uw := MakeWord(u, false, false)
	for _, k := range keys[:20] {
		mustGetWord(t, tr, k, "v"+k, uw)
	}
	// Every entry reads as U through every reader.
	n := 0
	tr.ScanWords(ScanOptions{}, func(k, v []byte, w Word) bool {
		if w != uw {
			t.Fatalf("ScanWords %q: word %v", k, w)
		}
		n++
		return true
	})
	if n != len(keys) {
		t.Fatalf("scanned %d keys", n)
	}
	// Rewrite every leaf through writes of each kind.
	nodes0 := tr.Usage().Nodes
	for i, k := range keys {
		var err error
		switch i % 5 {
		case 0:
			err = tr.SetWord([]byte(k), MakeWord(u+1, true, false))
		case 1:
			err = tr.PutWord([]byte(k), []byte("n"+k), MakeWord(u+2, false, false))
		case 2:
			var ok bool
			ok, err = tr.Delete([]byte(k))
			if !ok {
				err = fmt.Errorf("not found")
			}
		}
		if err != nil {
			t.Fatalf("write %d of %q: %v", i%5, k, err)
		}
		if i%97 == 0 {
			mustCheck(t, tr)
		}
	}
	l1, v1 := legacyLeaves()
	if l1 != 0 || v1 <= l0 || tr.Usage().Nodes <= nodes0 {
		t.Fatalf("after writing every leaf: %d legacy, %d versioned leaves (%d legacy before), %d nodes (%d before)", l1, v1, l0, tr.Usage().Nodes, nodes0)
	}
	for i, k := range keys {
		switch i % 5 {
		case 0:
			mustGetWord(t, tr, k, "v"+k, MakeWord(u+1, true, false))
		case 1:
			mustGetWord(t, tr, k, "n"+k, MakeWord(u+2, false, false))
		case 2:
			if _, _, err := tr.GetWord([]byte(k), nil); !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted %q: %v", k, err)
			}
		default:
			mustGetWord(t, tr, k, "v"+k, uw)
		}
	}
	if ext.inUse != len(keys)-len(keys)/5 {
		t.Fatalf("%d records for %d keys", ext.inUse, len(keys)-len(keys)/5)
	}
}

// TestUpgradeNeedsSplitChangesNothing: a write to an existing key whose
// legacy leaf must split to take words, in a meganode with no node left,
// returns ErrNeedsSplit and changes nothing.
func TestUpgradeNeedsSplitChangesNothing(t *testing.T) {
	tr, ext := newTestTree(t, testTreeOpts{nodeSize: 512, meganodeSize: 16 * 512, fill: 1})
	var keys []string
	for i := 0; ; i++ {
		k := fmt.Sprintf("%03x", i*7919%4096)
		if err := tr.Put([]byte(k), []byte("v")); errors.Is(err, ErrNeedsSplit) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := tr.SetVersioning(9); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, k := range keys {
		snap := bytes.Clone(tr.mem[:16*512])
		allocs := ext.allocCalls
		err := tr.PutWord([]byte(k), []byte("w"), 10)
		if errors.Is(err, ErrNeedsSplit) {
			refused++
			if !bytes.Equal(snap, tr.mem[:16*512]) || ext.allocCalls != allocs {
				t.Fatalf("refused PutWord(%q) changed the meganode or allocated", k)
			}
			mustGetWord(t, tr, k, "v", 9)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		mustGetWord(t, tr, k, "w", 10)
	}
	if refused == 0 {
		t.Fatal("no write was refused in a full meganode")
	}
}

// TestGoldenVersionedLeaf pins the byte layout of a versioned leaf and of
// a versioned meganode header.
func TestGoldenVersionedLeaf(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, bounds: &Bounds{Min: []byte("a"), Max: []byte("m")}})
	mustPut(t, tr, "banana", "yellow")
	mustPut(t, tr, "apple", "red")
	if err := tr.SetVersioning(41); err != nil {
		t.Fatal(err)
	}
	// The write rewrites the legacy leaf: apple keeps U.
	mustPutWord(t, tr, "cherry", "dark red", MakeWord(42, false, false))
	if err := tr.SetWord([]byte("banana"), MakeWord(43, true, false)); err != nil {
		t.Fatal(err)
	}
	if err := tr.PutPlaceholder([]byte("date"), MakeWord(0, true, false)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 512)
	tr.NodeBytes(tr.Root(), b)
	testutil.Golden(t, "leaf.versioned.golden", AnnotatedHex(b), "memory and wire format")
	testutil.Golden(t, "leaf.versioned.describe.golden", DescribeNode(b)+"\n", "memory and wire format")
	h := make([]byte, 512)
	tr.NodeBytes(tr.HeaderPtr(), h)
	testutil.Golden(t, "header.versioned.golden", DescribeNode(h)+"\n", "memory and wire format")
	if le.Uint64(h[512-16:]) != 41 || h[offFlags]&flagVersioned == 0 {
		t.Fatalf("header: flags %#x, U at NodeSize-16 %d", h[offFlags], le.Uint64(h[512-16:]))
	}
}

// TestViewWords decodes words from CheckCopy'd copies of versioned and
// legacy leaves, as a one-sided reader does.
func TestViewWords(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	for i := 0; i < 300; i++ {
		mustPut(t, tr, fmt.Sprintf("k%04d", i), "v")
	}
	if err := tr.SetVersioning(77); err != nil {
		t.Fatal(err)
	}
	want := map[string]Word{}
	for i := 0; i < 100; i += 3 {
		k := fmt.Sprintf("k%04d", i)
		w := MakeWord(uint64(100+i), i%2 == 0, false)
		mustPutWord(t, tr, k, "w", w)
		want[k] = w
	}
	for i := 1000; i < 1100; i += 7 {
		k := fmt.Sprintf("k%04d", i)
		if err := tr.PutPlaceholder([]byte(k), MakeWord(0, true, false)); err != nil {
			t.Fatal(err)
		}
		want[k] = MakeWord(0, true, true)
	}
	buf := make([]byte, 512)
	seen, legacy := 0, 0
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for i := 0; i < 1100; i++ {
			if !yield(fmt.Sprintf("k%04d", i)) {
				return
			}
		}
	}) {
		res, err := tr.Search([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		tr.NodeBytes(res.Leaf, buf)
		if r := CheckCopy(buf); r != OK {
			t.Fatalf("copy of %v: %v", res.Leaf, r)
		}
		v := View(buf)
		st := v.StepFor([]byte(k))
		w, ok := want[k]
		switch {
		case ok:
			if !v.Versioned() || v.Word(st.Index) != w || st.Found == w.Placeholder() || res.Word != w {
				t.Fatalf("%s: view versioned %v word %v found %v, search %v; want %v", k, v.Versioned(), v.Word(st.Index), st.Found, res.Word, w)
			}
			seen++
		case st.Found && !v.Versioned():
			if v.Word(st.Index) != 0 || res.Word != MakeWord(77, false, false) {
				t.Fatalf("%s in a legacy leaf: view word %v, search word %v", k, v.Word(st.Index), res.Word)
			}
			legacy++
		case st.Found:
			if v.Word(st.Index) != MakeWord(77, false, false) {
				t.Fatalf("%s rewritten with its leaf: word %v", k, v.Word(st.Index))
			}
		}
	}
	if seen != len(want) || legacy == 0 {
		t.Fatalf("%d of %d written keys seen, %d in legacy leaves", seen, len(want), legacy)
	}
	// A pointer node with the versioned flag does not decode.
	tr.NodeBytes(tr.Root(), buf)
	if View(buf).Level() == 0 {
		t.Fatal("root is a leaf")
	}
	buf[offFlags] |= flagVersioned
	if r := CheckCopy(buf); r != Corrupt {
		t.Fatalf("versioned inner node: %v", r)
	}
}

// TestGetWordNoAllocations pins GetWord's allocation-free path.
func TestGetWordNoAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("coverage and the race detector change allocation behaviour")
	}
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, legacy: 1})
	keys := make([][]byte, 3000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%06d", i*13%3000))
		if err := tr.PutWord(keys[i], []byte("value"), MakeWord(uint64(i+2), false, false)); err != nil {
			t.Fatal(err)
		}
	}
	dst := make([]byte, 0, 64)
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		if _, _, err := tr.GetWord(keys[i%len(keys)], dst[:0]); err != nil {
			t.Fatal(err)
		}
		i++
	}); a != 0 {
		t.Errorf("GetWord: %v allocs per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		if err := tr.PutWord(keys[i%len(keys)], []byte("other"), MakeWord(uint64(i+5000), false, false)); err != nil {
			t.Fatal(err)
		}
		i++
	}); a != 0 {
		t.Errorf("PutWord (update): %v allocs per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		if err := tr.SetWord(keys[i%len(keys)], MakeWord(uint64(i+9000), true, false)); err != nil {
			t.Fatal(err)
		}
		i++
	}); a != 0 {
		t.Errorf("SetWord: %v allocs per call", a)
	}
}

// TestTornSetWord: a word change is published with the node version
// protocol, one publish and an even version above the last.
func TestTornSetWord(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, legacy: 3})
	for _, i := range []int{10, 20, 30} {
		if err := tr.PutWord(tornKey(i), tornValue(i), MakeWord(uint64(i), false, false)); err != nil {
			t.Fatal(err)
		}
	}
	pz := newPauser(t, tr)
	leaf := tr.Root()
	v0 := copyOK(t, tr, leaf).headVersion()
	pz.arm(1)
	done := goWrite(func() error { return tr.SetWord(tornKey(20), MakeWord(99, true, false)) })
	if ev := pz.waitPause(t, done); ev.p != leaf {
		t.Fatalf("paused in %v, want the leaf %v", ev.p, leaf)
	}
	assertTorn(t, tr, leaf, tornKey(20))
	pz.resume()
	waitWriter(t, done)
	n := copyOK(t, tr, leaf)
	i, _ := n.lowerBound(tornKey(20))
	if n.headVersion() != v0+2 || View(n).Word(i) != MakeWord(99, true, false) || pz.calls.Load() != 1 {
		t.Fatalf("after SetWord: version %d (was %d), word %v, %d publishes", n.headVersion(), v0, View(n).Word(i), pz.calls.Load())
	}
	if got := leafValue(t, tr, n, tornKey(20)); got != string(tornValue(20)) {
		t.Fatalf("record after SetWord: %q", got)
	}
}

// TestTornUpgradeSplit pauses in each publish of a legacy leaf's rewrite
// that splits it: the new versioned right half, the versioned left half,
// then (the root leaf split) the new root and the header. Readers see the
// legacy leaf, whole, until the left half is published, and U words
// throughout.
func TestTornUpgradeSplit(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, maxRestarts: 1000})
	// Small entries: 14 legacy entries fit, not with words.
	var all []int
	for i := 0; i < 20; i++ {
		k := []byte(fmt.Sprintf("%02d", i))
		if err := tr.Put(k, k); err != nil {
			t.Fatal(err)
		}
		all = append(all, i)
		if tr.height() > 1 {
			t.Fatalf("root split after %d keys", i+1)
		}
		if n := tr.nodeBytes(tr.Root()); n.usedBytes()+n.count()*8 > 512 {
			break
		}
	}
	leaf := tr.Root()
	old := copyOK(t, tr, leaf)
	if err := tr.SetVersioning(5); err != nil {
		t.Fatal(err)
	}
	getAll := func() {
		t.Helper()
		for _, i := range all {
			k := []byte(fmt.Sprintf("%02d", i))
			v, w, err := tr.GetWord(k, nil)
			if err != nil || !bytes.Equal(v, k) || w != 5 {
				t.Fatalf("GetWord(%s) while paused = %q, %v, %v", k, v, w, err)
			}
		}
	}
	pz := newPauser(t, tr)
	pz.arm(1, 2, 3, 4, 5)
	done := goWrite(func() error { return tr.SetWord([]byte("00"), MakeWord(6, true, false)) })
	ev := pz.waitPause(t, done)
	right := ev.p
	if right == leaf || right == tr.HeaderPtr() {
		t.Fatalf("publish 1 in %v, want a new right half", right)
	}
	assertTorn(t, tr, right, nil)
	if got := copyOK(t, tr, leaf); !bytes.Equal(got[8:], old[8:]) {
		t.Fatal("the legacy leaf changed before its right half was complete")
	}
	getAll()
	pz.resume()
	ev = pz.waitPause(t, done)
	if ev.p != leaf {
		t.Fatalf("publish 2 in %v, want the leaf %v", ev.p, leaf)
	}
	assertTorn(t, tr, leaf, []byte("00"))
	if r := copyOK(t, tr, right); !View(r).Versioned() || View(r).Word(0) != 5 {
		t.Fatalf("right half: versioned %v word %v", View(r).Versioned(), View(r).Word(0))
	}
	pz.resume()
	ev = pz.waitPause(t, done) // the new root
	if l := copyOK(t, tr, leaf); !View(l).Versioned() || l.rightLink() != right {
		t.Fatalf("left half: versioned %v right link %v", View(l).Versioned(), l.rightLink())
	}
	getAll()
	pz.resume()
	ev = pz.waitPause(t, done)
	if ev.p != tr.HeaderPtr() {
		t.Fatalf("publish 4 in %v, want the header", ev.p)
	}
	pz.resume()
	ev = pz.waitPause(t, done) // the word itself
	if ev.p != leaf {
		t.Fatalf("publish 5 in %v, want the leaf", ev.p)
	}
	pz.resume()
	waitWriter(t, done)
	if _, w, err := tr.GetWord([]byte("00"), nil); err != nil || w != MakeWord(6, true, false) {
		t.Fatalf("after: %v %v", w, err)
	}
}
