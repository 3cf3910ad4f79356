package meganode

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cellstore/cell/blink"
)

// extentModel is the oracle of the allocator tests: which atoms are in use,
// and the live blocks.
type extentModel struct {
	l    Layout
	used []bool // per atom
	live []liveBlock
}

type liveBlock struct {
	off uint64
	n   int
}

func newExtentModel(l Layout) *extentModel {
	return &extentModel{l: l, used: make([]bool, l.Atoms)}
}

// blockAtoms is the size in atoms of the block that holds n bytes.
func (m *extentModel) blockAtoms(n int) uint64 {
	a := (uint64(n) + m.l.AtomSize - 1) / m.l.AtomSize
	b := uint64(1)
	for b < a {
		b <<= 1
	}
	return b
}

// fits reports whether some aligned run of size atoms is entirely free.
// For a fully coalesced buddy heap this is exactly when Alloc must succeed.
func (m *extentModel) fits(size uint64) bool {
outer:
	for i := uint64(0); i+size <= m.l.Atoms; i += size {
		for a := i; a < i+size; a++ {
			if m.used[a] {
				continue outer
			}
		}
		return true
	}
	return false
}

func (m *extentModel) alloc(t *testing.T, off uint64, n int) {
	t.Helper()
	size := m.blockAtoms(n)
	if off%8 != 0 || off < m.l.HeapOff || (off-m.l.HeapOff)%(size*m.l.AtomSize) != 0 {
		t.Fatalf("Alloc(%d) = %#x: not aligned to its %d-atom block", n, off, size)
	}
	i := (off - m.l.HeapOff) / m.l.AtomSize
	if i+size > m.l.Atoms {
		t.Fatalf("Alloc(%d) = %#x: block ends past the heap", n, off)
	}
	for a := i; a < i+size; a++ {
		if m.used[a] {
			t.Fatalf("Alloc(%d) = %#x overlaps a live block at atom %d", n, off, a)
		}
		m.used[a] = true
	}
	m.live = append(m.live, liveBlock{off, n})
}

func (m *extentModel) free(j int) liveBlock {
	b := m.live[j]
	m.live[j] = m.live[len(m.live)-1]
	m.live = m.live[:len(m.live)-1]
	i := (b.off - m.l.HeapOff) / m.l.AtomSize
	for a := i; a < i+m.blockAtoms(b.n); a++ {
		m.used[a] = false
	}
	return b
}

// randomSize draws mostly small extents, sometimes large ones.
func randomSize(rng *rand.Rand, maxBlock uint64) int {
	switch rng.IntN(10) {
	case 0:
		return 1 + rng.IntN(int(maxBlock))
	case 1, 2:
		return 1 + rng.IntN(4096)
	default:
		return 1 + rng.IntN(300)
	}
}

func TestExtentsRandomAgainstModel(t *testing.T) {
	for _, l := range []Layout{
		mustLayout(t, 1<<20, 4096, 512, 16, 4),     // heap not a power of two
		mustLayout(t, 2<<20, 64<<10, 1024, 64, 15), // 2 KiB+ header slack
		mustLayout(t, 256<<10, 4096, 512, 32, 1),
	} {
		seed := rand.Uint64()
		t.Logf("layout %+v seed %d", l, seed)
		rng := rand.New(rand.NewPCG(seed, 1))
		mem, e := newImage(t, l, 1)
		fresh := extentState(mem, l)
		m := newExtentModel(l)
		maxBlock := l.MaxBlock()
		for op := range 20000 {
			if len(m.live) > 0 && rng.IntN(100) < 45 {
				b := m.free(rng.IntN(len(m.live)))
				if err := e.FreeChecked(b.off, b.n); err != nil {
					t.Fatalf("op %d: free %#x: %v", op, b.off, err)
				}
			} else {
				n := randomSize(rng, maxBlock+maxBlock/4)
				off, err := e.Alloc(n)
				want := m.blockAtoms(n) <= l.Atoms && m.fits(m.blockAtoms(n))
				switch {
				case err == nil && want:
					m.alloc(t, off, n)
				case err == nil:
					t.Fatalf("op %d: Alloc(%d) = %#x, but no aligned free run exists", op, n, off)
				case !errors.Is(err, blink.ErrExtentsFull):
					t.Fatalf("op %d: Alloc(%d): %v", op, n, err)
				case want:
					t.Fatalf("op %d: Alloc(%d) failed but an aligned free run exists: %v", op, n, err)
				}
			}
			if op%1000 == 0 {
				mustCheck(t, e)
			}
		}
		mustCheck(t, e)
		var inUse uint64
		for _, b := range m.live {
			inUse += m.blockAtoms(b.n) * l.AtomSize
		}
		if s := e.Stats(); s.InUse != inUse || s.Blocks != uint64(len(m.live)) {
			t.Fatalf("stats %+v, model has %d bytes in %d blocks", s, inUse, len(m.live))
		}
		for len(m.live) > 0 {
			b := m.free(rng.IntN(len(m.live)))
			e.Free(b.off, b.n)
		}
		mustCheck(t, e)
		// Everything freed: the heap is coalesced back to the blocks it
		// was carved into, the allocator state byte for byte as formatted.
		if got := extentState(mem, l); !bytes.Equal(got, fresh) {
			t.Fatalf("allocator state after freeing everything differs from a fresh one")
		}
		s := e.Stats()
		if s.InUse != 0 || s.Blocks != 0 || s.LargestFree != maxBlock || s.BadFrees != 0 {
			t.Fatalf("stats after freeing everything: %+v", s)
		}
	}
}

func TestExtentsCoalesceToOneBlock(t *testing.T) {
	// A layout whose heap is a power of two (2^16 atoms of 16 bytes after 64
	// KiB of control bytes), so that "everything free" is one block.
	l := mustLayout(t, 8192+1<<16+1<<20, 4096, 512, 16, 1)
	if l.Atoms&(l.Atoms-1) != 0 {
		t.Fatalf("test layout has %d atoms, want a power of two", l.Atoms)
	}
	_, e := newImage(t, l, 1)
	var offs []uint64
	for {
		off, err := e.Alloc(16)
		if err != nil {
			if !errors.Is(err, blink.ErrExtentsFull) {
				t.Fatal(err)
			}
			break
		}
		offs = append(offs, off)
	}
	if uint64(len(offs)) != l.Atoms {
		t.Fatalf("allocated %d atoms of %d", len(offs), l.Atoms)
	}
	rand.Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
	for _, off := range offs {
		e.Free(off, 16)
	}
	mustCheck(t, e)
	s := e.Stats()
	if s.FreeBlocks != 1 || s.LargestFree != s.Capacity || s.Fragmentation != 0 {
		t.Fatalf("after freeing everything: %+v, want one free block of the whole heap", s)
	}
}

// TestExtentsDeterministic: raft replicas replay the same allocations and
// must get the same offsets and the same image.
func TestExtentsDeterministic(t *testing.T) {
	l := mustLayout(t, 1<<20, 4096, 512, 16, 4)
	memA, a := newImage(t, l, 3)
	memB, b := newImage(t, l, 3)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var live []liveBlock
	for op := range 5000 {
		if len(live) > 0 && rng.IntN(2) == 0 {
			j := rng.IntN(len(live))
			a.Free(live[j].off, live[j].n)
			b.Free(live[j].off, live[j].n)
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		n := randomSize(rng, 64<<10)
		offA, errA := a.Alloc(n)
		offB, errB := b.Alloc(n)
		if offA != offB || (errA == nil) != (errB == nil) {
			t.Fatalf("op %d: Alloc(%d) = %#x, %v and %#x, %v", op, n, offA, errA, offB, errB)
		}
		if errA == nil {
			live = append(live, liveBlock{offA, n})
		}
	}
	if !bytes.Equal(memA, memB) {
		t.Fatal("images differ after the same operations")
	}
}

// TestExtentsReopen: the allocator state lives in the image; reopening it
// resumes with the same counters and the same future offsets.
func TestExtentsReopen(t *testing.T) {
	l := mustLayout(t, 1<<20, 4096, 512, 64, 2)
	mem, e := newImage(t, l, 3)
	rng := rand.New(rand.NewPCG(7, 7))
	var live []liveBlock
	step := func(e *Extents, rng *rand.Rand, live *[]liveBlock) []uint64 {
		var offs []uint64
		for range 500 {
			if len(*live) > 0 && rng.IntN(3) == 0 {
				j := rng.IntN(len(*live))
				e.Free((*live)[j].off, (*live)[j].n)
				(*live)[j] = (*live)[len(*live)-1]
				*live = (*live)[:len(*live)-1]
				continue
			}
			n := 1 + rng.IntN(2000)
			off, err := e.Alloc(n)
			if err == nil {
				*live = append(*live, liveBlock{off, n})
			}
			offs = append(offs, off)
		}
		return offs
	}
	step(e, rng, &live)
	before := e.Stats()

	// Continue on a copy of the image through a reopened allocator, and on
	// the original one: same offsets.
	mem2 := bytes.Clone(mem)
	e2, err := openExtents(mem2, l)
	if err != nil {
		t.Fatal(err)
	}
	if got := e2.Stats(); got != before {
		t.Fatalf("reopened stats %+v, want %+v", got, before)
	}
	live2 := append([]liveBlock(nil), live...)
	seed := rng.Uint64()
	o1 := step(e, rand.New(rand.NewPCG(seed, 0)), &live)
	o2 := step(e2, rand.New(rand.NewPCG(seed, 0)), &live2)
	if !equalU64(o1, o2) {
		t.Fatal("reopened allocator chose different offsets")
	}
	mustCheck(t, e2)
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestExtentsExhaustion: a full area returns ErrExtentsFull and changes
// nothing, neither the image nor the counters.
func TestExtentsExhaustion(t *testing.T) {
	l := mustLayout(t, 256<<10, 4096, 512, 16, 1)
	mem, e := newImage(t, l, 3)
	rng := rand.New(rand.NewPCG(1, 1))
	for {
		if _, err := e.Alloc(1 + rng.IntN(1000)); err != nil {
			if !errors.Is(err, blink.ErrExtentsFull) {
				t.Fatal(err)
			}
			break
		}
	}
	img, stats := bytes.Clone(mem), e.Stats()
	for _, n := range []int{int(stats.LargestFree) + 1, 1 << 20, int(l.MaxBlock()) * 2, 1 << 40} {
		if _, err := e.Alloc(n); !errors.Is(err, blink.ErrExtentsFull) {
			t.Fatalf("Alloc(%d) = %v, want ErrExtentsFull", n, err)
		}
	}
	if !bytes.Equal(img, mem) || e.Stats() != stats {
		t.Fatal("failed allocations changed the allocator")
	}
	for _, n := range []int{0, -1} {
		if _, err := e.Alloc(n); !errors.Is(err, ErrInvalidSize) {
			t.Fatalf("Alloc(%d) = %v, want ErrInvalidSize", n, err)
		}
	}
	mustCheck(t, e)
}

// TestExtentsLargeValue: a 1 MiB value with a 136-byte key needs a 2 MiB
// block when the region is large enough, and fails cleanly otherwise.
func TestExtentsLargeValue(t *testing.T) {
	n := blink.ExtentLen(136, 1<<20)
	big := mustLayout(t, 4<<20, 64<<10, 1024, 64, 1)
	_, e := newImage(t, big, 1)
	if big.MaxBlock() != 2<<20 {
		t.Fatalf("max block %d, want 2 MiB", big.MaxBlock())
	}
	off, err := e.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.InUse != 2<<20 || (off-big.HeapOff)%(2<<20) != 0 {
		t.Fatalf("Alloc(%d) = %#x with stats %+v", n, off, s)
	}
	small := mustLayout(t, 2<<20, 64<<10, 1024, 64, 1)
	_, e = newImage(t, small, 1)
	if _, err := e.Alloc(n); !errors.Is(err, blink.ErrExtentsFull) {
		t.Fatalf("Alloc(%d) in a region with max block %d = %v, want ErrExtentsFull", n, small.MaxBlock(), err)
	}
}

func TestExtentsBadFree(t *testing.T) {
	l := mustLayout(t, 256<<10, 4096, 512, 16, 1)
	mem, e := newImage(t, l, 3)
	a, _ := e.Alloc(100) // 128-byte block
	b, _ := e.Alloc(16)
	e.Free(b, 16)
	img, stats := bytes.Clone(mem), e.Stats()
	for _, tc := range []struct {
		name string
		off  uint64
		n    int
	}{
		{"double free", b, 16},
		{"wrong size", a, 200},
		{"smaller size class", a, 16},
		{"zero size", a, 0},
		{"inside block", a + 16, 16},
		{"misaligned", a + 1, 100},
		{"before heap", l.HeapOff - 16, 16},
		{"past heap", l.HeapOff + l.Atoms*l.AtomSize, 16},
		{"nil", 0, 16},
	} {
		if err := e.FreeChecked(tc.off, tc.n); !errors.Is(err, ErrBadFree) {
			t.Errorf("%s: FreeChecked(%#x, %d) = %v, want ErrBadFree", tc.name, tc.off, tc.n, err)
		}
	}
	if !bytes.Equal(img, mem) {
		t.Fatal("rejected frees changed the image")
	}
	if got := e.Stats(); got.BadFrees != 9 || got.InUse != stats.InUse {
		t.Fatalf("stats %+v", got)
	}
	if !invariants {
		e.Free(b, 16) // counted, ignored
		if e.Stats().BadFrees != 10 {
			t.Fatal("Free did not count a bad free")
		}
	}
	mustCheck(t, e)
	if err := e.FreeChecked(a, 128); err != nil {
		t.Fatal(err)
	}
}

func TestExtentsStats(t *testing.T) {
	l := mustLayout(t, 64<<10, 4096, 512, 16, 2) // 3072 atoms: 2048 + 1024
	_, e := newImage(t, l, 3)
	s := e.Stats()
	want := ExtentStats{Capacity: 3072 * 16, Free: 3072 * 16, FreeBlocks: 2, LargestFree: 2048 * 16, MaxBlock: 2048 * 16}
	if s != want {
		t.Fatalf("fresh stats %+v, want %+v", s, want)
	}
	// Fill the 2048-atom block with 64-atom blocks and free every other one:
	// half of it free but no free block larger than 64 atoms there.
	var offs []uint64
	for range 1024 / 64 { // first the 1024-atom block is used up
		off, _ := e.Alloc(64 * 16)
		offs = append(offs, off)
	}
	for range 2048 / 64 {
		off, err := e.Alloc(64 * 16)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	for i := 0; i < len(offs); i += 2 {
		e.Free(offs[i], 64*16)
	}
	s = e.Stats()
	if s.InUse != 1536*16 || s.Blocks != 24 || s.FreeBlocks != 24 || s.LargestFree != 64*16 {
		t.Fatalf("stats %+v", s)
	}
	if want := 1 - 64.0/1536; s.Fragmentation != want {
		t.Fatalf("fragmentation %v, want %v", s.Fragmentation, want)
	}
	mustCheck(t, e)
}

// TestExtentsCheckDetectsCorruption: openExtents rejects images whose
// control bytes or free lists were damaged.
func TestExtentsCheckDetectsCorruption(t *testing.T) {
	l := mustLayout(t, 256<<10, 4096, 512, 16, 1)
	for _, tc := range []struct {
		name   string
		damage func(mem []byte, offs []uint64)
	}{
		{"control byte inside a block", func(mem []byte, offs []uint64) { mem[l.ExtentOff+1] = ctrlHead }},
		{"head cleared", func(mem []byte, offs []uint64) { mem[l.ExtentOff+(offs[1]-l.HeapOff)/16] = 0 }},
		{"free bit flipped", func(mem []byte, offs []uint64) { mem[l.ExtentOff+(offs[1]-l.HeapOff)/16] ^= ctrlFree }},
		{"misaligned class", func(mem []byte, offs []uint64) { mem[l.ExtentOff+(offs[1]-l.HeapOff)/16] += 3 }},
		{"free list cycle", func(mem []byte, offs []uint64) {
			// offs[0] is free on list 0 (its buddy offs[1] is allocated): loop it.
			putU64(mem, offs[0], offs[0])
		}},
		{"bad prev", func(mem []byte, offs []uint64) { putU64(mem, offs[0]+8, 0x1234) }},
		{"list head dropped", func(mem []byte, offs []uint64) { putU64(mem, offFreeLists, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, e := newImage(t, l, 3)
			var offs []uint64
			for range 4 {
				off, _ := e.Alloc(16)
				offs = append(offs, off)
			}
			e.Free(offs[0], 16)
			if _, err := openExtents(mem, l); err != nil {
				t.Fatalf("intact image: %v", err)
			}
			tc.damage(mem, offs)
			if _, err := openExtents(mem, l); !errors.Is(err, ErrCorruption) {
				t.Fatalf("openExtents = %v, want ErrCorruption", err)
			}
		})
	}
}

func putU64(mem []byte, off, v uint64) {
	for i := range 8 {
		mem[off+uint64(i)] = byte(v >> (8 * i))
	}
}

// TestExtentsConcurrent: meganodes of a region share the allocator.
func TestExtentsConcurrent(t *testing.T) {
	l := mustLayout(t, 1<<20, 4096, 512, 16, 4)
	mem, e := newImage(t, l, 3)
	fresh := extentState(mem, l)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			var live []liveBlock
			for range 3000 {
				if len(live) > 0 && rng.IntN(2) == 0 {
					j := rng.IntN(len(live))
					if err := e.FreeChecked(live[j].off, live[j].n); err != nil {
						t.Error(err)
						return
					}
					live[j] = live[len(live)-1]
					live = live[:len(live)-1]
					continue
				}
				n := 1 + rng.IntN(500)
				if off, err := e.Alloc(n); err == nil {
					live = append(live, liveBlock{off, n})
				}
			}
			for _, b := range live {
				e.Free(b.off, b.n)
			}
		})
	}
	wg.Wait()
	mustCheck(t, e)
	if s := e.Stats(); s.InUse != 0 || s.BadFrees != 0 || !bytes.Equal(extentState(mem, l), fresh) {
		t.Fatalf("after concurrent alloc/free of everything: %+v", s)
	}
}

func BenchmarkExtentsAllocFree(b *testing.B) {
	l := mustLayout(b, 64<<20, 64<<10, 1024, 64, 1)
	_, e := newImage(b, l, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, 1024)
	for i := range sizes {
		sizes[i] = 16 + rng.IntN(2000)
	}
	// Keep a working set live so that allocations split and frees merge.
	live := make([]liveBlock, 256)
	for i := range live {
		live[i].n = sizes[i]
		live[i].off, _ = e.Alloc(sizes[i])
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j := i % len(live)
		e.Free(live[j].off, live[j].n)
		n := sizes[i%len(sizes)]
		off, err := e.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		live[j] = liveBlock{off, n}
	}
	if s := e.Stats(); s.BadFrees != 0 {
		b.Fatalf("bad frees: %+v", s)
	}
}
