package blink

import "encoding/binary"

// RangeHash hashes the (key, version) pairs of a range of leaf entries, in
// key order: FNV-1a 64 over each pair's key length (u32, little-endian),
// key and version (u64, little-endian). A transaction's range read is
// validated by it (docs/transactions.md §4.5): the client hashes the pairs
// it read, the region's apply the pairs it holds, and the two compare.
// Start from NewRangeHash.
type RangeHash uint64

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// NewRangeHash returns the hash of no pairs.
func NewRangeHash() RangeHash { return fnvOffset64 }

// Add returns the hash with (key, version) appended.
func (h RangeHash) Add(key []byte, version uint64) RangeHash {
	var n [8]byte
	binary.LittleEndian.PutUint32(n[:4], uint32(len(key)))
	for _, c := range n[:4] {
		h = (h ^ RangeHash(c)) * fnvPrime64
	}
	for _, c := range key {
		h = (h ^ RangeHash(c)) * fnvPrime64
	}
	binary.LittleEndian.PutUint64(n[:], version)
	for _, c := range n {
		h = (h ^ RangeHash(c)) * fnvPrime64
	}
	return h
}
