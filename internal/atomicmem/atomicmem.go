// Package atomicmem copies bytes to and from memory that another goroutine
// (or another process, through a shared mapping) may be changing at the same
// time.
//
// Go's copy gives no atomicity or ordering, so every access to node and
// extent memory that can race with a writer goes through this package: 8-byte
// atomic loads and stores, in increasing address order. Together with the
// head and tail versions of a node this gives the one-sided consistency
// protocol of docs/design.md §3: a reader that copies a node with Load sees the head
// version before any byte of the body and the tail version after all of them.
//
// All offsets and lengths must be multiples of 8 and the underlying memory
// must be 8-byte aligned (mapped regions are page aligned; use Alloc for heap
// memory in tests). Word order inside memory is the machine's; bytes are
// preserved exactly, so encoded little-endian data round-trips on any host.
package atomicmem

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Word is the unit of atomic access, in bytes.
const Word = 8

func word(b []byte, off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&b[off]))
}

// Load copies src into dst with 8-byte atomic loads, lowest address first.
// len(dst) must equal len(src) and be a multiple of 8; both must be 8-byte
// aligned.
func Load(dst, src []byte) {
	n := len(src)
	if len(dst) != n || n%Word != 0 {
		panic("atomicmem: Load needs equal lengths that are multiples of 8")
	}
	if n == 0 {
		return
	}
	_ = dst[:n]
	_ = src[:n]
	for i := 0; i < n; i += Word {
		*word(dst, i) = atomic.LoadUint64(word(src, i))
	}
}

// Store copies src into dst with 8-byte atomic stores, lowest address first.
// Readers using Load never observe a torn word.
func Store(dst, src []byte) {
	n := len(src)
	if len(dst) != n || n%Word != 0 {
		panic("atomicmem: Store needs equal lengths that are multiples of 8")
	}
	if n == 0 {
		return
	}
	_ = dst[:n]
	_ = src[:n]
	for i := 0; i < n; i += Word {
		atomic.StoreUint64(word(dst, i), *word(src, i))
	}
}

// StoreChanged is Store that skips words already equal in dst; it returns
// the number of words written. Only the single writer of dst may call it.
func StoreChanged(dst, src []byte) int {
	n := len(src)
	if len(dst) != n || n%Word != 0 {
		panic("atomicmem: StoreChanged needs equal lengths that are multiples of 8")
	}
	written := 0
	for i := 0; i < n; i += Word {
		w := *word(src, i)
		p := word(dst, i)
		if atomic.LoadUint64(p) != w {
			atomic.StoreUint64(p, w)
			written++
		}
	}
	return written
}

// LoadUint64 atomically loads the word at b[off:off+8] and returns it
// decoded as little-endian.
func LoadUint64(b []byte, off int) uint64 {
	_ = b[off : off+8]
	return fromLE(atomic.LoadUint64(word(b, off)))
}

// StoreUint64 atomically stores v, encoded little-endian, at b[off:off+8].
func StoreUint64(b []byte, off int, v uint64) {
	_ = b[off : off+8]
	atomic.StoreUint64(word(b, off), toLE(v))
}

// Alloc returns n zero bytes (rounded up to a multiple of 8) aligned to 8
// bytes, for arenas kept on the Go heap (tests, benchmarks).
func Alloc(n int) []byte {
	n = (n + Word - 1) &^ (Word - 1)
	if n == 0 {
		return nil
	}
	words := make([]uint64, n/Word)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// Aligned reports whether b starts on an 8-byte boundary.
func Aligned(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(&b[0]))%Word == 0
}

// LoadTo is Load for a destination of any alignment: src must be 8-byte
// aligned and a multiple of 8 long, dst at least as long as src.
func LoadTo(dst, src []byte) {
	n := len(src)
	if n%Word != 0 || len(dst) < n {
		panic("atomicmem: LoadTo needs len(src) a multiple of 8 and len(dst) >= len(src)")
	}
	if n == 0 {
		return
	}
	_ = src[:n]
	for i := 0; i < n; i += Word {
		binary.NativeEndian.PutUint64(dst[i:], atomic.LoadUint64(word(src, i)))
	}
}
