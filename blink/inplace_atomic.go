//go:build !amd64 || race

package blink

import "github.com/cellstore/cell/internal/atomicmem"

// Loads of the in-place reader (inplace.go) elsewhere than on amd64, and
// under the race detector: every byte comes from an 8-byte atomic load of
// the word holding it, so the loads are ordered by the memory model on
// weakly ordered machines, and the race detector sees the same
// synchronisation as CopyNode's. Every offset passed here lies inside b:
// the caller checked it.

func ld8(b []byte, off int) byte {
	return byte(atomicmem.LoadUint64(b, off&^7) >> (8 * (off & 7)))
}

func ld16(b []byte, off int) int { return int(ld8(b, off)) | int(ld8(b, off+1))<<8 }

func ld32(b []byte, off int) uint32 {
	return uint32(ld16(b, off)) | uint32(ld16(b, off+2))<<16
}

func ld64(b []byte, off int) uint64 { return uint64(ld32(b, off)) | uint64(ld32(b, off+4))<<32 }

func cmpKey(b []byte, off, l int, key []byte) int {
	for i := 0; i < l && i < len(key); i++ {
		if c := ld8(b, off+i); c != key[i] {
			if c < key[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case l < len(key):
		return -1
	case l > len(key):
		return 1
	}
	return 0
}
