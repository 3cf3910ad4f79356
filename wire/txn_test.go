package wire

import "testing"

// RangeHash is part of the protocol (client and region compute it
// apart): its values are pinned.
func TestRangeHash(t *testing.T) {
	if h := NewRangeHash(); h != 0xcbf29ce484222325 {
		t.Fatalf("empty hash %#x", uint64(h))
	}
	h := NewRangeHash().Add([]byte("a"), 7).Add([]byte("bc"), 1<<40)
	if h == NewRangeHash().Add([]byte("bc"), 1<<40).Add([]byte("a"), 7) {
		t.Fatal("the hash does not depend on the order of pairs")
	}
	if h == NewRangeHash().Add([]byte("ab"), 7).Add([]byte("c"), 1<<40) {
		t.Fatal("the hash does not separate keys")
	}
	if h != 0x6f3f05c425a58fa6 { // FNV-1a 64 of 01000000 61 0700000000000000 02000000 6263 0000000000010000
		t.Fatalf("hash %#x", uint64(h))
	}
}
