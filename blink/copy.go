package blink

import (
	"fmt"

	"github.com/cellstore/cell/internal/atomicmem"
)

// Reason says whether a node copy can be used, and if not, why.
type Reason uint8

const (
	// OK: the copy is consistent, valid, and covers the key.
	OK Reason = iota
	// Torn: head and tail versions differ or are odd: a writer was changing
	// the node during the copy. Retry the read.
	Torn
	// Invalid: the node is free or was invalidated (a meganode split moved
	// it). Restart from a known-good point.
	Invalid
	// OutOfRange: the searched key is below the node's min key: the node
	// was reused for another key range. Restart from a known-good point.
	OutOfRange
	// AboveMax: the searched key is at or above the node's max key. Not an
	// error in a B-link tree: follow the right link.
	AboveMax
	// Corrupt: a consistent copy whose bytes do not decode as a node. Never
	// produced by a correct writer; treated as corruption.
	Corrupt
)

var reasonNames = [...]string{"ok", "torn", "invalid", "out-of-range", "above-max", "corrupt"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Err returns the error for a rejected copy, nil for OK and AboveMax.
func (r Reason) Err() error {
	switch r {
	case OK, AboveMax:
		return nil
	case Torn:
		return ErrTorn
	case Invalid:
		return ErrInvalidNode
	case OutOfRange:
		return ErrOutOfRange
	default:
		return ErrCorruption
	}
}

// CopyNode copies the node at src into dst (both one node long, 8-byte
// aligned) with 8-byte atomic loads in increasing address order, then
// accepts the copy only if its head and tail versions are equal and even,
// it is a valid tree node and its bytes decode. It is the single function
// every reader that does not hold the writer's lock uses: lock-free
// server-side search, the one-sided read path, and iterators.
//
// The free gap between the slot array and the heap is not copied (dst keeps
// whatever it held there; no decoder reads it). Which words form the gap is
// decided from the header words just copied; if those were torn the tail
// version read last differs from the head and the copy is rejected anyway.
//
// CopyNode never panics on any input.
func CopyNode(dst, src []byte) Reason {
	n := len(src)
	if len(dst) != n || n < MinNodeSize || n > MaxNodeSize || n&(n-1) != 0 {
		return Corrupt
	}
	atomicmem.Load(dst[:offSlots], src[:offSlots])
	d := node(dst)
	slotEnd := roundUp8(offSlots + slotSize*d.count())
	heapStart := d.heapLo() &^ 7
	if slotEnd > n-tailSize {
		slotEnd = n - tailSize
	}
	if heapStart < slotEnd || heapStart > n-tailSize {
		heapStart = slotEnd
	}
	atomicmem.Load(dst[offSlots:slotEnd], src[offSlots:slotEnd])
	atomicmem.Load(dst[heapStart:], src[heapStart:])
	return CheckCopy(dst)
}

// CheckCopy applies CopyNode's acceptance rules to bytes already copied
// (for example, by a one-sided read whose provider copied with atomic loads).
func CheckCopy(b []byte) Reason {
	n := node(b)
	if len(n) < MinNodeSize || len(n) > MaxNodeSize || len(n)&(len(n)-1) != 0 {
		return Corrupt
	}
	h := n.headVersion()
	if h != n.tailVersion() || h&1 != 0 {
		return Torn
	}
	if !n.valid() || n.kind() != kindTree {
		return Invalid
	}
	if !wellFormed(n) {
		return Corrupt
	}
	return OK
}

// CopyNodeFor is CopyNode followed by Covers: the copy is also checked
// against the searched key's position in [min, max).
func CopyNodeFor(dst, src, key []byte) Reason {
	if r := CopyNode(dst, src); r != OK {
		return r
	}
	return Covers(dst, key)
}

// Covers reports where key lies against the [min, max) range of an accepted
// copy: OK inside, OutOfRange below min, AboveMax at or above max.
func Covers(b, key []byte) Reason {
	n := node(b)
	if !n.aboveMin(key) {
		return OutOfRange
	}
	if !n.belowMax(key) {
		return AboveMax
	}
	return OK
}

// wellFormed checks every offset a decoder will follow, so that decoding an
// accepted copy cannot index out of bounds. It does not check that keys are
// sorted (that costs a key comparison per entry on every read; a writer
// never publishes unsorted keys and Check verifies it): an unsorted node
// from a faulty peer can give a wrong answer but never a panic.
func wellFormed(n node) bool {
	size := len(n)
	end := size - tailSize
	c := n.count()
	heapLo := n.heapLo()
	if offSlots+slotSize*c > heapLo || heapLo > end {
		return false
	}
	maxKey := MaxKeySize(size)
	for _, f := range [2][2]int{{offMinOff, offMinLen}, {offMaxOff, offMaxLen}} {
		o, l := n.u16(f[0]), n.u16(f[1])
		// Bounds of either length lie in the heap (initNode puts them
		// there even when empty): an empty key's offset is sliced too.
		if l > maxKey || o < heapLo || o+l > end {
			return false
		}
	}
	if n.minInf() && n.u16(offMinLen) != 0 || n.maxInf() && n.u16(offMaxLen) != 0 {
		return false
	}
	// Only extent leaves carry entry words; the payload size below
	// (versionedPayload) bounds every entry with its word.
	if n.versioned() && !n.extents() {
		return false
	}
	ps := n.payloadSize()
	for i := 0; i < c; i++ {
		o := n.slot(i)
		if o < heapLo || o+keyLenSize > end {
			return false
		}
		l := n.u16(o)
		// Only entry 0 of an inner node whose min is -inf has the empty key.
		emptyOK := i == 0 && n.level() > 0 && n.minInf()
		if l == 0 && !emptyOK || l > maxKey || o+entrySize(l, ps) > end {
			return false
		}
	}
	return true
}

// copyNodeRaw copies a node with atomic loads without judging it.
func copyNodeRaw(dst, src []byte) { atomicmem.LoadTo(dst, src) }
