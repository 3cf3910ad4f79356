package blink

import (
	"errors"
	"slices"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// A remote split (paper §2.2: "The server copies the nodes in X_right to a
// new local or remote meganode asynchronously"): X's right half goes into
// a meganode of another region with copies of its records (FrozenRecords,
// AppendEntries with values), X links to it, and FreeRight frees X's
// copies of the moved records along with the nodes.
func TestMeganodeSplitRemote(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 2)
	x := r.format(t, 0, Full)
	keys := fillTo(t, x, 0.75, scattered, 0, 1)
	recordsBefore := r.ext.inUse

	// The other region: one meganode and its own extent area.
	const otherRegion = testRegion + 1
	size := uint64(tinyMeganode)
	mem := atomicmem.Alloc(int(size + 8<<20))
	ext := &testExtents{next: size, end: size + 8<<20, free: map[int][]uint64{}}

	sep, err := x.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Freeze(sep); err != nil {
		t.Fatal(err)
	}
	hx, _ := x.Header()
	y, err := Format(mem, Config{Region: otherRegion, Base: 0, Size: size, Level: 0, Bounds: Bounds{Min: sep, Max: hx.Bounds.Max, MaxInf: hx.Bounds.MaxInf}}, ext, Options{NodeSize: tinyNode})
	if err != nil {
		t.Fatal(err)
	}
	if err := y.BeginCopy(x.Right()); err != nil {
		t.Fatal(err)
	}
	for cursor := sep; cursor != nil; {
		var ents []Entry
		ents, cursor, err = x.FrozenRecords(cursor, 3, 64, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !e.Ref.Extent.IsNil() || string(e.Value) != "v"+string(e.Key) {
				t.Fatalf("entry %q: ref %v, value %q", e.Key, e.Ref.Extent, e.Value)
			}
		}
		if err := y.AppendEntries(ents); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.LinkRight(y.Root()); err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		if done, err = x.FreeRight(2); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(x.Thaw(), y.Thaw()); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, y)

	var right []string
	for _, k := range keys {
		if k >= string(sep) {
			right = append(right, k)
			mustGet(t, y, k, "v"+k)
			res, err := x.Search([]byte(k))
			if err != nil || res.Next != y.Root() {
				t.Fatalf("search %q in X: next %v (Y's root %v), %v", k, res.Next, y.Root(), err)
			}
		} else {
			mustGet(t, x, k, "v"+k)
		}
	}
	if len(right) == 0 || len(right) == len(keys) {
		t.Fatalf("split moved %d of %d keys", len(right), len(keys))
	}
	if got, want := r.ext.inUse, recordsBefore-len(right); got != want {
		t.Fatalf("X's region holds %d records after a remote split, want %d (the moved ones freed)", got, want)
	}
	if ext.inUse != len(right) {
		t.Fatalf("Y's region holds %d records, want %d", ext.inUse, len(right))
	}
	mustCheckLinks(t, x, y)
	// Y is an ordinary meganode now.
	mustPut(t, y, right[0], "new")
	mustGet(t, y, right[0], "new")
	it := y.NewIter(nil)
	defer it.Close()
	var got []string
	for it.First(); it.Valid(); it.Next() {
		got = append(got, string(it.Key()))
	}
	slices.Sort(right)
	if !slices.Equal(got, right) {
		t.Fatalf("Y holds %d keys, want %d", len(got), len(right))
	}
}
