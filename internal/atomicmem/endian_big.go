//go:build mips || mips64 || ppc64 || s390x

package atomicmem

import "math/bits"

func toLE(v uint64) uint64   { return bits.ReverseBytes64(v) }
func fromLE(v uint64) uint64 { return bits.ReverseBytes64(v) }
