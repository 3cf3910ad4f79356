package meganode

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
)

// Extents is the buddy allocator of a region's extent area, after SQLite's
// mem5: the heap is split into atoms; every block is a power of two atoms
// long and aligned to its size; a control byte per atom records the block
// heads, their size class and whether they are free; each size class has a
// doubly linked free list threaded through the free blocks themselves; Free
// merges a block with its buddy as long as the buddy is free and whole.
//
// All of the allocator's state that decides future offsets (control bytes,
// free list links and heads) lives in the region memory, so a region image
// is self-describing: reopening it, or shipping it to another replica,
// resumes allocation exactly where it stopped. The counters in Stats are
// kept in Go memory and recomputed from the control bytes on open.
//
// Extents implements blink.Extents. It is safe for concurrent use: the
// meganodes of a region share it and it serialises them on a mutex. It is
// deterministic: the same sequence of Alloc and Free calls on the same image
// returns the same offsets.
//
// Every store into region memory is an 8-byte atomic store (control bytes
// are updated by rewriting the word that holds them): one-sided readers that
// hold a stale pointer into a freed block read it concurrently, with atomic
// loads, and detect the change through the extent CRC.
type Extents struct {
	mem     []byte // the whole region
	ctrlOff uint64 // offset of the control bytes
	heapOff uint64 // offset of atom 0
	atoms   uint64
	atomLog uint
	maxLog  int // largest size class that fits in the heap
	// beforeWrite is the region's (capture.go): told of every store
	// before it is made. Nil while the area is formatted or opened.
	beforeWrite func(off, n uint64)
	// sc is the size-class state (slab.go), nil in a buddy-only region.
	sc *slabs

	// Locking notes: Region.mu < Extents.mu.
	mu struct {
		sync.Mutex
		closed   bool
		free     [maxBins]uint64 // free blocks per size class
		inUse    uint64          // atoms in allocated blocks
		blocks   uint64          // allocated blocks
		badFrees uint64
		// With size classes (slab.go): the blocks and atoms of the slab
		// directory and the slabs (counted in blocks and inUse too),
		// and the slots allocated and their bytes.
		slabBlocks, slabAtoms uint64
		slots, slotBytes      uint64
	}
}

var _ blink.Extents = (*Extents)(nil)

// ExtentStats describe the extent area. Byte counts are whole blocks: an
// allocation of n bytes uses the next power of two atoms, or, in a region
// with size classes, a slot of its class when it is small (slab.go).
//
// With size classes, InUse counts the extents allocated (whole slots and
// blocks), not the slabs that hold the slots: Free (Capacity - InUse)
// then includes the slabs' free slots, headers and tails (SlabStats
// tells them apart), while FreeBlocks, LargestFree and Fragmentation
// describe the free buddy blocks.
type ExtentStats struct {
	// Capacity is the heap size in bytes.
	Capacity uint64
	// InUse is the bytes in allocated blocks (and slots).
	InUse uint64
	// Blocks is the number of allocated blocks (and slots): extents.
	Blocks uint64
	// Free is Capacity - InUse.
	Free uint64
	// FreeBlocks is the number of free blocks.
	FreeBlocks uint64
	// LargestFree is the size of the largest free block, the largest
	// allocation that can succeed now.
	LargestFree uint64
	// MaxBlock is the largest block the heap can ever hold.
	MaxBlock uint64
	// Fragmentation is 1 - LargestFree/min(Free, MaxBlock): 0 when the free
	// space is as contiguous as the heap allows (or nothing is free), close
	// to 1 when it is scattered in small blocks.
	Fragmentation float64
	// BadFrees counts Free calls that were rejected (see ErrBadFree).
	BadFrees uint64
}

func newExtents(mem []byte, l Layout) *Extents {
	return &Extents{
		mem:     mem,
		ctrlOff: l.ExtentOff,
		heapOff: l.HeapOff,
		atoms:   l.Atoms,
		atomLog: uint(bits.TrailingZeros64(l.AtomSize)),
		maxLog:  l.maxLog(),
	}
}

// formatExtentsWith initialises the extent area of mem: every control
// byte and free list head cleared, then the heap carved into the largest
// aligned blocks that fit, lowest address first, each put on its free
// list; then, with sizeClasses, the slab
// directory taken from the heap (REQUIRES: checkSizeClasses(l) is nil).
func formatExtentsWith(mem []byte, l Layout, sizeClasses bool) *Extents {
	e := newExtents(mem, l)
	e.mu.Lock()
	defer e.mu.Unlock()
	zero := atomicmem.Alloc(pageAlign)
	for off := l.ExtentOff; off < l.HeapOff; off += pageAlign {
		atomicmem.Store(mem[off:off+pageAlign], zero)
	}
	for k := range maxBins {
		e.storeWord(e.headOff(k), 0)
	}
	var i uint64
	for k := e.maxLog; k >= 0; k-- {
		if i+1<<k <= e.atoms {
			e.pushLocked(i, k)
			i += 1 << k
		}
	}
	if sizeClasses {
		e.formatSlabsLocked(l)
	}
	return e
}

// openExtents checks the extent area of mem and rebuilds the counters.
// Errors wrap ErrCorruption.
func openExtents(mem []byte, l Layout) (*Extents, error) {
	return openExtentsWith(mem, header{Layout: l})
}

// openExtentsWith is openExtents for a region with header h: with size
// classes, its slabs are checked and counted too.
func openExtentsWith(mem []byte, h header) (*Extents, error) {
	e := newExtents(mem, h.Layout)
	if h.sizeClasses() {
		if err := checkSizeClasses(h.Layout); err != nil {
			return nil, fmt.Errorf("meganode: %w: %w", err, ErrCorruption)
		}
		e.sc = newSlabs(h.Layout, h.slabDir)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.checkLocked(true); err != nil {
		return nil, err
	}
	return e, nil
}

// Alloc returns the region offset of a block of at least n bytes, aligned
// to the atom size (at least 8 bytes). When no free block is large enough it
// returns an error wrapping blink.ErrExtentsFull and changes nothing. The
// smallest free block that fits is split, keeping the lower halves; among
// free blocks of one size the most recently freed is reused first.
func (e *Extents) Alloc(n int) (uint64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("meganode: extent of %d bytes: %w", n, ErrInvalidSize)
	}
	if c, ok := e.slabClass(n); ok {
		return e.allocSlot(c)
	}
	k := e.class(uint64(n))
	if k > e.maxLog {
		return 0, fmt.Errorf("meganode: extent of %d bytes exceeds the largest block of %d bytes: %w", n, e.blockBytes(e.maxLog), blink.ErrExtentsFull)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return 0, ErrClosed
	}
	i, err := e.allocBlockLocked(k)
	if err != nil {
		return 0, err
	}
	return e.heapOff + i<<e.atomLog, nil
}

// allocBlockLocked takes a block of class k (REQUIRES: k <= maxLog) and
// returns its atom index.
func (e *Extents) allocBlockLocked(k int) (uint64, error) {
	j := k
	for j <= e.maxLog && e.mu.free[j] == 0 {
		j++
	}
	if j > e.maxLog {
		return 0, fmt.Errorf("meganode: no free extent block of %d bytes (largest free %d): %w", e.blockBytes(k), e.largestFreeLocked(), blink.ErrExtentsFull)
	}
	i := e.atomIndex(e.loadWord(e.headOff(j)))
	e.unlinkLocked(i, j)
	for j > k {
		j--
		e.pushLocked(i+1<<j, j)
	}
	e.setCtrl(i, ctrlHead|byte(k))
	e.mu.inUse += 1 << k
	e.mu.blocks++
	return i, nil
}

// Free returns the block at off that Alloc(n) returned. A free that does
// not match an allocated block (double free, wrong size, wild offset) is a
// caller bug: it is counted in ExtentStats.BadFrees and ignored, and it
// panics in builds with the invariants tag. Use FreeChecked to get the
// error.
func (e *Extents) Free(off uint64, n int) {
	if err := e.FreeChecked(off, n); err != nil && invariants && errors.Is(err, ErrBadFree) {
		panic(err)
	}
}

// FreeChecked is Free that returns an error wrapping ErrBadFree (nothing
// changed but the BadFrees counter) or ErrClosed.
func (e *Extents) FreeChecked(off uint64, n int) error {
	if c, ok := e.slabClass(n); ok {
		return e.freeSlot(off, c)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return ErrClosed
	}
	i, k, err := e.checkFreeLocked(off, n)
	if err != nil {
		e.mu.badFrees++
		return err
	}
	e.freeBlockLocked(i, k)
	return nil
}

// freeBlockLocked frees the allocated block i of class k.
func (e *Extents) freeBlockLocked(i uint64, k int) {
	e.mu.inUse -= 1 << k
	e.mu.blocks--
	// Merge with the buddy while it is a free block of the same size. The
	// buddy's atom index is always a block head (a larger block holding it
	// would also hold i), so its control byte is current.
	for k < e.maxLog {
		var buddy uint64
		if (i>>k)&1 == 1 {
			buddy = i - 1<<k
		} else {
			buddy = i + 1<<k
			if buddy >= e.atoms {
				break
			}
		}
		if e.ctrl(buddy) != ctrlHead|ctrlFree|byte(k) {
			break
		}
		e.unlinkLocked(buddy, k)
		e.setCtrl(max(i, buddy), 0)
		i = min(i, buddy)
		k++
	}
	e.pushLocked(i, k)
}

// checkFreeLocked returns the atom index and class of the allocated block
// that Free(off, n) names.
func (e *Extents) checkFreeLocked(off uint64, n int) (uint64, int, error) {
	heapEnd := e.heapOff + e.atoms<<e.atomLog
	if off < e.heapOff || off >= heapEnd || (off-e.heapOff)&(1<<e.atomLog-1) != 0 {
		return 0, 0, fmt.Errorf("meganode: free of offset %#x outside the atoms of the heap [%#x, %#x): %w", off, e.heapOff, heapEnd, ErrBadFree)
	}
	i := e.atomIndex(off)
	c := e.ctrl(i)
	if c&ctrlHead == 0 || c&ctrlFree != 0 {
		return 0, 0, fmt.Errorf("meganode: free of %#x: not an allocated block (control byte %#02x): %w", off, c, ErrBadFree)
	}
	k := int(c & ctrlLogMask)
	if n <= 0 || e.class(uint64(n)) != k {
		return 0, 0, fmt.Errorf("meganode: free of %#x with %d bytes, block is %d bytes: %w", off, n, e.blockBytes(k), ErrBadFree)
	}
	return i, k, nil
}

// Stats returns the allocator's counters.
func (e *Extents) Stats() ExtentStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := ExtentStats{
		Capacity:    e.atoms << e.atomLog,
		InUse:       (e.mu.inUse-e.mu.slabAtoms)<<e.atomLog + e.mu.slotBytes,
		Blocks:      e.mu.blocks - e.mu.slabBlocks + e.mu.slots,
		LargestFree: e.largestFreeLocked(),
		MaxBlock:    e.blockBytes(e.maxLog),
		BadFrees:    e.mu.badFrees,
	}
	s.Free = s.Capacity - s.InUse
	for _, c := range e.mu.free {
		s.FreeBlocks += c
	}
	freeBlocks := s.Capacity - e.mu.inUse<<e.atomLog // == Free without slabs
	if ideal := min(freeBlocks, s.MaxBlock); ideal > 0 {
		s.Fragmentation = 1 - float64(s.LargestFree)/float64(ideal)
	}
	return s
}

// Check walks the control bytes and free lists and reports the first
// broken invariant, wrapping ErrCorruption:
//
//	every atom is a block head or inside a block; heads are aligned to their
//	size and end inside the heap; atoms inside blocks have zero control bytes;
//	free list k holds exactly the free blocks of class k, with consistent
//	prev links; no free block has a free buddy of the same size (coalescing
//	is complete); the counters match.
func (e *Extents) Check() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return ErrClosed
	}
	return e.checkLocked(false)
}

// checkLocked implements Check; with rebuild it sets the counters from
// what it finds instead of comparing them.
func (e *Extents) checkLocked(rebuild bool) error {
	var free [maxBins]uint64
	var inUse, blocks uint64
	for i := uint64(0); i < e.atoms; {
		c := e.ctrl(i)
		k := int(c & ctrlLogMask)
		if c&ctrlHead == 0 || k > e.maxLog || i&(1<<k-1) != 0 || i+1<<k > e.atoms {
			return fmt.Errorf("meganode: extent atom %d: control byte %#02x is not a block head: %w", i, c, ErrCorruption)
		}
		for a := i + 1; a < i+1<<k; a++ {
			if e.ctrl(a) != 0 {
				return fmt.Errorf("meganode: extent atom %d inside block %d has control byte %#02x: %w", a, i, e.ctrl(a), ErrCorruption)
			}
		}
		if c&ctrlFree != 0 {
			free[k]++
			if k < e.maxLog {
				if b := i ^ 1<<k; b < e.atoms && e.ctrl(b) == c {
					return fmt.Errorf("meganode: free extent blocks %d and %d of class %d are buddies: %w", i, b, k, ErrCorruption)
				}
			}
		} else {
			inUse += 1 << k
			blocks++
		}
		i += 1 << k
	}
	for k := range maxBins {
		var prev, count uint64
		for off := e.loadWord(e.headOff(k)); off != 0; off = e.loadWord(off) {
			if count++; count > free[k] {
				return fmt.Errorf("meganode: free list %d longer than its %d free blocks (cycle or stray block at %#x): %w", k, free[k], off, ErrCorruption)
			}
			if off < e.heapOff || off >= e.heapOff+e.atoms<<e.atomLog || (off-e.heapOff)&(1<<e.atomLog-1) != 0 {
				return fmt.Errorf("meganode: free list %d links to %#x outside the heap: %w", k, off, ErrCorruption)
			}
			if c := e.ctrl(e.atomIndex(off)); c != ctrlHead|ctrlFree|byte(k) {
				return fmt.Errorf("meganode: free list %d links to %#x with control byte %#02x: %w", k, off, c, ErrCorruption)
			}
			if p := e.loadWord(off + 8); p != prev {
				return fmt.Errorf("meganode: free block %#x has prev %#x, want %#x: %w", off, p, prev, ErrCorruption)
			}
			prev = off
		}
		if count != free[k] {
			return fmt.Errorf("meganode: free list %d has %d blocks, control bytes say %d: %w", k, count, free[k], ErrCorruption)
		}
	}
	if rebuild {
		e.mu.free, e.mu.inUse, e.mu.blocks = free, inUse, blocks
	} else if free != e.mu.free || inUse != e.mu.inUse || blocks != e.mu.blocks {
		return fmt.Errorf("meganode: extent counters (%d atoms in %d blocks) disagree with the heap (%d atoms in %d blocks): %w", e.mu.inUse, e.mu.blocks, inUse, blocks, ErrCorruption)
	}
	if e.sc != nil {
		return e.checkSlabsLocked(rebuild)
	}
	return nil
}

// close makes later calls fail with ErrClosed; the region unmaps next.
func (e *Extents) close() {
	e.mu.Lock()
	e.mu.closed = true
	e.mu.Unlock()
}

// class returns the size class of an n-byte block: the smallest k with
// 2^k atoms >= n bytes.
func (e *Extents) class(n uint64) int {
	a := (n-1)>>e.atomLog + 1 // atoms, without overflow
	return bits.Len64(a - 1)
}

func (e *Extents) blockBytes(k int) uint64 { return 1 << (uint(k) + e.atomLog) }

func (e *Extents) atomIndex(off uint64) uint64 { return (off - e.heapOff) >> e.atomLog }

func (e *Extents) headOff(k int) uint64 { return offFreeLists + 8*uint64(k) }

func (e *Extents) largestFreeLocked() uint64 {
	for k := e.maxLog; k >= 0; k-- {
		if e.mu.free[k] != 0 {
			return e.blockBytes(k)
		}
	}
	return 0
}

// pushLocked marks block i of class k free and puts it at the head of free
// list k.
func (e *Extents) pushLocked(i uint64, k int) {
	off := e.heapOff + i<<e.atomLog
	head := e.loadWord(e.headOff(k))
	e.storeWord(off, head)
	e.storeWord(off+8, 0)
	if head != 0 {
		e.storeWord(head+8, off)
	}
	e.storeWord(e.headOff(k), off)
	e.setCtrl(i, ctrlHead|ctrlFree|byte(k))
	e.mu.free[k]++
}

// unlinkLocked takes free block i of class k off its list. Its control
// byte still says free; the caller rewrites it.
func (e *Extents) unlinkLocked(i uint64, k int) {
	off := e.heapOff + i<<e.atomLog
	next, prev := e.loadWord(off), e.loadWord(off+8)
	if prev == 0 {
		e.storeWord(e.headOff(k), next)
	} else {
		e.storeWord(prev, next)
	}
	if next != 0 {
		e.storeWord(next+8, prev)
	}
	e.mu.free[k]--
}

// ctrl returns the control byte of atom i. Only the allocator (under mu)
// writes control bytes, so a plain load is race-free here.
func (e *Extents) ctrl(i uint64) byte { return e.mem[e.ctrlOff+i] }

// setCtrl sets the control byte of atom i by storing its whole word.
func (e *Extents) setCtrl(i uint64, c byte) {
	w := (e.ctrlOff + i) &^ 7
	shift := 8 * ((e.ctrlOff + i) & 7)
	v := atomicmem.LoadUint64(e.mem, int(w))
	v = v&^(0xff<<shift) | uint64(c)<<shift
	e.storeWord(w, v)
}

func (e *Extents) loadWord(off uint64) uint64 { return atomicmem.LoadUint64(e.mem, int(off)) }

func (e *Extents) storeWord(off, v uint64) {
	if e.beforeWrite != nil {
		e.beforeWrite(off, 8)
	}
	atomicmem.StoreUint64(e.mem, int(off), v)
}
