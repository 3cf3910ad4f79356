package blink

import (
	"fmt"

	"github.com/cellstore/cell/internal/atomicmem"
)

// The server-side reader's optimistic in-place search (OLFIT, Masstree):
// for each node on the way it loads the head version, searches the node's
// live bytes where they are, then loads the head version again, and uses
// what it read only if the version was even and did not change (the
// writer sets it odd before changing any byte, docs/design.md §3).
// Nothing is copied. The bytes may be torn while the reader looks at
// them, so every offset and length read from the node is checked against
// the node's bounds before it is used (the rules of wellFormed, for the
// fields this search touches): a concurrent writer can make the reader
// retry, never panic or read outside the node. A check that fails on a
// node whose version held still is corruption, as for CopyNode.
//
// One-sided readers, iterators and scans keep the validated copy
// (CopyNode, View): they read through the network or keep the node.
//
// The loads are plain on amd64 (inplace_plain.go) and 8-byte atomic
// elsewhere and under the race detector (inplace_atomic.go).

// searchInPlace is Search by the in-place reader.
func (t *Tree) searchInPlace(key []byte) (Result, error) {
	attempts := 0
	maxKey := t.maxKey
	size := t.nodeSize
	end := size - tailSize
restart:
	root := t.Root()
	p := root
	for {
		if !t.local(p) {
			if p.IsNil() {
				return Result{}, fmt.Errorf("key %q: %w", key, ErrKeyOutOfRange)
			}
			return Result{Next: p}, nil
		}
		b := t.nodeBytes(p)
		v := atomicmem.LoadUint64(b, offHeadVersion)
		r := Torn
		var next Ptr
		var res Result
		if v&1 == 0 {
			r, next, res = t.visitInPlace(b, key, maxKey, end)
		}
		if atomicmem.LoadUint64(b, offHeadVersion) != v {
			r = Torn
		}
		switch r {
		case OK:
			if next.IsNil() {
				res.Leaf, res.Version = p, v
				return res, nil
			}
			p = next
			continue
		case AboveMax:
			p = next
			continue
		case OutOfRange:
			if p == root && t.Root() == root {
				return Result{}, fmt.Errorf("key %q: %w", key, ErrKeyOutOfRange)
			}
		case Corrupt:
			return Result{}, fmt.Errorf("node %v: consistent node does not decode: %w", p, ErrCorruption)
		}
		if err := t.retry(r, &attempts); err != nil {
			return Result{}, err
		}
		if r != Torn {
			goto restart
		}
	}
}

// visitInPlace is one step of searchInPlace in the live node b: OK with
// next the child to descend to, or OK with next nil and res filled at a
// leaf; AboveMax with next the right link; Invalid, OutOfRange or Corrupt
// (checked offsets that do not hold). The caller validates the result by
// the head version.
func (t *Tree) visitInPlace(b []byte, key []byte, maxKey, end int) (Reason, Ptr, Result) {
	w1 := atomicmem.LoadUint64(b, 8)  // flags, level, count, minOff, minLen
	w2 := atomicmem.LoadUint64(b, 16) // maxOff, maxLen, heapLo, kind
	flags, level, count := byte(w1), int(byte(w1>>8)), int(uint16(w1>>16))
	minOff, minLen := int(uint16(w1>>32)), int(uint16(w1>>48))
	maxOff, maxLen := int(uint16(w2)), int(uint16(w2>>16))
	heapLo, kind := int(uint16(w2>>32)), byte(w2>>48)
	if flags&flagValid == 0 || kind != kindTree {
		return Invalid, 0, Result{}
	}
	if offSlots+slotSize*count > heapLo || heapLo > end ||
		minLen > maxKey || minOff < heapLo || minOff+minLen > end ||
		maxLen > maxKey || maxOff < heapLo || maxOff+maxLen > end {
		return Corrupt, 0, Result{}
	}
	if flags&flagMinInf == 0 && cmpKey(b, minOff, minLen, key) > 0 {
		return OutOfRange, 0, Result{}
	}
	if flags&flagMaxInf == 0 && cmpKey(b, maxOff, maxLen, key) <= 0 {
		return AboveMax, Ptr(atomicmem.LoadUint64(b, offRightLink)), Result{}
	}
	ext := flags&flagExtents != 0
	versioned := flags&flagVersioned != 0
	ps := pointerPayload
	if ext {
		ps = extentPayload
		if versioned {
			ps = versionedPayload
		}
	} else if versioned {
		return Corrupt, 0, Result{}
	}
	// lowerBound over the slots: the first entry whose key is >= key.
	lo, hi := 0, count
	eq, eqOff, eqLen := false, 0, 0
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		o := ld16(b, offSlots+slotSize*m)
		if o < heapLo || o+keyLenSize > end {
			return Corrupt, 0, Result{}
		}
		l := ld16(b, o)
		if l > maxKey || o+keyLenSize+l+ps > end {
			return Corrupt, 0, Result{}
		}
		c := cmpKey(b, o+keyLenSize, l, key)
		if c < 0 {
			lo = m + 1
		} else {
			hi = m
			if c == 0 {
				eq, eqOff, eqLen = true, o, l
			} else {
				eq = false
			}
		}
	}
	// eq: the last probe that set hi (= lo now) found key.
	if level > 0 || !ext {
		// childIndex: the entry at key, else the one before (0 if none).
		i := lo
		if !eq && i > 0 {
			i--
		}
		if count == 0 {
			if level > 0 {
				return Corrupt, 0, Result{}
			}
			return OK, 0, Result{}
		}
		o := ld16(b, offSlots+slotSize*i)
		if o < heapLo || o+keyLenSize > end {
			return Corrupt, 0, Result{}
		}
		l := ld16(b, o)
		if l > maxKey || o+keyLenSize+l+ps > end {
			return Corrupt, 0, Result{}
		}
		child := Ptr(ld64(b, o+keyLenSize+l))
		if level > 0 {
			return OK, child, Result{}
		}
		return OK, 0, Result{Child: child, Found: eq}
	}
	if !eq {
		return OK, 0, Result{}
	}
	pl := eqOff + keyLenSize + eqLen
	var res Result
	var w Word
	if versioned {
		w = Word(ld64(b, pl+extentPayload))
	} else if m := t.mode.Load(); m&modeVersioned != 0 {
		w = Word(m &^ modeVersioned)
	}
	res.Word = w
	if !w.Placeholder() {
		res.Found = true
		res.Extent, res.Len, res.CRC = Ptr(ld64(b, pl)), int(ld32(b, pl+8)), ld64(b, pl+12)
	}
	return OK, 0, res
}
