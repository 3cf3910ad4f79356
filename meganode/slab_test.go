package meganode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/testutil"
)

// newSCImage formats a region of layout l with size classes in heap memory.
func newSCImage(t testing.TB, l Layout, id uint32) ([]byte, *Extents) {
	t.Helper()
	if err := checkSizeClasses(l); err != nil {
		t.Fatal(err)
	}
	mem := atomicmem.Alloc(int(l.Size))
	return mem, formatImage(mem, header{Layout: l, ID: id, flags: flagSizeClasses})
}

// reopenSC opens a copy of the image mem.
func reopenSC(t testing.TB, mem []byte) ([]byte, *Extents) {
	t.Helper()
	cp := atomicmem.Alloc(len(mem))
	copy(cp, mem)
	h, e, err := openImage(cp)
	if err != nil {
		t.Fatal(err)
	}
	if !h.sizeClasses() || !e.SizeClasses() {
		t.Fatalf("reopened image has no size classes: %+v", h)
	}
	return cp, e
}

// scLayouts are the layouts the size-class tests run on: atoms of 16, 64
// and 4096 bytes, heaps that are not powers of two.
func scLayouts(t testing.TB) []Layout {
	return []Layout{
		mustLayout(t, 1<<20, 4096, 512, 16, 4),
		mustLayout(t, 2<<20, 64<<10, 1024, 64, 15),
		mustLayout(t, 8<<20, 64<<10, 1024, 4096, 2),
	}
}

// scModel is the oracle: the live extents and the bytes each takes.
type scModel struct {
	l    Layout
	e    *Extents
	live []liveBlock
}

// footprint is the bytes the allocator must give an n-byte extent: the
// slot of its class, or its buddy block.
func (m *scModel) footprint(n int) uint64 {
	if c, ok := m.e.slabClass(n); ok {
		return m.e.sc.classes[c].slot
	}
	return m.e.blockBytes(m.e.class(uint64(n)))
}

func (m *scModel) inUse() (bytes uint64) {
	for _, b := range m.live {
		bytes += m.footprint(b.n)
	}
	return bytes
}

// check verifies that the live extents lie in the heap, 8-byte aligned,
// overlap neither each other nor the slab directory, and that the
// allocator's checker and counters agree.
func (m *scModel) check(t *testing.T) {
	t.Helper()
	type span struct{ lo, hi uint64 }
	spans := make([]span, 0, len(m.live)+1)
	for _, b := range m.live {
		spans = append(spans, span{b.off, b.off + m.footprint(b.n)})
	}
	spans = append(spans, span{m.e.sc.dir, m.e.sc.dir + slabDirBytes})
	slices.SortFunc(spans, func(a, b span) int { return int(int64(a.lo - b.lo)) })
	heapEnd := m.l.HeapOff + m.l.Atoms*m.l.AtomSize
	for i, s := range spans {
		if s.lo%8 != 0 || s.lo < m.l.HeapOff || s.hi > heapEnd {
			t.Fatalf("extent [%#x, %#x) not an aligned part of the heap [%#x, %#x)", s.lo, s.hi, m.l.HeapOff, heapEnd)
		}
		if i > 0 && spans[i-1].hi > s.lo {
			t.Fatalf("extents [%#x, %#x) and [%#x, %#x) overlap", spans[i-1].lo, spans[i-1].hi, s.lo, s.hi)
		}
	}
	mustCheck(t, m.e)
	if s := m.e.Stats(); s.InUse != m.inUse() || s.Blocks != uint64(len(m.live)) || s.Free != s.Capacity-s.InUse {
		t.Fatalf("stats %+v, model has %d bytes in %d extents", s, m.inUse(), len(m.live))
	}
}

// scOp is one step of a random workload: a free of live extent pick%len
// or an alloc of n bytes.
type scOp struct {
	free bool
	pick int
	n    int
}

func randomSCOps(rng *rand.Rand, count int, maxBlock uint64) []scOp {
	ops := make([]scOp, count)
	for i := range ops {
		// Phases: fill, churn, drain, so that slabs fill, empty and go
		// back to the buddy allocator.
		p := 45
		switch {
		case i < count/3:
			p = 25
		case i > 2*count/3:
			p = 70
		}
		ops[i] = scOp{free: rng.IntN(100) < p, pick: rng.Int()}
		switch rng.IntN(20) {
		case 0:
			ops[i].n = 1 + rng.IntN(int(maxBlock/4))
		case 1, 2:
			ops[i].n = 1 + rng.IntN(4096)
		default:
			ops[i].n = 24 + rng.IntN(305) // the paper's records
		}
	}
	return ops
}

// applySCOps runs ops on e, tracked by m (when not nil), and returns the
// offsets Alloc returned (0 for a full heap).
func applySCOps(t *testing.T, e *Extents, m *scModel, live *[]liveBlock, ops []scOp) []uint64 {
	t.Helper()
	var offs []uint64
	for i, op := range ops {
		if op.free && len(*live) > 0 {
			j := op.pick % len(*live)
			b := (*live)[j]
			(*live)[j] = (*live)[len(*live)-1]
			*live = (*live)[:len(*live)-1]
			if err := e.FreeChecked(b.off, b.n); err != nil {
				t.Fatalf("op %d: free %#x (%d bytes): %v", i, b.off, b.n, err)
			}
			continue
		}
		off, err := e.Alloc(op.n)
		switch {
		case err == nil:
			*live = append(*live, liveBlock{off, op.n})
		case errors.Is(err, blink.ErrExtentsFull):
			off = 0
		default:
			t.Fatalf("op %d: Alloc(%d): %v", i, op.n, err)
		}
		offs = append(offs, off)
		if m != nil && i%500 == 0 {
			m.check(t)
		}
	}
	return offs
}

func TestSizeClassTable(t *testing.T) {
	if len(slabSlotSizes) != 80 || slabDirBytes != 1280 {
		t.Fatalf("%d classes, directory %d bytes", len(slabSlotSizes), slabDirBytes)
	}
	for _, l := range scLayouts(t) {
		sc := newSlabs(l, 0)
		if len(sc.classes) != len(slabSlotSizes) || sc.maxSlot != slabMaxSlot {
			t.Fatalf("atom %d: %d usable classes up to %d", l.AtomSize, len(sc.classes), sc.maxSlot)
		}
		for _, c := range sc.classes {
			tail := c.bytes - c.first - c.nslots*c.slot
			if c.slot%8 != 0 || !isPow2(c.bytes) || c.bytes < max(slabMinBytes, l.AtomSize) || c.bytes != l.AtomSize<<c.k ||
				c.nslots < slabMinSlots || c.words != (c.nslots+63)/64 || c.first != slabHeader+8*c.words || tail*32 > c.bytes {
				t.Fatalf("atom %d: class %+v (tail %d)", l.AtomSize, c, tail)
			}
		}
		for n := 1; n <= sc.maxSlot; n++ {
			c := sc.byUnits[(n+7)/8]
			slot := sc.classes[c].slot
			if slot < uint64(n) || (c > 0 && sc.classes[c-1].slot >= uint64(n)) {
				t.Fatalf("%d bytes: class %d of %d-byte slots", n, c, slot)
			}
			if waste := slot - uint64(n); waste >= 8 && waste*8 > uint64(n) {
				t.Fatalf("%d bytes in a %d-byte slot: over 12.5%% lost", n, slot)
			}
		}
	}
	// A small heap keeps the classes whose slabs fit.
	l := mustLayout(t, 64<<10, 4096, 512, 16, 2)
	sc := newSlabs(l, 0)
	if sc.maxSlot == 0 || sc.maxSlot == slabMaxSlot {
		t.Fatalf("64 KiB region: classes up to %d", sc.maxSlot)
	}
	for _, c := range sc.classes {
		if c.k > l.maxLog() {
			t.Fatalf("class %+v does not fit a heap of max block %d", c, l.MaxBlock())
		}
	}
}

func TestSizeClassesRandomAgainstModel(t *testing.T) {
	for _, l := range scLayouts(t) {
		t.Run(fmt.Sprintf("atom=%d", l.AtomSize), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("layout %+v seed %d", l, seed)
			mem, e := newSCImage(t, l, 1)
			fresh := extentState(mem, l)
			m := &scModel{l: l, e: e}
			ops := randomSCOps(rand.New(rand.NewPCG(seed, 1)), 30000, l.MaxBlock())
			applySCOps(t, e, m, &m.live, ops)
			m.check(t)
			if ss := e.SlabStats(); ss.Slots == 0 && len(m.live) > 0 {
				t.Logf("slab stats %+v", ss)
			}
			// Freeing everything returns every slab: the allocator's
			// state is the freshly formatted one.
			rng := rand.New(rand.NewPCG(seed, 2))
			rng.Shuffle(len(m.live), func(i, j int) { m.live[i], m.live[j] = m.live[j], m.live[i] })
			for len(m.live) > 0 {
				b := m.live[len(m.live)-1]
				m.live = m.live[:len(m.live)-1]
				if err := e.FreeChecked(b.off, b.n); err != nil {
					t.Fatal(err)
				}
			}
			m.check(t)
			if ss := e.SlabStats(); ss.Slabs != 0 || ss.Slots != 0 || ss.SlabBytes != e.blockBytes(e.class(slabDirBytes)) {
				t.Fatalf("after freeing everything: %+v", ss)
			}
			if !bytes.Equal(extentState(mem, l), fresh) {
				t.Fatal("after freeing everything the control bytes and free lists differ from a fresh region's")
			}
		})
	}
}

// TestSizeClassesDeterministic: two regions fed the same operations are
// byte-identical, and so is a region reopened from an image midway and
// fed the rest.
func TestSizeClassesDeterministic(t *testing.T) {
	for _, l := range scLayouts(t) {
		t.Run(fmt.Sprintf("atom=%d", l.AtomSize), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			ops := randomSCOps(rand.New(rand.NewPCG(seed, 3)), 20000, l.MaxBlock())
			memA, a := newSCImage(t, l, 1)
			memB, b := newSCImage(t, l, 1)
			if !bytes.Equal(memA, memB) {
				t.Fatal("fresh images differ")
			}
			var liveA, liveB []liveBlock
			half := len(ops) / 2
			offA := applySCOps(t, a, nil, &liveA, ops[:half])
			offB := applySCOps(t, b, nil, &liveB, ops[:half])
			if !slices.Equal(offA, offB) || !bytes.Equal(memA, memB) {
				t.Fatal("same operations, different offsets or bytes")
			}
			memC, c := reopenSC(t, memA)
			if c.Stats() != a.Stats() || c.SlabStats() != a.SlabStats() {
				t.Fatalf("reopened stats %+v %+v, want %+v %+v", c.Stats(), c.SlabStats(), a.Stats(), a.SlabStats())
			}
			liveC := slices.Clone(liveA)
			offA = applySCOps(t, a, nil, &liveA, ops[half:])
			offB = applySCOps(t, b, nil, &liveB, ops[half:])
			offC := applySCOps(t, c, nil, &liveC, ops[half:])
			if !slices.Equal(offA, offB) || !slices.Equal(offA, offC) {
				t.Fatal("same operations, different offsets after the reopen")
			}
			if !bytes.Equal(memA, memB) || !bytes.Equal(memA, memC) {
				t.Fatal("same operations, different bytes after the reopen")
			}
			mustCheck(t, a)
			mustCheck(t, c)
		})
	}
}

// TestSizeClassesAtomicStores: every store the allocator makes into region
// memory is an aligned 8-byte word (beforeWrite sees each one).
func TestSizeClassesAtomicStores(t *testing.T) {
	l := scLayouts(t)[1]
	_, e := newSCImage(t, l, 1)
	var stores int
	e.beforeWrite = func(off, n uint64) {
		stores++
		if n != 8 || off%8 != 0 {
			t.Fatalf("store of %d bytes at %#x", n, off)
		}
	}
	var live []liveBlock
	applySCOps(t, e, nil, &live, randomSCOps(rand.New(rand.NewPCG(1, 1)), 5000, l.MaxBlock()))
	if stores == 0 {
		t.Fatal("no stores seen")
	}
}

func TestSizeClassesBadFree(t *testing.T) {
	l := scLayouts(t)[1]
	mem, e := newSCImage(t, l, 1)
	a, _ := e.Alloc(100) // 104-byte slots
	b, _ := e.Alloc(100)
	big, _ := e.Alloc(5000) // a buddy block
	e.Free(b, 100)
	img, stats := bytes.Clone(mem), e.Stats()
	for _, tc := range []struct {
		name string
		off  uint64
		n    int
	}{
		{"double free", b, 100},
		{"wrong class", a, 200},
		{"same class, other length", a, 97}, // 104-byte class too: allowed, see below
		{"inside a slot", a + 8, 100},
		{"slab header", a - 8, 100},
		{"outside the heap", 8, 100},
		{"small free of a buddy block", big, 100},
		{"buddy free of a slot", a, 5000},
		{"the directory", e.sc.dir, 1280},
	} {
		if tc.n == 97 {
			continue
		}
		err := e.FreeChecked(tc.off, tc.n)
		if !errors.Is(err, ErrBadFree) {
			t.Fatalf("%s: FreeChecked(%#x, %d) = %v, want ErrBadFree", tc.name, tc.off, tc.n, err)
		}
	}
	if !bytes.Equal(img, mem) {
		t.Fatal("a bad free changed region memory")
	}
	if got := e.Stats(); got.BadFrees != 8 || got.InUse != stats.InUse {
		t.Fatalf("stats %+v after bad frees, before %+v", got, stats)
	}
	// Any length of the slot's class frees it.
	if err := e.FreeChecked(a, 97); err != nil {
		t.Fatal(err)
	}
	e.Free(big, 5000)
	mustCheck(t, e)
	if s := e.SlabStats(); s.Slabs != 0 || e.Stats().InUse != 0 {
		t.Fatalf("after freeing all: %+v %+v", s, e.Stats())
	}
}

func TestSizeClassesCheckDetectsCorruption(t *testing.T) {
	l := scLayouts(t)[1]
	// Three 104-byte slots of one slab (class 12) and a full slab of 2048-byte slots.
	setup := func(t *testing.T) ([]byte, *Extents, []uint64, uint64) {
		mem, e := newSCImage(t, l, 3)
		var offs []uint64
		for range 3 {
			off, _ := e.Alloc(100)
			offs = append(offs, off)
		}
		c, _ := e.slabClass(2048)
		var full uint64
		for range e.sc.classes[c].nslots {
			off, _ := e.Alloc(2048)
			full = off
		}
		return mem, e, offs, e.heapOff + (full-e.heapOff)&^(e.sc.classes[c].bytes-1)
	}
	slabOf := func(e *Extents, off uint64, n int) uint64 {
		c, _ := e.slabClass(n)
		return e.heapOff + (off-e.heapOff)&^(e.sc.classes[c].bytes-1)
	}
	for _, tc := range []struct {
		name   string
		damage func(mem []byte, e *Extents, offs []uint64, full uint64)
	}{
		{"meta magic", func(mem []byte, e *Extents, offs []uint64, _ uint64) { mem[slabOf(e, offs[0], 100)+16+4] ^= 1 }},
		{"meta class", func(mem []byte, e *Extents, offs []uint64, _ uint64) { mem[slabOf(e, offs[0], 100)+16+2]++ }},
		{"used count", func(mem []byte, e *Extents, offs []uint64, _ uint64) { mem[slabOf(e, offs[0], 100)+16]++ }},
		{"bitmap bit", func(mem []byte, e *Extents, offs []uint64, _ uint64) { mem[slabOf(e, offs[0], 100)+slabHeader] ^= 8 }},
		{"bit past the last slot", func(mem []byte, e *Extents, offs []uint64, full uint64) {
			c, _ := e.slabClass(2048)
			cl := e.sc.classes[c]
			putU64(mem, full+slabHeader+8*(cl.words-1), binary.LittleEndian.Uint64(mem[full+slabHeader+8*(cl.words-1):])|1<<(cl.nslots%64))
		}},
		{"bad prev", func(mem []byte, e *Extents, offs []uint64, _ uint64) { putU64(mem, slabOf(e, offs[0], 100)+8, 0x40) }},
		{"cycle", func(mem []byte, e *Extents, offs []uint64, _ uint64) {
			s := slabOf(e, offs[0], 100)
			putU64(mem, s, s)
		}},
		{"full slab on the partial list", func(mem []byte, e *Extents, offs []uint64, full uint64) {
			c, _ := e.slabClass(2048)
			putU64(mem, e.partialHead(c), full)
			putU64(mem, e.fullHead(c), 0)
		}},
		{"slab block freed", func(mem []byte, e *Extents, offs []uint64, full uint64) {
			mem[l.ExtentOff+(full-l.HeapOff)/l.AtomSize] |= ctrlFree
		}},
		{"directory control byte", func(mem []byte, e *Extents, offs []uint64, _ uint64) {
			mem[l.ExtentOff+(e.sc.dir-l.HeapOff)/l.AtomSize]--
		}},
		{"list head outside the heap", func(mem []byte, e *Extents, offs []uint64, _ uint64) { putU64(mem, e.partialHead(0), 8) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, e, offs, full := setup(t)
			if _, _, err := openImage(mem); err != nil {
				t.Fatalf("intact image: %v", err)
			}
			tc.damage(mem, e, offs, full)
			if _, _, err := openImage(mem); !errors.Is(err, ErrCorruption) {
				t.Fatalf("openImage = %v, want ErrCorruption", err)
			}
		})
	}
}

func TestSizeClassesConcurrent(t *testing.T) {
	l := scLayouts(t)[1]
	_, e := newSCImage(t, l, 1)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			var live []liveBlock
			for range 3000 {
				if len(live) > 0 && rng.IntN(2) == 0 {
					j := rng.IntN(len(live))
					e.Free(live[j].off, live[j].n)
					live = slices.Delete(live, j, j+1)
					continue
				}
				n := 8 + rng.IntN(400)
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
	if s := e.Stats(); s.InUse != 0 || s.BadFrees != 0 || e.SlabStats().Slabs != 0 {
		t.Fatalf("stats %+v %+v", s, e.SlabStats())
	}
}

func TestDecodeHeaderSizeClasses(t *testing.T) {
	l := scLayouts(t)[1]
	mem, e := newSCImage(t, l, 5)
	h, err := decodeHeader(mem)
	if err != nil {
		t.Fatal(err)
	}
	if h.version != formatVersion3 || h.flags != flagSizeClasses || h.slabDir != e.sc.dir || h.Layout != l {
		t.Fatalf("decoded %+v", h)
	}
	le := binary.LittleEndian
	for _, tc := range []struct {
		name    string
		mutate  func(b []byte)
		wantErr string
	}{
		{"unknown flag", func(b []byte) { le.PutUint32(b[offFlags:], 3) }, "flags"},
		{"no flag", func(b []byte) { le.PutUint32(b[offFlags:], 0) }, "flags"},
		{"directory outside the heap", func(b []byte) { le.PutUint64(b[offSlabDir:], 8) }, "slab directory"},
		{"directory misaligned", func(b []byte) { le.PutUint64(b[offSlabDir:], l.HeapOff+8) }, "slab directory"},
		{"reserved", func(b []byte) { b[offFlags+4] = 1 }, "reserved"},
		{"reserved tail", func(b []byte) { b[offHeaderCRC-1] = 1 }, "reserved"},
		{"directory in version 2", func(b []byte) { le.PutUint32(b[offVersion:], formatVersion) }, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(mem[:headerSize])
			tc.mutate(b)
			refreshCRC(b)
			if _, err := decodeHeader(b); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want ErrCorruption containing %q", err, tc.wantErr)
			}
		})
	}
	// A region without size classes is written as version 2, as before.
	mem2, _ := newImage(t, l, 5)
	if v := le.Uint32(mem2[offVersion:]); v != formatVersion {
		t.Fatalf("buddy-only region written as version %d", v)
	}
}

// TestGoldenImageSizeClasses pins the byte layout of a small region image
// with size classes (format 3): header, slab directory, slabs. Run with
// -update to accept a deliberate format change.
func TestGoldenImageSizeClasses(t *testing.T) {
	l := mustLayout(t, 64<<10, 4096, 512, 16, 2)
	mem, e := newSCImage(t, l, 42)
	var offs []uint64
	sizes := []int{24, 24, 24, 100, 100, 500, 5000, 17}
	for _, n := range sizes {
		off, err := e.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	for _, i := range []int{1, 3} {
		e.Free(offs[i], sizes[i])
	}
	mustCheck(t, e)

	var b bytes.Buffer
	b.WriteString("# Region image with size classes: 64 KiB, 512-byte nodes, 2 meganodes of 4 KiB, 16-byte atoms.\n")
	fmt.Fprintf(&b, "# Extents of %v bytes allocated at %#x; the second and fourth freed.\n\n", sizes, offs)
	if err := dumpHeader(&b, mem); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "\n# extent stats\n%+v\n%+v\n", e.Stats(), e.SlabStats())
	b.WriteString("\n# header page\n")
	hexDump(&b, mem[:headerSize], 0)
	b.WriteString("\n# control bytes\n")
	hexDump(&b, mem[l.ExtentOff:l.HeapOff], l.ExtentOff)
	b.WriteString("\n# heap (slab directory, slabs: next, prev, meta, bitmap, slots)\n")
	hexDump(&b, mem[l.HeapOff:l.HeapOff+l.Atoms*l.AtomSize], l.HeapOff)
	testutil.Golden(t, "region_image_sizeclasses.golden", b.String(), "region format 3")
}

// FuzzSizeClassOps drives the allocator with fuzzed operations and checks
// the model's invariants, determinism against a second allocator and a
// reopen from the image.
func FuzzSizeClassOps(f *testing.F) {
	f.Add([]byte{0x10, 0x20, 0x30, 0x81, 0x82, 0x40, 0xff, 0x01})
	f.Add(bytes.Repeat([]byte{0x05, 0x06, 0x87}, 40))
	f.Add(bytes.Repeat([]byte{0x7f, 0xfe}, 64))
	l := mustLayout(f, 256<<10, 4096, 512, 16, 1)
	f.Fuzz(func(t *testing.T, prog []byte) {
		mem, e := newSCImage(t, l, 1)
		memB, eb := newSCImage(t, l, 1)
		m := &scModel{l: l, e: e}
		var liveB []liveBlock
		var ops []scOp
		for i := 0; i+1 < len(prog) && len(ops) < 2000; i += 2 {
			if prog[i]&0x80 != 0 {
				ops = append(ops, scOp{free: true, pick: int(prog[i+1]), n: 1 + int(prog[i+1])})
			} else {
				ops = append(ops, scOp{n: 1 + (int(prog[i])<<6 | int(prog[i+1])&0x3f)})
			}
		}
		offA := applySCOps(t, e, nil, &m.live, ops)
		offB := applySCOps(t, eb, nil, &liveB, ops)
		if !slices.Equal(offA, offB) || !bytes.Equal(mem, memB) {
			t.Fatal("same operations, different results")
		}
		m.check(t)
		_, ec := reopenSC(t, mem)
		if ec.Stats() != e.Stats() || ec.SlabStats() != e.SlabStats() {
			t.Fatal("reopened counters differ")
		}
	})
}

// TestRegionSizeClasses: a region file made with size classes holds a
// tree's records in slots, reopens with them (format 3), and says so in its
// dump; a region made without is format 2 as before.
func TestRegionSizeClasses(t *testing.T) {
	opts := smallOptions(t)
	opts.SizeClasses = true
	opts.MeganodeSize, opts.Meganodes = 128<<10, 2
	r := mustCreate(t, opts)
	if !r.SizeClasses() {
		t.Fatal("no size classes")
	}
	m, err := r.NewMeganode(0, blink.Full, blink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string][]byte{}
	for i := range 500 {
		k := fmt.Appendf(nil, "key-%05d", i)
		v := make([]byte, 8+rng.IntN(249))
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		if err := m.Tree().Put(k, v); err != nil {
			t.Fatal(err)
		}
		want[string(k)] = v
	}
	for i := range 200 {
		k := fmt.Sprintf("key-%05d", i*2)
		if ok, err := m.Tree().Delete([]byte(k)); !ok || err != nil {
			t.Fatalf("delete %s: %v %v", k, ok, err)
		}
		delete(want, k)
	}
	ss := r.Extents().SlabStats()
	if ss.Slots != uint64(len(want)) {
		t.Fatalf("slab stats %+v for %d records", ss, len(want))
	}
	stats := r.Extents().Stats()
	slot := m.Slot()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := mustOpen(t, r.Path())
	if !r2.SizeClasses() || r2.Extents().Stats() != stats || r2.Extents().SlabStats() != ss {
		t.Fatalf("reopened: size classes %v, %+v %+v", r2.SizeClasses(), r2.Extents().Stats(), r2.Extents().SlabStats())
	}
	if err := r2.Check(); err != nil {
		t.Fatal(err)
	}
	m2, err := r2.OpenMeganode(slot, blink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		got, err := m2.Tree().Get([]byte(k), nil)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s after reopen: %v", k, err)
		}
	}
	var b strings.Builder
	if err := r2.Dump(&b); err != nil || !strings.Contains(b.String(), "slab directory") || !strings.Contains(b.String(), "slabs: ") {
		t.Fatalf("dump: %v\n%s", err, b.String())
	}

	// Too small a heap for the directory is refused.
	small := smallOptions(t)
	small.SizeClasses = true
	small.Size = 64 << 10
	small.Meganodes = 1
	small.MeganodeSize = 60 << 10
	if _, err := Create(small); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Create with no room for the directory: %v", err)
	}
}
