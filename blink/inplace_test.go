package blink

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// TestInPlaceGarbage: the in-place reader's step never panics nor reads
// outside the node, whatever the node's bytes say (a torn read can show
// any mix of two images; a faulty writer any bytes): it returns a reason,
// and on valid nodes the answer agrees with the validated copy's.
func TestInPlaceGarbage(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, meganodeSize: 2 << 20, legacy: 3})
	r := rand.New(rand.NewPCG(11, 12))
	var keys [][]byte
	for i := range 3000 {
		k := []byte(mergeKey(i))
		keys = append(keys, k)
		if err := tr.PutWord(k, []byte("v"), MakeWord(5+uint64(i), i%2 == 0, false)); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if err := tr.PutPlaceholder([]byte(mergeKey(i)+"p"), MakeWord(9, true, false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var nodes []Ptr
	for i := 1; i < tr.nextFresh(); i++ {
		nodes = append(nodes, MakePtr(tr.region, tr.base+uint64(i*tr.nodeSize)))
	}
	img := node(atomicmem.Alloc(tr.nodeSize))
	end := tr.nodeSize - tailSize
	for iter := range 200_000 {
		copy(img, tr.nodeBytes(nodes[r.IntN(len(nodes))]))
		key := keys[r.IntN(len(keys))]
		if iter%2 == 1 {
			// Corrupt a few bytes, mostly in the header and slots.
			for range 1 + r.IntN(4) {
				off := r.IntN(tr.nodeSize)
				if r.IntN(2) == 0 {
					off = 8 + r.IntN(64)
				}
				img[off] = byte(r.Uint32())
			}
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("iteration %d: visitInPlace panicked: %v", iter, p)
				}
			}()
			reason, next, res := tr.visitInPlace(img, key, tr.maxKey, end)
			if iter%2 == 1 || img.kind() != kindTree {
				return
			}
			// An intact node: agree with a validated copy.
			want := Covers(img, key)
			if reason != want {
				t.Fatalf("iteration %d: in place %v, copy %v", iter, reason, want)
			}
			if reason == AboveMax && next != img.rightLink() {
				t.Fatalf("iteration %d: right link %v, want %v", iter, next, img.rightLink())
			}
			if reason != OK {
				return
			}
			if img.level() > 0 {
				if next != img.child(img.childIndex(key)) {
					t.Fatalf("iteration %d: child %v", iter, next)
				}
				return
			}
			i, found := img.lowerBound(key)
			if found != (res.Found || res.Word.Placeholder()) {
				t.Fatalf("iteration %d: found %v (word %v), copy %v", iter, res.Found, res.Word, found)
			}
			if found {
				ext, l, crc := img.extent(i)
				if res.Word != tr.wordOf(img, i) || res.Found && (res.Extent != ext || res.Len != l || res.CRC != crc) {
					t.Fatalf("iteration %d: %+v, copy %v %d %d %v", iter, res, ext, l, crc, tr.wordOf(img, i))
				}
			}
		}()
	}
}

// TestInPlaceMatchesCopy: Get (in place) and GetCopied agree on every key
// of a tree with legacy and versioned leaves and placeholders.
func TestInPlaceMatchesCopy(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 1024, meganodeSize: 4 << 20})
	for i := range 5000 {
		mustPut(t, tr, mergeKey(i), "v"+mergeKey(i))
	}
	if err := tr.SetVersioning(40); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5000; i += 3 {
		if err := tr.PutWord([]byte(mergeKey(i)), []byte("w"), MakeWord(50+uint64(i), false, false)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5000; i += 11 {
		if err := tr.PutPlaceholder([]byte(mergeKey(i)+"x"), MakeWord(60, true, false)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5000 {
		for _, k := range []string{mergeKey(i), mergeKey(i) + "x", mergeKey(i) + "y"} {
			a, errA := tr.Get([]byte(k), nil)
			b, errB := tr.GetCopied([]byte(k), nil)
			if !bytes.Equal(a, b) || !errors.Is(errA, ErrNotFound) != !errors.Is(errB, ErrNotFound) || (errA == nil) != (errB == nil) {
				t.Fatalf("%q: in place %q %v, copied %q %v", k, a, errA, b, errB)
			}
			res, err := tr.Search([]byte(k))
			if err != nil || res.Found != (errA == nil) {
				t.Fatalf("Search(%q) = %+v, %v; Get %v", k, res, err, errA)
			}
		}
	}
}
