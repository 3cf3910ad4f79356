package blink

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// FuzzNodeDecode feeds arbitrary bytes to the node decoder: CheckCopy must
// never panic, and whatever it accepts must decode without panicking.
func FuzzNodeDecode(f *testing.F) {
	tr, _ := newTestTree(f, testTreeOpts{nodeSize: 512})
	for _, k := range []string{"a", "b", "c", "dd", "eee"} {
		mustPut(f, tr, k, k)
	}
	seed := make([]byte, 512)
	tr.NodeBytes(tr.Root(), seed)
	f.Add(seed)
	f.Add(make([]byte, 512))
	// A versioned leaf, with a placeholder: entries 8 bytes longer.
	vt, _ := newTestTree(f, testTreeOpts{nodeSize: 512, legacy: 3})
	for i, k := range []string{"a", "b", "c", "dd", "eee"} {
		if err := vt.PutWord([]byte(k), []byte(k), MakeWord(uint64(i+4), i%2 == 0, false)); err != nil {
			f.Fatal(err)
		}
	}
	if err := vt.PutPlaceholder([]byte("bb"), MakeWord(0, true, false)); err != nil {
		f.Fatal(err)
	}
	vseed := make([]byte, 512)
	vt.NodeBytes(vt.Root(), vseed)
	f.Add(vseed)
	f.Fuzz(func(t *testing.T, data []byte) {
		b := atomicmem.Alloc(512)
		copy(b, data)
		_ = DescribeNode(b)
		_ = AnnotatedHex(b)
		if CheckCopy(b) != OK {
			return
		}
		n := node(b)
		v := View(b)
		for i := 0; i < n.count(); i++ {
			k := n.key(i)
			_ = n.payload(i)
			n.lowerBound(k)
			Covers(b, k)
			_, _ = v.Word(i), v.Placeholder(i)
			if v.Extents() {
				v.Extent(i)
			}
			v.StepFor(k)
		}
		n.minKey()
		n.maxKey()
	})
}

// FuzzNodeRoundTrip builds nodes from fuzzed entries: decode(encode(x)) == x.
func FuzzNodeRoundTrip(f *testing.F) {
	f.Add([]byte("\x03abc\x01d\x05hello"), true, uint8(0))
	f.Add([]byte("\x01a\x01b"), false, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, leaf bool, level uint8) {
		const size = 1024
		// Entries: length-prefixed keys, made strictly increasing.
		var keys [][]byte
		for len(data) > 0 {
			l := int(data[0])%MaxKeySize(size) + 1
			data = data[1:]
			if l > len(data) {
				break
			}
			k := data[:l]
			data = data[l:]
			if len(keys) > 0 && bytes.Compare(keys[len(keys)-1], k) >= 0 {
				continue
			}
			keys = append(keys, k)
		}
		flags := byte(flagValid | flagMinInf | flagMaxInf)
		lv := 0
		if leaf {
			flags |= flagExtents
			if level&0x80 != 0 {
				flags |= flagVersioned // entries with words
			}
		} else {
			lv = int(level%8) + 1
		}
		img := node(atomicmem.Alloc(size))
		initNode(img, kindTree, lv, flags, nil, nil, MakePtr(3, 4096))
		ps := img.payloadSize()
		var payloads [][]byte
		for i, k := range keys {
			if !img.fits(len(k)) {
				keys = keys[:i]
				break
			}
			pl := make([]byte, ps)
			binary.LittleEndian.PutUint64(pl, uint64(i+1))
			img.appendEntry(k, pl)
			payloads = append(payloads, pl)
		}
		img.putU64(offHeadVersion, 2)
		img.putU64(size-tailSize, 2)
		if r := CheckCopy(img); r != OK {
			t.Fatalf("encoded node rejected: %v\n%s", r, DescribeNode(img))
		}
		if img.count() != len(keys) || img.level() != lv || img.rightLink() != MakePtr(3, 4096) {
			t.Fatalf("header did not round-trip")
		}
		for i, k := range keys {
			if !bytes.Equal(img.key(i), k) || !bytes.Equal(img.payload(i), payloads[i]) {
				t.Fatalf("entry %d did not round-trip", i)
			}
		}
		// Removing and re-inserting through compaction keeps the entries.
		if len(keys) > 1 {
			tmp := node(atomicmem.Alloc(size))
			img.removeEntry(0)
			img.insertEntry(0, keys[0], payloads[0], tmp)
			for i, k := range keys {
				if !bytes.Equal(img.key(i), k) || !bytes.Equal(img.payload(i), payloads[i]) {
					t.Fatalf("entry %d lost by remove/insert", i)
				}
			}
		}
	})
}

// FuzzExtentDecode: the extent decoder never panics, and encode/decode
// round-trips.
func FuzzExtentDecode(f *testing.F) {
	f.Add([]byte("key"), []byte("value"), []byte{})
	f.Add([]byte{}, []byte{}, []byte{1, 0, 0, 0, 200, 0, 0, 0, 'x'})
	f.Fuzz(func(t *testing.T, key, value, raw []byte) {
		DecodeExtent(raw, ExtentCRC(raw))
		DecodeExtent(raw, 0)
		rec := make([]byte, ExtentLen(len(key), len(value)))
		crc := EncodeExtent(rec, key, value)
		k, v, err := DecodeExtent(rec, crc)
		if err != nil || !bytes.Equal(k, key) || !bytes.Equal(v, value) {
			t.Fatalf("round trip: %q %q %v", k, v, err)
		}
	})
}
