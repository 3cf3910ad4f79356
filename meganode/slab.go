package meganode

import (
	"fmt"
	"math/bits"
)

// Size-class extents (region format 3, Options.SizeClasses).
//
// The buddy allocator rounds every extent up to a power of two atoms: a
// 176-byte record takes 256 bytes, and the paper's workload (records of 24
// to 328 bytes) loses about a third of its extent memory to the rounding.
// A region with size classes serves small extents from slabs instead: a
// slab is one buddy block cut into slots of one size class, and a record
// takes the smallest class that holds it. Larger extents stay buddy blocks.
//
// Classes (slot sizes, fixed by the format): every 8 bytes from 8 to 512,
// every 64 from 576 to 1024, every 128 from 1152 to 2048 (80 classes; the
// rounding wastes under 8 bytes up to 512 and under 12.5% above). A class
// is usable in a region when its slab fits in the heap; an extent longer
// than the largest usable class is a buddy block. The slab of class c is
// the smallest power-of-two block of at least max(4 KiB, one atom, 8
// slots) whose tail (the bytes after its header and last slot) is at most
// 1/32 of it: slabs lose at most ~3% to their tails.
//
// Slab layout (all words little-endian u64, written with 8-byte atomic
// stores like every store into region memory):
//
//	 0  next: the next slab on the slab's list (0 = none)
//	 8  prev: the previous slab on the list (0 = none)
//	16  meta: "SLAB" magic << 32 | class << 16 | slots in use
//	24  bitmap: one bit per slot, bit i%64 of word i/64 set when slot i
//	    is allocated; ceil(slots/64) words, bits past the last slot zero
//	24+8*words  slot 0, then slot 1, ... each the class's slot size
//
// Slots are 8-byte aligned, as records must be. The slab directory is a
// buddy block taken when the region is formatted (its offset is in the
// region header): two words per class, the heads of the class's partial
// list (slabs with free slots) and full list (no free slot). A slab is on
// exactly one of them. Alloc takes the lowest free slot of the first slab
// on the partial list, or a new slab (a buddy block, put at the head of
// the partial list) when the list is empty; a slab that fills moves to the
// head of the full list, and one that gets a free slot back moves to the
// head of the partial list. A slab whose last slot is freed goes back to
// the buddy allocator (its meta word cleared first). Every choice depends
// only on region memory, so the same Alloc and Free calls on the same
// image give the same offsets, and an image is self-describing: Open
// walks the lists to rebuild the counters.
//
// One-sided readers: a freed slot keeps its bytes until it is reused, and
// a reused one is rewritten; either way a reader holding a stale pointer
// detects the change through the record's CRC in its leaf entry, as with
// buddy blocks.

const (
	slabMagic     = 0x42414c53 // "SLAB"
	slabHeader    = 24         // next, prev, meta; then the bitmap
	slabMinBytes  = 4096
	slabMinSlots  = 8
	slabTailShift = 5 // tail <= slab/32
	// slabMaxSlot is the largest slot size of the class table.
	slabMaxSlot = 2048
)

// slabSlotSizes is the class table: slot sizes in bytes, increasing.
var slabSlotSizes = func() []uint64 {
	var s []uint64
	for n := uint64(8); n <= 512; n += 8 {
		s = append(s, n)
	}
	for n := uint64(576); n <= 1024; n += 64 {
		s = append(s, n)
	}
	for n := uint64(1152); n <= slabMaxSlot; n += 128 {
		s = append(s, n)
	}
	return s
}()

// slabDirBytes is the size of the slab directory: two heads per class.
var slabDirBytes = 16 * uint64(len(slabSlotSizes))

// slabClass is one usable size class.
type slabClass struct {
	slot   uint64 // slot size in bytes
	k      int    // buddy class of a slab: 2^k atoms
	bytes  uint64 // slab size in bytes
	words  uint64 // bitmap words
	first  uint64 // offset of slot 0 in the slab
	nslots uint64 // slots per slab
}

// slabs is the size-class state an Extents keeps in Go memory: the class
// table of its layout and where the directory is. Nothing in it changes
// after open.
type slabs struct {
	dir     uint64
	classes []slabClass
	// byUnits maps ceil(n/8) to the class of an n-byte extent, for
	// n <= maxSlot.
	byUnits []uint8
	maxSlot int
}

// newSlabs returns the class table of layout l with the directory at dir.
func newSlabs(l Layout, dir uint64) *slabs {
	s := &slabs{dir: dir}
	maxLog := l.maxLog()
	for _, slot := range slabSlotSizes {
		c, ok := makeSlabClass(slot, l.AtomSize, maxLog)
		if !ok {
			break // slabs grow with slots: no larger class fits either
		}
		s.classes = append(s.classes, c)
	}
	if len(s.classes) > 0 {
		s.maxSlot = int(s.classes[len(s.classes)-1].slot)
	}
	s.byUnits = make([]uint8, s.maxSlot/8+1)
	c := 0
	for u := 1; u < len(s.byUnits); u++ {
		for s.classes[c].slot < uint64(8*u) {
			c++
		}
		s.byUnits[u] = uint8(c)
	}
	return s
}

// makeSlabClass sizes the slabs of a class of slot bytes in a heap of
// atom-byte atoms whose largest block is 2^maxLog atoms.
func makeSlabClass(slot, atom uint64, maxLog int) (slabClass, bool) {
	for size := max(uint64(slabMinBytes), atom); ; size *= 2 {
		k := bits.Len64(size/atom) - 1
		if k > maxLog {
			return slabClass{}, false
		}
		// The most slots whose bitmap and slots fit after the header.
		n := (size - slabHeader) / slot
		for n > 0 && slabHeader+8*((n+63)/64)+n*slot > size {
			n--
		}
		if n < slabMinSlots {
			continue
		}
		words := (n + 63) / 64
		first := slabHeader + 8*words
		if tail := size - first - n*slot; tail<<slabTailShift > size {
			continue
		}
		return slabClass{slot: slot, k: k, bytes: size, words: words, first: first, nslots: n}, true
	}
}

// checkSizeClasses reports whether a region of layout l can have size
// classes: its heap must hold the slab directory.
func checkSizeClasses(l Layout) error {
	if l.MaxBlock() < slabDirBytes {
		return fmt.Errorf("meganode: size-class extents need a heap block of %d bytes for their directory, the largest is %d: %w", slabDirBytes, l.MaxBlock(), ErrInvalidOptions)
	}
	return nil
}

// SlabStats describe the slabs of a region with size classes (all zero
// without).
type SlabStats struct {
	// Slabs is the number of slabs.
	Slabs uint64
	// SlabBytes is the bytes of the buddy blocks that hold the slabs and
	// the slab directory.
	SlabBytes uint64
	// Slots is the number of allocated slots (extents in slabs).
	Slots uint64
	// SlotBytes is the bytes of the allocated slots, whole slots.
	SlotBytes uint64
	// Classes is the number of usable size classes, and MaxSlot the
	// largest slot: longer extents are buddy blocks.
	Classes int
	MaxSlot int
}

// SlabStats returns the slab counters.
func (e *Extents) SlabStats() SlabStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sc == nil {
		return SlabStats{}
	}
	return SlabStats{
		Slabs:     e.mu.slabBlocks - 1,
		SlabBytes: e.mu.slabAtoms << e.atomLog,
		Slots:     e.mu.slots,
		SlotBytes: e.mu.slotBytes,
		Classes:   len(e.sc.classes),
		MaxSlot:   e.sc.maxSlot,
	}
}

// SizeClasses reports whether small extents are slots of slabs.
func (e *Extents) SizeClasses() bool { return e.sc != nil }

// slabClass returns the class of an n-byte extent, false when it is a
// buddy block.
func (e *Extents) slabClass(n int) (int, bool) {
	if e.sc == nil || n <= 0 || n > e.sc.maxSlot {
		return 0, false
	}
	return int(e.sc.byUnits[(n+7)/8]), true
}

func (e *Extents) partialHead(c int) uint64 { return e.sc.dir + 16*uint64(c) }
func (e *Extents) fullHead(c int) uint64    { return e.sc.dir + 16*uint64(c) + 8 }

func slabMeta(c int, used uint64) uint64 {
	return slabMagic<<32 | uint64(c)<<16 | used
}

// formatSlabsLocked takes the slab directory from a freshly formatted heap
// and clears it.
func (e *Extents) formatSlabsLocked(l Layout) {
	i, err := e.allocBlockLocked(e.class(slabDirBytes))
	if err != nil {
		panic(fmt.Sprintf("meganode: no room for the slab directory (Options.Validate checks it): %v", err))
	}
	e.sc = newSlabs(l, e.heapOff+i<<e.atomLog)
	for off := uint64(0); off < slabDirBytes; off += 8 {
		e.storeWord(e.sc.dir+off, 0)
	}
	e.mu.slabBlocks = 1
	e.mu.slabAtoms = 1 << e.class(slabDirBytes)
}

// allocSlot allocates a slot of class c.
func (e *Extents) allocSlot(c int) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return 0, ErrClosed
	}
	cl := &e.sc.classes[c]
	s := e.loadWord(e.partialHead(c))
	if s == 0 {
		i, err := e.allocBlockLocked(cl.k)
		if err != nil {
			return 0, fmt.Errorf("meganode: a slab for %d-byte extents: %w", cl.slot, err)
		}
		s = e.heapOff + i<<e.atomLog
		for w := range cl.words {
			e.storeWord(s+slabHeader+8*w, 0)
		}
		e.storeWord(s+16, slabMeta(c, 0))
		e.listPushLocked(e.partialHead(c), s)
		e.mu.slabBlocks++
		e.mu.slabAtoms += 1 << cl.k
	}
	var idx uint64
	for w := uint64(0); ; w++ {
		bm := e.loadWord(s + slabHeader + 8*w)
		if bm != ^uint64(0) {
			b := uint64(bits.TrailingZeros64(^bm))
			idx = 64*w + b
			e.storeWord(s+slabHeader+8*w, bm|1<<b)
			break
		}
	}
	used := e.loadWord(s+16)&0xffff + 1
	e.storeWord(s+16, slabMeta(c, used))
	if used == cl.nslots {
		e.listUnlinkLocked(e.partialHead(c), s)
		e.listPushLocked(e.fullHead(c), s)
	}
	e.mu.slots++
	e.mu.slotBytes += cl.slot
	return s + cl.first + idx*cl.slot, nil
}

// freeSlot frees the slot of class c at off.
func (e *Extents) freeSlot(off uint64, c int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return ErrClosed
	}
	cl := &e.sc.classes[c]
	s, idx, err := e.checkFreeSlotLocked(off, c)
	if err != nil {
		e.mu.badFrees++
		return err
	}
	w := s + slabHeader + 8*(idx/64)
	e.storeWord(w, e.loadWord(w)&^(1<<(idx%64)))
	used := e.loadWord(s+16)&0xffff - 1
	e.mu.slots--
	e.mu.slotBytes -= cl.slot
	wasFull := used+1 == cl.nslots
	if used == 0 {
		if wasFull {
			e.listUnlinkLocked(e.fullHead(c), s)
		} else {
			e.listUnlinkLocked(e.partialHead(c), s)
		}
		e.storeWord(s+16, 0)
		e.mu.slabBlocks--
		e.mu.slabAtoms -= 1 << cl.k
		e.freeBlockLocked(e.atomIndex(s), cl.k)
		return nil
	}
	e.storeWord(s+16, slabMeta(c, used))
	if wasFull {
		e.listUnlinkLocked(e.fullHead(c), s)
		e.listPushLocked(e.partialHead(c), s)
	}
	return nil
}

// checkFreeSlotLocked returns the slab and slot index of the allocated
// slot of class c at off.
func (e *Extents) checkFreeSlotLocked(off uint64, c int) (uint64, uint64, error) {
	cl := &e.sc.classes[c]
	heapEnd := e.heapOff + e.atoms<<e.atomLog
	if off < e.heapOff || off >= heapEnd {
		return 0, 0, fmt.Errorf("meganode: free of offset %#x outside the heap [%#x, %#x): %w", off, e.heapOff, heapEnd, ErrBadFree)
	}
	s := e.heapOff + (off-e.heapOff)&^(cl.bytes-1)
	if s+cl.bytes > heapEnd || e.ctrl(e.atomIndex(s)) != ctrlHead|byte(cl.k) {
		return 0, 0, fmt.Errorf("meganode: free of %#x with %d-byte slots: not in a slab: %w", off, cl.slot, ErrBadFree)
	}
	meta := e.loadWord(s + 16)
	if meta>>32 != slabMagic || int(meta>>16&0xffff) != c {
		return 0, 0, fmt.Errorf("meganode: free of %#x with %d-byte slots: block %#x is not a slab of the class (meta %#x): %w", off, cl.slot, s, meta, ErrBadFree)
	}
	rel := off - s
	if rel < cl.first || (rel-cl.first)%cl.slot != 0 || (rel-cl.first)/cl.slot >= cl.nslots {
		return 0, 0, fmt.Errorf("meganode: free of %#x: not a slot of slab %#x: %w", off, s, ErrBadFree)
	}
	idx := (rel - cl.first) / cl.slot
	if e.loadWord(s+slabHeader+8*(idx/64))&(1<<(idx%64)) == 0 {
		return 0, 0, fmt.Errorf("meganode: free of %#x: slot %d of slab %#x is free: %w", off, idx, s, ErrBadFree)
	}
	return s, idx, nil
}

// listPushLocked puts slab s at the head of the list whose head word is
// at head.
func (e *Extents) listPushLocked(head, s uint64) {
	next := e.loadWord(head)
	e.storeWord(s, next)
	e.storeWord(s+8, 0)
	if next != 0 {
		e.storeWord(next+8, s)
	}
	e.storeWord(head, s)
}

// listUnlinkLocked takes slab s off the list whose head word is at head.
func (e *Extents) listUnlinkLocked(head, s uint64) {
	next, prev := e.loadWord(s), e.loadWord(s+8)
	if prev == 0 {
		e.storeWord(head, next)
	} else {
		e.storeWord(prev, next)
	}
	if next != 0 {
		e.storeWord(next+8, prev)
	}
}

// checkSlabsLocked walks the slab directory and every slab on its lists
// (after checkLocked's walk of the buddy blocks) and reports the first
// broken invariant, wrapping ErrCorruption:
//
//	the directory is an allocated block of its size; the lists of classes
//	the layout cannot use are empty; every slab on a list is an allocated
//	block of its class's size, aligned, with the magic and its class in
//	its meta word, a used count that matches its bitmap (no bit past the
//	last slot), at least one slot used and, on the partial list, one free
//	(on the full list none); prev links are consistent; no slab is on two
//	lists; the counters match.
//
// With rebuild it sets the slab counters instead of comparing them.
func (e *Extents) checkSlabsLocked(rebuild bool) error {
	dirK := e.class(slabDirBytes)
	if e.ctrl(e.atomIndex(e.sc.dir)) != ctrlHead|byte(dirK) {
		return fmt.Errorf("meganode: slab directory %#x is not an allocated block of %d bytes (control byte %#02x): %w", e.sc.dir, e.blockBytes(dirK), e.ctrl(e.atomIndex(e.sc.dir)), ErrCorruption)
	}
	heapEnd := e.heapOff + e.atoms<<e.atomLog
	seen := make(map[uint64]struct{})
	slabBlocks, slabAtoms := uint64(1), uint64(1)<<dirK
	var slots, slotBytes uint64
	for c := range slabSlotSizes {
		for full := range 2 {
			head := e.partialHead(c) + 8*uint64(full)
			if c >= len(e.sc.classes) {
				if w := e.loadWord(head); w != 0 {
					return fmt.Errorf("meganode: slab list of unusable class %d holds %#x: %w", c, w, ErrCorruption)
				}
				continue
			}
			cl := &e.sc.classes[c]
			var prev uint64
			for s := e.loadWord(head); s != 0; s = e.loadWord(s) {
				if s < e.heapOff || s >= heapEnd || (s-e.heapOff)&(cl.bytes-1) != 0 || s+cl.bytes > heapEnd {
					return fmt.Errorf("meganode: slab list %d/%d links to %#x, not a slab block of the heap: %w", c, full, s, ErrCorruption)
				}
				if _, dup := seen[s]; dup {
					return fmt.Errorf("meganode: slab %#x twice on the slab lists (cycle): %w", s, ErrCorruption)
				}
				seen[s] = struct{}{}
				if ctl := e.ctrl(e.atomIndex(s)); ctl != ctrlHead|byte(cl.k) {
					return fmt.Errorf("meganode: slab %#x has control byte %#02x, want an allocated block of %d bytes: %w", s, ctl, cl.bytes, ErrCorruption)
				}
				if p := e.loadWord(s + 8); p != prev {
					return fmt.Errorf("meganode: slab %#x has prev %#x, want %#x: %w", s, p, prev, ErrCorruption)
				}
				prev = s
				meta := e.loadWord(s + 16)
				used := meta & 0xffff
				if meta>>32 != slabMagic || int(meta>>16&0xffff) != c {
					return fmt.Errorf("meganode: slab %#x of class %d has meta %#x: %w", s, c, meta, ErrCorruption)
				}
				var count uint64
				for w := range cl.words {
					bm := e.loadWord(s + slabHeader + 8*w)
					if w == cl.words-1 && cl.nslots%64 != 0 && bm>>(cl.nslots%64) != 0 {
						return fmt.Errorf("meganode: slab %#x marks slots past its %d: %w", s, cl.nslots, ErrCorruption)
					}
					count += uint64(bits.OnesCount64(bm))
				}
				if count != used || used == 0 || (full == 0) != (used < cl.nslots) {
					return fmt.Errorf("meganode: slab %#x on list %d/%d: %d slots in use, bitmap says %d, of %d: %w", s, c, full, used, count, cl.nslots, ErrCorruption)
				}
				slabBlocks++
				slabAtoms += 1 << cl.k
				slots += used
				slotBytes += used * cl.slot
			}
		}
	}
	if rebuild {
		e.mu.slabBlocks, e.mu.slabAtoms, e.mu.slots, e.mu.slotBytes = slabBlocks, slabAtoms, slots, slotBytes
		return nil
	}
	if slabBlocks != e.mu.slabBlocks || slabAtoms != e.mu.slabAtoms || slots != e.mu.slots || slotBytes != e.mu.slotBytes {
		return fmt.Errorf("meganode: slab counters (%d blocks, %d slots) disagree with the heap (%d blocks, %d slots): %w", e.mu.slabBlocks, e.mu.slots, slabBlocks, slots, ErrCorruption)
	}
	return nil
}
