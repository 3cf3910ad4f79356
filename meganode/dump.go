package meganode

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/cellstore/cell/internal/atomicmem"
)

// Dump writes a human-readable description of the region: its header
// fields, the slots in use and the extent allocator's counters (for
// cellctl and debugging).
func (r *Region) Dump(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return ErrClosed
	}
	hdr := atomicmem.Alloc(headerSize)
	atomicmem.Load(hdr, r.mem[:headerSize])
	var b strings.Builder
	fmt.Fprintf(&b, "%v\n", r)
	if err := dumpHeader(&b, hdr); err != nil {
		return err
	}
	s := r.ext.Stats()
	fmt.Fprintf(&b, "extents: %d/%d bytes in %d blocks, %d free blocks, largest free %d, max block %d, fragmentation %.3f, bad frees %d\n",
		s.InUse, s.Capacity, s.Blocks, s.FreeBlocks, s.LargestFree, s.MaxBlock, s.Fragmentation, s.BadFrees)
	if r.ext.SizeClasses() {
		ss := r.ext.SlabStats()
		fmt.Fprintf(&b, "slabs: %d slabs in %d bytes (directory included), %d slots of %d bytes in use, %d classes up to %d bytes\n",
			ss.Slabs, ss.SlabBytes, ss.Slots, ss.SlotBytes, ss.Classes, ss.MaxSlot)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// dumpHeader writes the fields of the region header in b, one per line
// with its offset, then the non-empty free lists and the slots in use.
func dumpHeader(w io.Writer, b []byte) error {
	h, err := decodeHeader(b)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	fields := []struct {
		off  int
		name string
		val  uint64
	}{
		{offRoot, "root", le.Uint64(b[offRoot:])},
		{offMagic, "magic", uint64(le.Uint32(b[offMagic:]))},
		{offVersion, "version", uint64(le.Uint32(b[offVersion:]))},
		{offRegionID, "region id", uint64(h.ID)},
		{offNodeSize, "node size", h.NodeSize},
		{offRegionSize, "region size", h.Size},
		{offMeganodeSize, "meganode size", h.MeganodeSize},
		{offSlots, "slots", h.Slots},
		{offAtomSize, "atom size", h.AtomSize},
		{offNodeArea, "node area", h.NodeOff},
		{offNodeAreaLen, "node area size", h.NodeLen},
		{offExtentArea, "extent area", h.ExtentOff},
		{offExtentLen, "extent area size", h.ExtentLen},
		{offHeap, "heap", h.HeapOff},
		{offAtoms, "atoms", h.Atoms},
	}
	if h.version == formatVersion3 {
		fields = append(fields, []struct {
			off  int
			name string
			val  uint64
		}{
			{offFlags, "flags", uint64(h.flags)},
			{offSlabDir, "slab directory", h.slabDir},
		}...)
	}
	fields = append(fields, []struct {
		off  int
		name string
		val  uint64
	}{
		{offHeaderCRC, "header crc", uint64(le.Uint32(b[offHeaderCRC:]))},
	}...)
	for _, f := range fields {
		fmt.Fprintf(w, "%4d  %-16s %#x (%d)\n", f.off, f.name, f.val, f.val)
	}
	for k := range maxBins {
		if off := le.Uint64(b[offFreeLists+8*k:]); off != 0 {
			fmt.Fprintf(w, "%4d  free list %-6d %#x (blocks of %d bytes)\n", offFreeLists+8*k, k, off, h.AtomSize<<k)
		}
	}
	fmt.Fprintf(w, "%4d  %-16s %d\n", offApplied, "applied index", le.Uint64(b[offApplied:]))
	fmt.Fprintf(w, "%4d  slots in use    ", offSlotBitmap)
	for i := uint64(0); i < h.Slots; i++ {
		if b[offSlotBitmap+i/8]&(1<<(i%8)) != 0 {
			fmt.Fprintf(w, " %d", i)
		}
	}
	fmt.Fprintln(w)
	return nil
}
