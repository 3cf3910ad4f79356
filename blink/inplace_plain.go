//go:build amd64 && !race

package blink

import "bytes"

// Loads of the in-place reader (inplace.go) on amd64 without the race
// detector: plain loads. x86 keeps loads in program order and stores in
// program order (TSO), so the reader's loads of a node's body are ordered
// between its two atomic loads of the head version, as the seqlock
// protocol needs; a torn value is caught by the version check and never
// used to index outside the node (every offset is checked first). Every
// offset passed here lies inside b: the caller checked it.

func ld16(b []byte, off int) int    { return int(le.Uint16(b[off:])) }
func ld32(b []byte, off int) uint32 { return le.Uint32(b[off:]) }
func ld64(b []byte, off int) uint64 { return le.Uint64(b[off:]) }
func cmpKey(b []byte, off, l int, key []byte) int {
	return bytes.Compare(b[off:off+l], key)
}
