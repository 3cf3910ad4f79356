package blink

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// wordedMeganode fills x (a leaf meganode in legacy mode) with keys,
// switches it to versioned mode with U = u, then writes words to a third
// of the keys and placeholders beside some: the mix of legacy leaves,
// versioned leaves and placeholders a split must carry. It returns the
// word each key (placeholders included) must have.
func wordedMeganode(t *testing.T, x *Tree, u uint64) map[string]Word {
	t.Helper()
	keys := fillTo(t, x, 0.6, scattered, 0, 1)
	if err := x.SetVersioning(u); err != nil {
		t.Fatal(err)
	}
	want := map[string]Word{}
	for i, k := range keys {
		want[k] = MakeWord(u, false, false)
		if i%3 != 0 {
			continue
		}
		w := MakeWord(u+uint64(i)+1, i%2 == 0, false)
		mustPutWord(t, x, k, "v"+k, w)
		want[k] = w
		if i%9 == 0 {
			ph := pad(k[:len(k)-1] + "+")
			if err := x.PutPlaceholder([]byte(ph), MakeWord(0, true, false)); err != nil {
				t.Fatal(err)
			}
			want[ph] = MakeWord(0, true, true)
		}
	}
	return want
}

// checkWords requires every key of want to read with its word from the
// meganode whose range holds it.
func checkWords(t *testing.T, trees []*Tree, want map[string]Word) {
	t.Helper()
	for k, w := range want {
		found := false
		for _, tr := range trees {
			res, err := tr.Search([]byte(k))
			if err != nil || !res.Next.IsNil() {
				continue
			}
			if hdr, _ := tr.Header(); !hdr.Bounds.Contains([]byte(k)) {
				continue
			}
			found = true
			if res.Word != w || res.Found == w.Placeholder() {
				t.Fatalf("%q in %v: found %v word %v, want %v", k, tr.HeaderPtr(), res.Found, res.Word, w)
			}
			if !w.Placeholder() {
				mustGetWord(t, tr, k, "v"+k, w)
			}
		}
		if !found {
			t.Fatalf("%q in no meganode", k)
		}
	}
}

// TestMeganodeSplitWords: a local split of a versioned meganode copies
// every entry with its word (legacy entries with U, now in versioned
// leaves of the new meganode) and placeholders as placeholders, sharing
// the records.
func TestMeganodeSplitWords(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 4)
	x := r.format(t, 0, Full)
	const u = 1000
	want := wordedMeganode(t, x, u)
	r.legacy = u // Y is formatted versioned, as the layer above must
	records := r.ext.inUse
	run := &splitRun{r: r, x: x, copyLeaves: 2, freeNodes: 3}
	y := run.run(t)
	if r.ext.inUse != records {
		t.Fatalf("%d records after a local split, %d before", r.ext.inUse, records)
	}
	checkWords(t, []*Tree{x, y}, want)
	// Every leaf of Y is versioned: its legacy entries carry U in words.
	y.mu.Lock()
	p := Ptr(y.mu.hdr.u64(hdrRoot))
	for n := y.nodeBytes(p); n.level() > 0; n = y.nodeBytes(p) {
		p = n.child(0)
	}
	for ; y.local(p); p = y.nodeBytes(p).rightLink() {
		if !y.nodeBytes(p).versioned() {
			y.mu.Unlock()
			t.Fatalf("legacy leaf %v in the new meganode", p)
		}
	}
	y.mu.Unlock()
	if v, uu := y.Versioning(); !v || uu != u {
		t.Fatalf("Y versioning %v %d", v, uu)
	}
}

// TestMeganodeSplitRemoteWords: FrozenRecords carries words and
// placeholders to a versioned meganode of another region, and
// AppendEntries refuses entries whose words do not match its mode.
func TestMeganodeSplitRemoteWords(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 2)
	x := r.format(t, 0, Full)
	const u = 77
	want := wordedMeganode(t, x, u)

	sep, err := x.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Freeze(sep); err != nil {
		t.Fatal(err)
	}
	hx, _ := x.Header()
	other := func(versioned bool, right Ptr) (*Tree, *testExtents) {
		size := uint64(tinyMeganode)
		mem := atomicmem.Alloc(int(size + 8<<20))
		ext := &testExtents{next: size, end: size + 8<<20, free: map[int][]uint64{}}
		cfg := Config{Region: testRegion + 1, Size: size, Bounds: Bounds{Min: sep, Max: hx.Bounds.Max, MaxInf: hx.Bounds.MaxInf}}
		if versioned {
			cfg.Versioned, cfg.Legacy = true, u
		}
		y, err := Format(mem, cfg, ext, Options{NodeSize: tinyNode})
		if err != nil {
			t.Fatal(err)
		}
		if err := y.BeginCopy(right); err != nil {
			t.Fatal(err)
		}
		return y, ext
	}
	ents, _, err := x.FrozenRecords(sep, 1, 0, nil)
	if err != nil || len(ents) == 0 {
		t.Fatalf("FrozenRecords: %d, %v", len(ents), err)
	}
	legacyY, _ := other(false, x.Right())
	if err := legacyY.AppendEntries(ents[:1]); !errors.Is(err, ErrNotVersioned) {
		t.Fatalf("entries with words into a legacy meganode: %v", err)
	}
	y, ext := other(true, x.Right())
	zero := ents[0]
	zero.Word = 0
	if err := y.AppendEntries([]Entry{zero}); !errors.Is(err, ErrNeedsWord) {
		t.Fatalf("an entry without a word into a versioned meganode: %v", err)
	}
	zero.Word = MakeWord(0, true, false)
	if err := y.AppendEntries([]Entry{zero}); !errors.Is(err, ErrNeedsWord) {
		t.Fatalf("a record with version 0 into a versioned meganode: %v", err)
	}
	if _, err := CopyRight(x, legacyY, sep, 1); !errors.Is(err, ErrSplitState) {
		t.Fatalf("CopyRight between modes: %v", err)
	}

	moved, placeholders := 0, 0
	for cursor := sep; cursor != nil; {
		var ents []Entry
		ents, cursor, err = x.FrozenRecords(cursor, 2, 64, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			w, ok := want[string(e.Key)]
			if !ok || e.Word != w {
				t.Fatalf("frozen entry %q: word %v, want %v", e.Key, e.Word, w)
			}
			if w.Placeholder() {
				placeholders++
				if e.Value != nil || !e.Ref.Extent.IsNil() {
					t.Fatalf("placeholder %q with a value or record", e.Key)
				}
			} else {
				moved++
			}
		}
		if err := y.AppendEntries(ents); err != nil {
			t.Fatal(err)
		}
	}
	if placeholders == 0 || ext.inUse != moved {
		t.Fatalf("%d placeholders moved, %d records in Y for %d moved keys", placeholders, ext.inUse, moved)
	}
	records := r.ext.inUse
	if err := x.LinkRight(y.Root()); err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		if done, err = x.FreeRight(3); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(x.Thaw(), y.Thaw()); err != nil {
		t.Fatal(err)
	}
	if r.ext.inUse != records-moved {
		t.Fatalf("X's region holds %d records, want %d", r.ext.inUse, records-moved)
	}
	mustCheck(t, y)
	checkWords(t, []*Tree{x, y}, want)
	// An aborted target with placeholders drops only its records.
	z, zext := other(true, 0)
	ents, _, err = y.FrozenRecords(sep, 1, 0, nil)
	_ = ents
	if err == nil {
		t.Fatal("FrozenRecords outside a split")
	}
	phEntry := Entry{Key: []byte(fmt.Sprintf("%sz", sep)), Word: MakeWord(0, true, true)}
	rec := Entry{Key: []byte(fmt.Sprintf("%sy", sep)), Value: []byte("v"), Word: 5}
	if err := z.AppendEntries([]Entry{rec, phEntry}); err != nil {
		t.Fatal(err)
	}
	if err := z.DropRecords(); err != nil || zext.inUse != 0 {
		t.Fatalf("DropRecords: %v, %d records left", err, zext.inUse)
	}
}
