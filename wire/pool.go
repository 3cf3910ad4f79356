package wire

import (
	"math/bits"
	"sync"
)

// Frame buffers are pooled by power-of-two capacity from 256 B to 2 MiB;
// larger ones are allocated at their exact size and left to the GC (they
// are rare: large values and range replies).
const (
	minPoolShift = 8
	maxPoolShift = 21
)

var bufPools [maxPoolShift - minPoolShift + 1]sync.Pool

// getBuf returns a buffer of length n. Release it with putBuf.
func getBuf(n int) *[]byte {
	c := 0
	if n > 1<<minPoolShift {
		c = bits.Len(uint(n-1)) - minPoolShift
	}
	if c < len(bufPools) {
		if v := bufPools[c].Get(); v != nil {
			p := v.(*[]byte)
			*p = (*p)[:n]
			return p
		}
		b := make([]byte, n, 1<<(c+minPoolShift))
		return &b
	}
	b := make([]byte, n)
	return &b
}

// putBuf returns p to its pool. p must not be used afterwards.
func putBuf(p *[]byte) {
	c := cap(*p)
	if c < 1<<minPoolShift || c > 1<<maxPoolShift || c&(c-1) != 0 {
		return
	}
	*p = (*p)[:0]
	bufPools[bits.Len(uint(c))-1-minPoolShift].Put(p)
}
