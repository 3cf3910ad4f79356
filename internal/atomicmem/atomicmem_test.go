package atomicmem

import (
	"encoding/binary"
	"testing"
)

func TestLoadStoreRoundTrip(t *testing.T) {
	src := Alloc(64)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := Alloc(64)
	Store(dst, src)
	got := Alloc(64)
	Load(got, dst)
	for i := range got {
		if got[i] != src[i] {
			t.Fatalf("byte %d: got %d want %d", i, got[i], src[i])
		}
	}
}

func TestUint64IsLittleEndian(t *testing.T) {
	b := Alloc(16)
	StoreUint64(b, 8, 0x0102030405060708)
	if got := binary.LittleEndian.Uint64(b[8:]); got != 0x0102030405060708 {
		t.Fatalf("got %#x", got)
	}
	if got := LoadUint64(b, 8); got != 0x0102030405060708 {
		t.Fatalf("got %#x", got)
	}
}

func TestStoreChangedCountsWords(t *testing.T) {
	a, b := Alloc(32), Alloc(32)
	b[9] = 1
	b[31] = 1
	if n := StoreChanged(a, b); n != 2 {
		t.Fatalf("wrote %d words, want 2", n)
	}
	if n := StoreChanged(a, b); n != 0 {
		t.Fatalf("wrote %d words, want 0", n)
	}
}

func TestAllocAligned(t *testing.T) {
	for n := 1; n < 100; n++ {
		if b := Alloc(n); !Aligned(b) || len(b)%8 != 0 || len(b) < n {
			t.Fatalf("Alloc(%d) = len %d aligned %v", n, len(b), Aligned(b))
		}
	}
}
