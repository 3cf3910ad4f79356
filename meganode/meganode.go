package meganode

import (
	"fmt"
	"math/bits"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
)

// Meganode is one meganode of a region: a slot of the node area holding a
// blink tree.
type Meganode struct {
	region *Region
	slot   int
	base   uint64
	tree   *blink.Tree
}

// Tree returns the meganode's B-link tree.
func (m *Meganode) Tree() *blink.Tree { return m.tree }

// Region returns the region the meganode lives in.
func (m *Meganode) Region() *Region { return m.region }

// Slot returns the meganode's slot in its region.
func (m *Meganode) Slot() int { return m.slot }

// Base returns the region offset of the meganode (of its header node).
func (m *Meganode) Base() uint64 { return m.base }

// Size returns the meganode's size in bytes.
func (m *Meganode) Size() uint64 { return m.region.lay.MeganodeSize }

// Ptr returns the pointer to the meganode's header node.
func (m *Meganode) Ptr() blink.Ptr { return blink.MakePtr(m.region.id, m.base) }

func (m *Meganode) String() string {
	return fmt.Sprintf("meganode %v (region %d slot %d)", m.Ptr(), m.region.id, m.slot)
}

// NewMeganode takes the lowest free slot, formats an empty meganode there
// (blink.Format) at the given global level (0 for a leaf meganode) with the
// given key range, and marks the slot in use. The choice of slot depends
// only on which slots are in use, so replicas replaying the same operations
// agree. opts.NodeSize must be 0 or the region's node size. It returns an
// error wrapping ErrRegionFull when every slot is in use; on any error the
// slot stays free.
func (r *Region) NewMeganode(level int, bounds blink.Bounds, opts blink.Options) (*Meganode, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil, ErrClosed
	}
	opts, err := r.treeOptions(opts)
	if err != nil {
		return nil, err
	}
	slot, ok := r.lowestFreeSlotLocked()
	if !ok {
		return nil, fmt.Errorf("meganode: region %d: all %d slots in use: %w", r.id, r.lay.Slots, ErrRegionFull)
	}
	base := r.lay.SlotBase(slot)
	cfg := blink.Config{Region: r.id, Base: base, Size: r.lay.MeganodeSize, Level: level, Bounds: bounds}
	t, err := blink.Format(r.mem, cfg, r.ext, opts)
	if err != nil {
		return nil, fmt.Errorf("meganode: format slot %d of region %d: %w", slot, r.id, err)
	}
	r.setSlotLocked(slot, true)
	m := &Meganode{region: r, slot: slot, base: base, tree: t}
	r.mu.open[slot] = m
	return m, nil
}

// OpenMeganode returns the meganode in slot (blink.Open on first use). The
// same *Meganode is returned for a slot until it is freed: a meganode has
// one tree, hence one writer lock, per process. opts are the tree's run-time
// options; its node size is read from the meganode. The error wraps
// ErrNoMeganode when the slot is free or out of range, and ErrCorruption
// when the slot is marked in use but holds no valid meganode.
func (r *Region) OpenMeganode(slot int, opts blink.Options) (*Meganode, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil, ErrClosed
	}
	if err := r.checkSlotLocked(slot); err != nil {
		return nil, err
	}
	if m, ok := r.mu.open[slot]; ok {
		return m, nil
	}
	opts, err := r.treeOptions(opts)
	if err != nil {
		return nil, err
	}
	base := r.lay.SlotBase(slot)
	t, err := blink.Open(r.mem, r.id, base, r.ext, opts)
	if err != nil {
		return nil, fmt.Errorf("meganode: open slot %d of region %d: %w: %w", slot, r.id, err, ErrCorruption)
	}
	if t.NodeSize() != int(r.lay.NodeSize) || t.HeaderPtr() != blink.MakePtr(r.id, base) {
		return nil, fmt.Errorf("meganode: slot %d of region %d holds a meganode with %d-byte nodes at %v, want %d-byte nodes: %w",
			slot, r.id, t.NodeSize(), t.HeaderPtr(), r.lay.NodeSize, ErrCorruption)
	}
	m := &Meganode{region: r, slot: slot, base: base, tree: t}
	r.mu.open[slot] = m
	return m, nil
}

// FreeMeganode marks slot free; the next NewMeganode may reuse it. The
// meganode's memory is left as it is, and extents its leaves point to are
// not freed: the caller first moves or frees what the meganode holds, and
// makes sure no reader can still reach it (nodes of a reformatted slot are
// only invalidated as blink reuses them). Handles returned for the slot must
// not be used afterwards. The error wraps ErrNoMeganode when the slot is not
// in use.
func (r *Region) FreeMeganode(slot int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return ErrClosed
	}
	if err := r.checkSlotLocked(slot); err != nil {
		return err
	}
	r.setSlotLocked(slot, false)
	delete(r.mu.open, slot)
	return nil
}

// Meganodes returns the slots in use, in increasing order (nil once the
// region is closed).
func (r *Region) Meganodes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil
	}
	var slots []int
	for w := 0; w < r.slotWords(); w++ {
		v := r.slotWord(w)
		for v != 0 {
			slots = append(slots, w*64+bits.TrailingZeros64(v))
			v &= v - 1
		}
	}
	return slots
}

// SlotOf returns the slot whose meganode memory holds p (any node of it),
// or false when p is not in this region's node area.
func (r *Region) SlotOf(p blink.Ptr) (int, bool) {
	off := p.Offset()
	if p.IsNil() || p.Region() != r.id || off < r.lay.NodeOff || off >= r.lay.NodeOff+r.lay.NodeLen {
		return 0, false
	}
	return int((off - r.lay.NodeOff) / r.lay.MeganodeSize), true
}

// treeOptions fills in and checks the node size of tree options.
func (r *Region) treeOptions(opts blink.Options) (blink.Options, error) {
	if opts.NodeSize == 0 {
		opts.NodeSize = int(r.lay.NodeSize)
	}
	if opts.NodeSize != int(r.lay.NodeSize) {
		return opts, fmt.Errorf("meganode: tree node size %d, region %d has %d-byte nodes: %w", opts.NodeSize, r.id, r.lay.NodeSize, ErrInvalidOptions)
	}
	opts.BeforeWrite = r.beforeWrite
	return opts, nil
}

// checkSlotLocked returns an error wrapping ErrNoMeganode unless slot is in
// range and in use. REQUIRES: r.mu held.
func (r *Region) checkSlotLocked(slot int) error {
	if slot < 0 || uint64(slot) >= r.lay.Slots {
		return fmt.Errorf("meganode: slot %d out of range [0, %d): %w", slot, r.lay.Slots, ErrNoMeganode)
	}
	if r.slotWord(slot/64)&(1<<(slot%64)) == 0 {
		return fmt.Errorf("meganode: slot %d of region %d is free: %w", slot, r.id, ErrNoMeganode)
	}
	return nil
}

// lowestFreeSlotLocked returns the lowest free slot. REQUIRES: r.mu held.
func (r *Region) lowestFreeSlotLocked() (int, bool) {
	for w := 0; w < r.slotWords(); w++ {
		if free := ^r.slotWord(w); free != 0 {
			s := w*64 + bits.TrailingZeros64(free)
			return s, uint64(s) < r.lay.Slots
		}
	}
	return 0, false
}

// setSlotLocked marks slot used or free with an atomic store of its
// bitmap word. REQUIRES: r.mu held (the only writer of the bitmap).
func (r *Region) setSlotLocked(slot int, used bool) {
	v := r.slotWord(slot / 64)
	if used {
		v |= 1 << (slot % 64)
	} else {
		v &^= 1 << (slot % 64)
	}
	off := offSlotBitmap + 8*(slot/64)
	r.beforeWrite(uint64(off), 8)
	atomicmem.StoreUint64(r.mem, off, v)
}

func (r *Region) slotWords() int { return int(r.lay.Slots+63) / 64 }

func (r *Region) slotWord(w int) uint64 { return atomicmem.LoadUint64(r.mem, offSlotBitmap+8*w) }
