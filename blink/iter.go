package blink

import (
	"bytes"
	"fmt"
)

// IterOptions bound an iteration to keys in [Lower, Upper); a nil bound is
// unbounded on that side (within the meganode).
type IterOptions struct {
	Lower, Upper []byte
}

// Iter walks the keys of one meganode in order, forward and backward,
// without taking the writer's lock. It copies one leaf at a time with
// CopyNode, moves forward through right links and backward by descending
// again to the leaf below the current one (B-link trees have no left
// links). When a copy is torn, invalid or no longer covers the position, it
// re-descends from the root to the first key after (or before) the last one
// it returned, so it never returns a key twice or out of order.
//
// An Iter is not safe for concurrent use. Key is valid until the next
// positioning call; so is the slice Value returns.
type Iter struct {
	t        *Tree
	lower    []byte // nil or lowerBuf
	upper    []byte // nil or upperBuf
	lowerBuf []byte
	upperBuf []byte
	nb       *nodeBuf
	leaf     node
	idx      int
	valid    bool
	key      []byte // copy of the current key
	anchor   []byte // scratch key used while moving between leaves
	val      []byte
	err      error
	boundary Ptr
	edge     []byte // see Edge
	hasEdge  bool
	attempts int
	// reread is the word Value read again with the record (rereadSet),
	// newer than the leaf copy's; Word returns it.
	reread    Word
	rereadSet bool
}

// NewIter returns an unpositioned iterator; call First, Last, SeekGE or
// SeekLT. Call Close when done to return it to the tree's pool (optional:
// an unclosed iterator is garbage collected), after which it must not be
// used.
func (t *Tree) NewIter(o *IterOptions) *Iter {
	it, _ := t.iters.Get().(*Iter)
	if it == nil || it.t != t {
		it = &Iter{t: t, nb: new(nodeBuf)}
	}
	it.leaf = it.nb.node(t.nodeSize)
	it.lower, it.upper = nil, nil
	if o != nil {
		if o.Lower != nil {
			it.lowerBuf = append(it.lowerBuf[:0], o.Lower...)
			it.lower = it.lowerBuf
		}
		if o.Upper != nil {
			it.upperBuf = append(it.upperBuf[:0], o.Upper...)
			it.upper = it.upperBuf
		}
	}
	it.reset()
	it.idx = 0
	return it
}

// Close returns the iterator to its tree's pool.
func (it *Iter) Close() {
	if it.t == nil {
		return
	}
	it.valid = false
	it.t.iters.Put(it)
}

type seekMode uint8

const (
	seekGE   seekMode = iota // leaf covering key
	seekLT                   // leaf holding the position just below key
	seekLast                 // rightmost leaf
)

// locate copies into it.leaf the leaf for mode and key. It returns false
// when there is no such leaf in this meganode (it.boundary says where the
// walk left the meganode, if it did) or on error (it.err).
func (it *Iter) locate(mode seekMode, key []byte) bool {
	t, buf := it.t, it.leaf
restart:
	root := t.Root()
	p := root
	for {
		if !t.local(p) {
			it.setEdge(p, key)
			return false
		}
		r := CopyNode(buf, t.nodeBytes(p))
		if r == OK {
			switch mode {
			case seekGE:
				r = Covers(buf, key)
				if r == OutOfRange && p == root && t.Root() == root {
					// Below the meganode's range: start at its min.
					it.anchor = append(it.anchor[:0], buf.minKey()...)
					key, r = it.anchor, OK
				}
			case seekLT:
				if !buf.minInf() && bytes.Compare(key, buf.minKey()) <= 0 {
					if p == root && t.Root() == root {
						return false
					}
					r = OutOfRange
				} else if !buf.maxInf() && bytes.Compare(key, buf.maxKey()) > 0 {
					r = AboveMax
				}
			case seekLast:
				if rl := buf.rightLink(); t.local(rl) {
					r = AboveMax
				} else if !rl.IsNil() && p == root {
					// The meganode's keys go on in the meganode to its
					// right (a split moved them there): so does the
					// search for the last key.
					it.setEdge(rl, nil)
					return false
				}
			}
		}
		switch r {
		case OK:
			if buf.level() == 0 {
				return true
			}
			var i int
			switch mode {
			case seekGE:
				i = buf.childIndex(key)
			case seekLT:
				i, _ = buf.lowerBound(key)
				i = max(i-1, 0)
			case seekLast:
				i = buf.count() - 1
			}
			p = buf.child(i)
			continue
		case AboveMax:
			rl := buf.rightLink()
			if mode == seekLT && !t.local(rl) {
				if !rl.IsNil() {
					// key is past the meganode and the key space goes
					// on to its right: the keys just below key may be
					// there (a split moved them): continue there.
					it.setEdge(rl, key)
					return false
				}
				// key is past the meganode: its predecessor is the last key.
				mode = seekLast
				continue
			}
			p = rl
			continue
		case Corrupt:
			it.err = fmt.Errorf("node %v: consistent copy does not decode: %w", p, ErrCorruption)
			return false
		}
		if err := t.retry(r, &it.attempts); err != nil {
			it.err = err
			return false
		}
		if r != Torn {
			goto restart
		}
	}
}

// reset clears the position before a new positioning call.
func (it *Iter) reset() {
	it.valid, it.err, it.boundary, it.attempts = false, nil, 0, 0
	it.hasEdge = false
}

// setEdge records that the iteration left the meganode at key, to go on
// at p (see Edge).
func (it *Iter) setEdge(p Ptr, key []byte) {
	it.boundary = p
	it.edge = append(it.edge[:0], key...)
	it.hasEdge = true
	if key == nil {
		it.edge = nil
	}
}

// First moves to the first key >= Lower.
func (it *Iter) First() bool {
	it.reset()
	if !it.locate(seekGE, it.lower) {
		return false
	}
	it.idx, _ = it.leaf.lowerBound(it.lowerOrMin())
	return it.settleForward()
}

func (it *Iter) lowerOrMin() []byte {
	if it.lower != nil {
		return it.lower
	}
	return it.leaf.minKey()
}

// Last moves to the last key < Upper.
func (it *Iter) Last() bool {
	it.reset()
	if it.upper != nil {
		return it.seekLT(it.upper)
	}
	if !it.locate(seekLast, nil) {
		return false
	}
	it.idx = it.leaf.count() - 1
	return it.settleBackward()
}

// SeekGE moves to the first key >= key (and >= Lower).
func (it *Iter) SeekGE(key []byte) bool {
	it.reset()
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	if !it.locate(seekGE, key) {
		return false
	}
	if it.leaf.aboveMin(key) {
		it.idx, _ = it.leaf.lowerBound(key)
	} else {
		it.idx = 0
	}
	return it.settleForward()
}

// SeekLT moves to the last key < key (and < Upper).
func (it *Iter) SeekLT(key []byte) bool {
	it.reset()
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	}
	return it.seekLT(key)
}

func (it *Iter) seekLT(key []byte) bool {
	it.anchor = append(it.anchor[:0], key...)
	if !it.locate(seekLT, it.anchor) {
		return false
	}
	i, _ := it.leaf.lowerBound(it.anchor)
	it.idx = i - 1
	return it.settleBackward()
}

// Next moves to the next key.
func (it *Iter) Next() bool {
	if !it.valid {
		return false
	}
	it.attempts = 0
	it.idx++
	return it.settleForward()
}

// Prev moves to the previous key.
func (it *Iter) Prev() bool {
	if !it.valid {
		return false
	}
	it.attempts = 0
	it.idx--
	return it.settleBackward()
}

// settleForward moves right past empty leaves until idx is an entry, then
// applies the upper bound.
func (it *Iter) settleForward() bool {
	t := it.t
	it.skipPlaceholders(1)
	for it.idx >= it.leaf.count() {
		if it.leaf.maxInf() || it.upper != nil && bytes.Compare(it.leaf.maxKey(), it.upper) >= 0 {
			// Nothing right of this leaf is inside the bounds.
			return it.stop()
		}
		// Everything from the old max on is in the right sibling or
		// beyond; copy it, validated against that key.
		it.anchor = append(it.anchor[:0], it.leaf.maxKey()...)
		rl := it.leaf.rightLink()
		for {
			if !t.local(rl) {
				it.setEdge(rl, it.anchor)
				return it.stop()
			}
			r := CopyNodeFor(it.leaf, t.nodeBytes(rl), it.anchor)
			if r == OK {
				break
			}
			if r == AboveMax {
				rl = it.leaf.rightLink()
				continue
			}
			if r == Corrupt {
				it.err = fmt.Errorf("node %v: consistent copy does not decode: %w", rl, ErrCorruption)
				return it.stop()
			}
			if err := t.retry(r, &it.attempts); err != nil {
				it.err = err
				return it.stop()
			}
			if r != Torn {
				// Re-descend to the leaf covering the anchor.
				if !it.locate(seekGE, it.anchor) {
					return it.stop()
				}
				break
			}
		}
		it.idx, _ = it.leaf.lowerBound(it.anchor)
		it.skipPlaceholders(1)
	}
	k := it.leaf.key(it.idx)
	if it.upper != nil && bytes.Compare(k, it.upper) >= 0 {
		return it.stop()
	}
	return it.setKey(k)
}

// skipPlaceholders moves idx in direction dir (1 or -1) past placeholder
// entries of the current leaf, which iteration never shows.
func (it *Iter) skipPlaceholders(dir int) {
	for it.idx >= 0 && it.idx < it.leaf.count() && it.leaf.placeholder(it.idx) {
		it.idx += dir
	}
}

// settleBackward moves left past empty leaves until idx is an entry, then
// applies the lower bound.
func (it *Iter) settleBackward() bool {
	it.skipPlaceholders(-1)
	for it.idx < 0 {
		if it.leaf.minInf() || it.lower != nil && bytes.Compare(it.leaf.minKey(), it.lower) <= 0 {
			// Nothing left of this leaf is inside the bounds.
			return it.stop()
		}
		it.anchor = append(it.anchor[:0], it.leaf.minKey()...)
		if !it.locate(seekLT, it.anchor) {
			return it.stop()
		}
		i, _ := it.leaf.lowerBound(it.anchor)
		it.idx = i - 1
		it.skipPlaceholders(-1)
	}
	k := it.leaf.key(it.idx)
	if it.lower != nil && bytes.Compare(k, it.lower) < 0 {
		return it.stop()
	}
	return it.setKey(k)
}

func (it *Iter) setKey(k []byte) bool {
	it.key = append(it.key[:0], k...)
	it.valid = true
	it.rereadSet = false
	return true
}

func (it *Iter) stop() bool {
	it.valid = false
	return false
}

// Valid reports whether the iterator is at a key.
func (it *Iter) Valid() bool { return it.valid }

// Key returns the current key.
func (it *Iter) Key() []byte { return it.key }

// Error returns the error that stopped the iteration, if any.
func (it *Iter) Error() error { return it.err }

// Boundary returns, after the iteration ran off the end of the meganode
// through a right link into another meganode, where to continue (see
// Edge).
func (it *Iter) Boundary() Ptr { return it.boundary }

// Edge reports where the key space goes on when the iterator ran off what
// this meganode holds rather than stopping at a bound or an end of the key
// space (ok false then, and on errors). Moving forward it is the max key
// of the last leaf visited: every key below it was visited, and the keys
// from it on are at Boundary or, with a nil Boundary, wherever a search
// for it leads. Moving backward (Last, SeekLT, Prev) the iterator stops
// with an edge only when the position it looked for lies right of the
// meganode's current range, which a meganode split can cause under it:
// the keys below the edge (nil: unbounded) go on at Boundary. Resuming
// from the edge, never from the header's bounds, stays exact while a
// split moves the header's max.
func (it *Iter) Edge() (key []byte, ok bool) { return it.edge, it.hasEdge }

// Value reads the current key's record. If the record changed since the
// leaf was copied it reads the key again, so the value may be newer than
// the leaf (Word then returns the word read with it), and ErrNotFound
// means the key was deleted meanwhile (or is a placeholder now).
func (it *Iter) Value() ([]byte, error) {
	if !it.valid {
		return nil, ErrNotFound
	}
	if !it.leaf.extents() {
		return nil, fmt.Errorf("value in an inner meganode: %w", ErrKeyOutOfRange)
	}
	ext, n, crc := it.leaf.extent(it.idx)
	out, ok, err := it.t.loadRecord(it.val[:0], ext, n, it.key, recordCheck{crc: crc})
	if err != nil {
		return nil, err
	}
	if !ok {
		it.t.Stats.CRC.Add(1)
		out, it.reread, err = it.t.get(it.key, it.val[:0])
		it.rereadSet = err == nil
	}
	it.val = out[:0]
	return out, err
}

// Child returns the current entry's pointer in an inner meganode.
func (it *Iter) Child() Ptr {
	if !it.valid || it.leaf.extents() {
		return 0
	}
	return it.leaf.child(it.idx)
}

// ScanOptions select the keys Scan visits.
type ScanOptions struct {
	Lower, Upper []byte // [Lower, Upper), nil = unbounded
	Limit        int    // at most Limit keys; 0 = no limit
	Reverse      bool   // from the highest key down
}

// Scan calls fn for each key and value in order (reverse order with
// Reverse) until fn returns false, Limit keys were visited, or the range
// ends. key and value are valid only during the call.
func (t *Tree) Scan(o ScanOptions, fn func(key, value []byte) bool) error {
	return t.scan(o, func(key, value []byte, _ Word) bool { return fn(key, value) })
}

// scan is Scan and ScanWords.
func (t *Tree) scan(o ScanOptions, fn func(key, value []byte, w Word) bool) error {
	it := t.NewIter(&IterOptions{Lower: o.Lower, Upper: o.Upper})
	defer it.Close()
	var ok bool
	if o.Reverse {
		ok = it.Last()
	} else {
		ok = it.First()
	}
	for n := 0; ok; n++ {
		if o.Limit > 0 && n >= o.Limit {
			return nil
		}
		v, err := it.Value()
		if err == nil {
			if !fn(it.Key(), v, it.Word()) {
				return nil
			}
		} else if err != ErrNotFound {
			return err
		}
		if o.Reverse {
			ok = it.Prev()
		} else {
			ok = it.Next()
		}
	}
	return it.Error()
}
