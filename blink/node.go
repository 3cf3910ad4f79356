package blink

import (
	"bytes"
	"encoding/binary"
)

// node is a view over one node's bytes: a validated copy (readers), the
// live node in region memory (the writer, which may read its own memory with
// plain loads), or a scratch image being built. Accessors never allocate.
// The decoders trust offsets only after checkNode has accepted the bytes;
// every reader path calls it (through CopyNode) before decoding.
type node []byte

var le = binary.LittleEndian

func (n node) u16(off int) int          { return int(le.Uint16(n[off:])) }
func (n node) putU16(off, v int)        { le.PutUint16(n[off:], uint16(v)) }
func (n node) u64(off int) uint64       { return le.Uint64(n[off:]) }
func (n node) putU64(off int, v uint64) { le.PutUint64(n[off:], v) }

func (n node) headVersion() uint64 { return n.u64(offHeadVersion) }
func (n node) tailVersion() uint64 { return n.u64(len(n) - tailSize) }
func (n node) flags() byte         { return n[offFlags] }
func (n node) valid() bool         { return n[offFlags]&flagValid != 0 }
func (n node) level() int          { return int(n[offLevel]) }
func (n node) count() int          { return n.u16(offCount) }
func (n node) kind() byte          { return n[offKind] }
func (n node) heapLo() int         { return n.u16(offHeapLo) }
func (n node) rightLink() Ptr      { return Ptr(n.u64(offRightLink)) }
func (n node) minInf() bool        { return n[offFlags]&flagMinInf != 0 }
func (n node) maxInf() bool        { return n[offFlags]&flagMaxInf != 0 }
func (n node) extents() bool       { return n[offFlags]&flagExtents != 0 }

// versioned reports a versioned extent leaf: every entry's payload ends
// with an entry word. (checkNode refuses the flag on pointer nodes.)
func (n node) versioned() bool { return n[offFlags]&flagVersioned != 0 }

// payloadSize is the size of every entry's payload in this node.
func (n node) payloadSize() int {
	if n.extents() {
		if n.versioned() {
			return versionedPayload
		}
		return extentPayload
	}
	return pointerPayload
}

// rawWord returns entry i's word as stored: 0 in a legacy leaf.
func (n node) rawWord(i int) Word {
	if !n.versioned() {
		return 0
	}
	return Word(le.Uint64(n.payload(i)[extentPayload:]))
}

// placeholder reports whether entry i is a placeholder (no record).
func (n node) placeholder(i int) bool { return n.versioned() && n.rawWord(i).Placeholder() }

// minKey returns the node's min key; it is empty when min is -inf.
func (n node) minKey() []byte {
	o, l := n.u16(offMinOff), n.u16(offMinLen)
	return n[o : o+l]
}

// maxKey returns the node's max key; it is empty when max is +inf.
func (n node) maxKey() []byte {
	o, l := n.u16(offMaxOff), n.u16(offMaxLen)
	return n[o : o+l]
}

func (n node) slot(i int) int { return n.u16(offSlots + slotSize*i) }

// key returns the key of entry i.
func (n node) key(i int) []byte {
	o := n.slot(i)
	l := n.u16(o)
	return n[o+keyLenSize : o+keyLenSize+l]
}

// payload returns the payload bytes of entry i.
func (n node) payload(i int) []byte {
	o := n.slot(i)
	s := o + keyLenSize + n.u16(o)
	return n[s : s+n.payloadSize()]
}

// child returns the pointer of entry i of a pointer node.
func (n node) child(i int) Ptr { return Ptr(le.Uint64(n.payload(i))) }

// extent returns the extent pointer, record length and CRC of entry i of an
// extent leaf.
func (n node) extent(i int) (Ptr, int, uint64) {
	p := n.payload(i)
	return Ptr(le.Uint64(p)), int(le.Uint32(p[8:])), le.Uint64(p[12:])
}

// aboveMin reports whether key >= the node's min key.
func (n node) aboveMin(key []byte) bool {
	return n.minInf() || bytes.Compare(key, n.minKey()) >= 0
}

// belowMax reports whether key < the node's max key.
func (n node) belowMax(key []byte) bool {
	return n.maxInf() || bytes.Compare(key, n.maxKey()) < 0
}

// lowerBound returns the index of the first entry whose key is >= key, and
// whether that entry's key equals key.
func (n node) lowerBound(key []byte) (int, bool) {
	lo, hi := 0, n.count()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(n.key(m), key) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < n.count() && bytes.Equal(n.key(lo), key)
}

// childIndex returns the index of the entry whose subtree covers key in an
// inner node: the last entry with key_i <= key (0 if none).
func (n node) childIndex(key []byte) int {
	i, eq := n.lowerBound(key)
	if eq {
		return i
	}
	if i > 0 {
		return i - 1
	}
	return 0
}

// entrySize is the heap space one entry takes, without its slot.
func entrySize(keyLen, payload int) int { return keyLenSize + keyLen + payload }

// usedBytes returns the bytes of the node taken by its header, slots, live
// entries, min and max keys and tail: what a compacted image would use.
func (n node) usedBytes() int {
	used := offSlots + tailSize + len(n.minKey()) + len(n.maxKey())
	ps := n.payloadSize()
	for i, c := 0, n.count(); i < c; i++ {
		used += slotSize + entrySize(len(n.key(i)), ps)
	}
	return used
}

// ---- Building and editing images (writer only, on scratch memory). ----

// initNode clears the body of b (keeping its version words) and writes an
// empty node with the given header and bounds.
func initNode(b node, kind byte, level int, flags byte, min, max []byte, right Ptr) {
	clear(b[8 : len(b)-tailSize])
	b[offFlags] = flags
	b[offLevel] = byte(level)
	b[offKind] = kind
	b.putU64(offRightLink, uint64(right))
	hi := len(b) - tailSize
	hi -= len(max)
	copy(b[hi:], max)
	b.putU16(offMaxOff, hi)
	b.putU16(offMaxLen, len(max))
	hi -= len(min)
	copy(b[hi:], min)
	b.putU16(offMinOff, hi)
	b.putU16(offMinLen, len(min))
	b.putU16(offHeapLo, hi)
}

// free returns the contiguous free bytes between the slot array and the heap.
func (n node) free() int { return n.heapLo() - offSlots - slotSize*n.count() }

// fits reports whether an entry with a key of keyLen bytes can be added,
// possibly after compaction.
func (n node) fits(keyLen int) bool {
	return n.usedBytes()+slotSize+entrySize(keyLen, n.payloadSize()) <= len(n)
}

// insertEntry inserts (key, payload) as entry i. The caller has checked
// fits; insertEntry compacts the heap with tmp (a node-sized buffer) when
// the contiguous free space is too small.
func (n node) insertEntry(i int, key, payload []byte, tmp node) {
	need := slotSize + entrySize(len(key), len(payload))
	if n.free() < need {
		n.compact(tmp)
	}
	c := n.count()
	o := n.heapLo() - entrySize(len(key), len(payload))
	n.putU16(o, len(key))
	copy(n[o+keyLenSize:], key)
	copy(n[o+keyLenSize+len(key):], payload)
	s := offSlots + slotSize*i
	copy(n[s+slotSize:offSlots+slotSize*(c+1)], n[s:offSlots+slotSize*c])
	n.putU16(s, o)
	n.putU16(offCount, c+1)
	n.putU16(offHeapLo, o)
}

// appendEntry adds an entry after the last one; used when building sorted
// images, where the caller knows it fits without compaction.
func (n node) appendEntry(key, payload []byte) {
	c := n.count()
	o := n.heapLo() - entrySize(len(key), len(payload))
	n.putU16(o, len(key))
	copy(n[o+keyLenSize:], key)
	copy(n[o+keyLenSize+len(key):], payload)
	n.putU16(offSlots+slotSize*c, o)
	n.putU16(offCount, c+1)
	n.putU16(offHeapLo, o)
}

// removeEntry removes entry i; its heap bytes become garbage until the next
// compaction.
func (n node) removeEntry(i int) {
	c := n.count()
	s := offSlots + slotSize*i
	copy(n[s:], n[s+slotSize:offSlots+slotSize*c])
	n.putU16(offSlots+slotSize*(c-1), 0)
	n.putU16(offCount, c-1)
}

// compact rewrites n with its heap packed, through tmp.
func (n node) compact(tmp node) {
	copy(tmp, n)
	min, max := tmp.minKey(), tmp.maxKey()
	initNode(n, tmp.kind(), tmp.level(), tmp.flags(), min, max, tmp.rightLink())
	for i, c := 0, tmp.count(); i < c; i++ {
		n.appendEntry(tmp.key(i), tmp.payload(i))
	}
}
