package blink

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestPutGetDelete(t *testing.T) {
	tr, ext := newTestTree(t, testTreeOpts{})
	mustPut(t, tr, "b", "2")
	mustPut(t, tr, "a", "1")
	mustPut(t, tr, "c", "3")
	mustGet(t, tr, "a", "1")
	mustGet(t, tr, "b", "2")
	mustPut(t, tr, "b", "two")
	mustGet(t, tr, "b", "two")
	if _, err := tr.Get([]byte("zz"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	ok, err := tr.Delete([]byte("a"))
	if !ok || err != nil {
		t.Fatalf("Delete(a) = %v, %v", ok, err)
	}
	if ok, _ := tr.Delete([]byte("a")); ok {
		t.Fatal("second Delete(a) found the key")
	}
	if _, err := tr.Get([]byte("a"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted: %v", err)
	}
	if ext.inUse != 2 {
		t.Fatalf("%d records in use, want 2 (update and delete must free)", ext.inUse)
	}
	if ok, _ := tr.Contains([]byte("c")); !ok {
		t.Fatal("Contains(c) = false")
	}
}

func TestLimits(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{})
	big := bytes.Repeat([]byte("k"), 129)
	cases := []struct {
		name string
		key  []byte
		val  []byte
		want error
	}{
		{"empty key", nil, []byte("v"), ErrEmptyKey},
		{"key 129 bytes", big, []byte("v"), ErrKeyTooLarge},
		{"value over 1 MiB", []byte("k"), make([]byte, 1<<20+1), ErrValueTooLarge},
	}
	for _, c := range cases {
		if err := tr.Put(c.key, c.val); !errors.Is(err, c.want) {
			t.Errorf("%s: Put = %v, want %v", c.name, err, c.want)
		}
	}
	if err := tr.Put(big[:128], make([]byte, 1<<20)); err != nil {
		t.Fatalf("largest key and value: %v", err)
	}
	got, err := tr.Get(big[:128], nil)
	if err != nil || len(got) != 1<<20 {
		t.Fatalf("Get largest: %d bytes, %v", len(got), err)
	}
}

func TestManyKeysSplitAndGrow(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	const n = 20000
	for i := 0; i < n; i++ {
		mustPut(t, tr, fmt.Sprintf("key%08d", i*7919%n), fmt.Sprint(i))
	}
	if h := tr.height(); h < 3 {
		t.Fatalf("height %d after %d inserts, want >= 3", h, n)
	}
	for i := 0; i < n; i++ {
		mustGet(t, tr, fmt.Sprintf("key%08d", i*7919%n), fmt.Sprint(i))
	}
	mustCheck(t, tr)
	it := tr.NewIter(nil)
	c := 0
	var prev []byte
	for ok := it.First(); ok; ok = it.Next() {
		if prev != nil && bytes.Compare(prev, it.Key()) >= 0 {
			t.Fatalf("out of order: %q then %q", prev, it.Key())
		}
		prev = append(prev[:0], it.Key()...)
		c++
	}
	if c != n || it.Error() != nil {
		t.Fatalf("iterated %d keys, err %v", c, it.Error())
	}
	c = 0
	for ok := it.Last(); ok; ok = it.Prev() {
		c++
	}
	if c != n {
		t.Fatalf("reverse iterated %d keys", c)
	}
}

func TestOpenFormatted(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{bounds: &Bounds{Min: []byte("b"), Max: []byte("y")}})
	mustPut(t, tr, "c", "1")
	re, err := Open(tr.mem, tr.region, tr.base, tr.ext, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	mustGet(t, re, "c", "1")
	mustPut(t, re, "d", "2")
	mustCheck(t, re)
	if _, err := Open(tr.mem, tr.region, tr.base+1024, tr.ext, Options{}); !errors.Is(err, ErrCorruption) {
		t.Fatalf("Open of a non-meganode: %v", err)
	}
}

// TestNoAllocations pins the allocation-free read path (and write path, once
// the writer's buffers have grown).
func TestNoAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("coverage and the race detector change allocation behaviour (sync.Pool drops items under -race)")
	}
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	keys := make([][]byte, 5000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%06d", i*13%5000))
		if err := tr.Put(keys[i], []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	dst := make([]byte, 0, 64)
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := tr.Get(keys[i%len(keys)], dst[:0]); err != nil {
			t.Fatal(err)
		}
		i++
	}); a != 0 {
		t.Errorf("Get: %v allocs per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		tr.Contains(keys[i%len(keys)])
		i++
	}); a != 0 {
		t.Errorf("Contains: %v allocs per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		if err := tr.Put(keys[i%len(keys)], []byte("other")); err != nil {
			t.Fatal(err)
		}
		i++
	}); a != 0 {
		t.Errorf("Put (update): %v allocs per call", a)
	}
	fresh := make([][]byte, 3000)
	for j := range fresh {
		fresh[j] = []byte(fmt.Sprintf("new-%06d", j))
	}
	j := 0
	if a := testing.AllocsPerRun(2000, func() {
		if err := tr.Put(fresh[j%len(fresh)], []byte("v")); err != nil {
			t.Fatal(err)
		}
		j++
	}); a != 0 {
		t.Errorf("Put (insert with splits): %v allocs per call", a)
	}
}

// TestIterReuse: a closed iterator comes back from the pool with no state
// of its previous use.
func TestIterReuse(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{})
	for _, k := range []string{"a", "b", "c", "d"} {
		mustPut(t, tr, k, k)
	}
	it := tr.NewIter(&IterOptions{Lower: []byte("b"), Upper: []byte("d")})
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key()))
	}
	it.Close()
	it = tr.NewIter(nil)
	defer it.Close()
	if it.Valid() {
		t.Fatal("reused iterator is positioned")
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if fmt.Sprint(got) != "[b c]" || n != 4 {
		t.Fatalf("bounded %v, unbounded %d keys", got, n)
	}
}

// Value reads the record a Search found without descending again, and
// only while the leaf is as the search saw it: a leaf changed since (a
// write to any of its keys, or a split of it) sends the caller back to
// search.
func TestValueFromSearch(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	for i := range 2000 {
		mustPut(t, tr, fmt.Sprintf("key-%05d", i), fmt.Sprintf("value-%d", i))
	}
	key := []byte("key-01234")
	res, err := tr.Search(key)
	if err != nil || !res.Found {
		t.Fatalf("Search: %+v, %v", res, err)
	}
	dst := make([]byte, 0, 64)
	v, ok, err := tr.Value(res, key, dst)
	if err != nil || !ok || string(v) != "value-1234" {
		t.Fatalf("Value: %q, %v, %v", v, ok, err)
	}
	if a := testing.AllocsPerRun(100, func() { _, _, _ = tr.Value(res, key, dst[:0]) }); a != 0 && !raceEnabled {
		t.Errorf("Value: %v allocs per call", a)
	}

	// A neighbour in the same leaf written: the leaf's version moved on.
	mustPut(t, tr, "key-01234a", "x")
	if v, ok, err := tr.Value(res, key, dst[:0]); ok || err != nil || len(v) != 0 {
		t.Fatalf("Value after the leaf changed: %q, %v, %v; want not ok", v, ok, err)
	}
	// The key itself rewritten: a new search sees the new value.
	mustPut(t, tr, "key-01234", "new")
	if res, err = tr.Search(key); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := tr.Value(res, key, dst[:0]); !ok || err != nil || string(v) != "new" {
		t.Fatalf("Value after a new search: %q, %v, %v", v, ok, err)
	}
	// Enough inserts beside it to split its leaf: the old result is stale.
	for i := range 200 {
		mustPut(t, tr, fmt.Sprintf("key-01234-%03d", i), "filler")
	}
	if _, ok, err := tr.Value(res, key, dst[:0]); ok || err != nil {
		t.Fatalf("Value after the leaf split: %v, %v; want not ok", ok, err)
	}

	missing, err := tr.Search([]byte("key-99999"))
	if err != nil || missing.Found {
		t.Fatalf("Search of a missing key: %+v, %v", missing, err)
	}
	if _, _, err := tr.Value(missing, []byte("key-99999"), dst[:0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Value of a search that found nothing: %v", err)
	}
	forged := res
	forged.Leaf = MakePtr(testRegion+1, res.Leaf.Offset())
	if _, _, err := tr.Value(forged, key, dst[:0]); !errors.Is(err, ErrCorruption) {
		t.Fatalf("Value of a leaf outside the meganode: %v", err)
	}
}
