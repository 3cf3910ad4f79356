package blink

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/testutil"
)

// TestGoldenLeaf pins the byte layout of a leaf node (format.go).
func TestGoldenLeaf(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, bounds: &Bounds{Min: []byte("a"), Max: []byte("m")}})
	mustPut(t, tr, "banana", "yellow")
	mustPut(t, tr, "apple", "red")
	mustPut(t, tr, "cherry", "dark red")
	mustPut(t, tr, "apple", "green") // update: a new record, the old one freed
	ok, err := tr.Delete([]byte("banana"))
	if !ok || err != nil {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	b := make([]byte, 512)
	if !tr.NodeBytes(tr.Root(), b) {
		t.Fatal("NodeBytes")
	}
	testutil.Golden(t, "leaf.golden", AnnotatedHex(b), "memory and wire format")
	testutil.Golden(t, "leaf.describe.golden", DescribeNode(b)+"\n", "memory and wire format")
}

// TestGoldenInner pins an inner node and the header after a root split.
func TestGoldenInner(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	for _, k := range []string{"d", "a", "c", "b", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t"} {
		mustPut(t, tr, k+k+k+k+k+k+k+k+k+k+k+k+k+k+k+k, k)
	}
	if tr.height() != 2 {
		t.Fatalf("height %d, want 2", tr.height())
	}
	b := make([]byte, 512)
	tr.NodeBytes(tr.Root(), b)
	testutil.Golden(t, "inner.golden", AnnotatedHex(b), "memory and wire format")
	h := make([]byte, 512)
	tr.NodeBytes(tr.HeaderPtr(), h)
	testutil.Golden(t, "header.golden", DescribeNode(h)+"\n", "memory and wire format")
	var dump bytes.Buffer
	if err := tr.Dump(&dump); err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, "tree.dump.golden", dump.String(), "memory and wire format")
}

func TestPtr(t *testing.T) {
	cases := []struct {
		region uint32
		off    uint64
		str    string
	}{
		{1, 0, "1:0x0"},
		{7, 0x1234, "7:0x1234"},
		{MaxRegionID, MaxOffset, "16777215:0xffffffffff"},
	}
	for _, c := range cases {
		p := MakePtr(c.region, c.off)
		if p.Region() != c.region || p.Offset() != c.off || p.String() != c.str || p.IsNil() {
			t.Errorf("MakePtr(%d, %#x) = %v (%d, %#x)", c.region, c.off, p, p.Region(), p.Offset())
		}
	}
	if Ptr(0).String() != "nil" || !Ptr(0).IsNil() {
		t.Error("zero pointer is not nil")
	}
}

func TestExtentEncoding(t *testing.T) {
	cases := []struct{ key, val string }{{"k", ""}, {"key", "value"}, {string(bytes.Repeat([]byte{0xff}, 128)), string(make([]byte, 3000))}}
	for _, c := range cases {
		rec := make([]byte, ExtentLen(len(c.key), len(c.val)))
		crc := EncodeExtent(rec, []byte(c.key), []byte(c.val))
		if binary.LittleEndian.Uint32(rec) != uint32(len(c.key)) || binary.LittleEndian.Uint32(rec[4:]) != uint32(len(c.val)) {
			t.Errorf("%q: header %x", c.key, rec[:8])
		}
		k, v, err := DecodeExtent(rec, crc)
		if err != nil || string(k) != c.key || string(v) != c.val {
			t.Errorf("%q: decode = %q %q %v", c.key, k, v, err)
		}
		rec[len(rec)-1] ^= 1
		if _, _, err := DecodeExtent(rec, crc); err == nil {
			t.Errorf("%q: flipped bit not detected", c.key)
		}
	}
	rec := make([]byte, 16)
	binary.LittleEndian.PutUint32(rec, 100)
	if _, _, err := DecodeExtent(rec, ExtentCRC(rec)); err == nil {
		t.Error("lengths past the record accepted")
	}
}

func TestNodeComparators(t *testing.T) {
	img := node(atomicmem.Alloc(512))
	initNode(img, kindTree, 0, flagValid|flagExtents, []byte("b"), []byte("x"), 0)
	var pl [extentPayload]byte
	for _, k := range []string{"b", "d", "f"} {
		img.appendEntry([]byte(k), pl[:])
	}
	cases := []struct {
		key   string
		lb    int
		eq    bool
		cover Reason
	}{
		{"a", 0, false, OutOfRange},
		{"b", 0, true, OK},
		{"c", 1, false, OK},
		{"d", 1, true, OK},
		{"e", 2, false, OK},
		{"g", 3, false, OK},
		{"x", 3, false, AboveMax},
		{"z", 3, false, AboveMax},
	}
	for _, c := range cases {
		lb, eq := img.lowerBound([]byte(c.key))
		if lb != c.lb || eq != c.eq {
			t.Errorf("lowerBound(%q) = %d %v, want %d %v", c.key, lb, eq, c.lb, c.eq)
		}
		if r := Covers(img, []byte(c.key)); r != c.cover {
			t.Errorf("Covers(%q) = %v, want %v", c.key, r, c.cover)
		}
	}
	inner := node(atomicmem.Alloc(512))
	initNode(inner, kindTree, 1, flagValid|flagMinInf|flagMaxInf, nil, nil, 0)
	for _, k := range []string{"", "d", "m"} {
		inner.appendEntry([]byte(k), make([]byte, pointerPayload))
	}
	for key, want := range map[string]int{"a": 0, "d": 1, "e": 1, "m": 2, "zz": 2} {
		if got := inner.childIndex([]byte(key)); got != want {
			t.Errorf("childIndex(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestCheckCopyReasons(t *testing.T) {
	img := node(atomicmem.Alloc(512))
	initNode(img, kindTree, 0, flagValid|flagExtents, nil, nil, 0)
	if r := CheckCopy(img); r != OK {
		t.Fatalf("fresh node: %v", r)
	}
	img.putU64(offHeadVersion, 3)
	img.putU64(len(img)-tailSize, 3)
	if r := CheckCopy(img); r != Torn {
		t.Errorf("odd versions: %v", r)
	}
	img.putU64(offHeadVersion, 4)
	if r := CheckCopy(img); r != Torn {
		t.Errorf("head 4 tail 3: %v", r)
	}
	img.putU64(len(img)-tailSize, 4)
	img[offFlags] &^= flagValid
	if r := CheckCopy(img); r != Invalid {
		t.Errorf("invalid flag: %v", r)
	}
	img[offFlags] |= flagValid
	img.putU16(offCount, 300)
	if r := CheckCopy(img); r != Corrupt {
		t.Errorf("count past heap: %v", r)
	}
	for r := OK; r <= Corrupt+1; r++ {
		if r.String() == "" {
			t.Errorf("reason %d has no name", r)
		}
	}
}
