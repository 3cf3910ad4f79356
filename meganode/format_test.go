package meganode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/testutil"
)

func TestComputeLayout(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		size, mega, node, atom uint64
		slots                  uint64
		want                   Layout
		wantErr                string
	}{{
		name: "defaults", size: 1 << 30, mega: 64 << 20, node: 1024, atom: 64, slots: 4,
		want: Layout{Size: 1 << 30, NodeSize: 1024, MeganodeSize: 64 << 20, Slots: 4, AtomSize: 64,
			NodeOff: 4096, NodeLen: 256 << 20, ExtentOff: 4096 + 256<<20, ExtentLen: 768<<20 - 4096,
			HeapOff: 4096 + 256<<20 + 12390400, Atoms: 12389248},
	}, {
		name: "8K nodes align the node area", size: 1 << 20, mega: 64 << 10, node: 8192, atom: 16, slots: 2,
		want: Layout{Size: 1 << 20, NodeSize: 8192, MeganodeSize: 64 << 10, Slots: 2, AtomSize: 16,
			NodeOff: 8192, NodeLen: 128 << 10, ExtentOff: 8192 + 128<<10, ExtentLen: 1<<20 - 8192 - 128<<10,
			HeapOff: 8192 + 128<<10 + 53248, Atoms: 53248},
	}, {
		name: "tiny", size: 64 << 10, mega: 4096, node: 512, atom: 16, slots: 2,
		want: Layout{Size: 64 << 10, NodeSize: 512, MeganodeSize: 4096, Slots: 2, AtomSize: 16,
			NodeOff: 4096, NodeLen: 8192, ExtentOff: 12288, ExtentLen: 53248, HeapOff: 16384, Atoms: 3072},
	},
		{name: "size not page aligned", size: 1<<20 + 1, mega: 4096, node: 512, atom: 16, slots: 1, wantErr: "region size"},
		{name: "size too large", size: 1<<40 + 4096, mega: 4096, node: 512, atom: 16, slots: 1, wantErr: "region size"},
		{name: "node size not power of two", size: 1 << 20, mega: 4096, node: 768, atom: 16, slots: 1, wantErr: "node size"},
		{name: "node size too small", size: 1 << 20, mega: 4096, node: 256, atom: 16, slots: 1, wantErr: "node size"},
		{name: "meganode not multiple of node", size: 1 << 20, mega: 5000, node: 512, atom: 16, slots: 1, wantErr: "meganode size"},
		{name: "meganode under 8 nodes", size: 1 << 20, mega: 2048, node: 512, atom: 16, slots: 1, wantErr: "meganode size"},
		{name: "atom too small", size: 1 << 20, mega: 4096, node: 512, atom: 8, slots: 1, wantErr: "atom size"},
		{name: "atom not power of two", size: 1 << 20, mega: 4096, node: 512, atom: 48, slots: 1, wantErr: "atom size"},
		{name: "no slots", size: 1 << 20, mega: 4096, node: 512, atom: 16, slots: 0, wantErr: "slots"},
		{name: "too many slots", size: 1 << 30, mega: 4096, node: 512, atom: 16, slots: MaxSlots + 1, wantErr: "slots"},
		{name: "meganodes do not fit", size: 1 << 20, mega: 512 << 10, node: 1024, atom: 16, slots: 2, wantErr: "do not fit"},
		{name: "no room for extents", size: 1 << 20, mega: 1020 << 10, node: 1024, atom: 16, slots: 1, wantErr: "no room for extents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := computeLayout(tc.size, tc.mega, tc.node, tc.atom, tc.slots)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("layout\n got %+v\nwant %+v", got, tc.want)
			}
			checkLayoutInvariants(t, got)
		})
	}
}

// checkLayoutInvariants checks what format.go promises of every layout.
func checkLayoutInvariants(t testing.TB, l Layout) {
	t.Helper()
	fail := func(what string) { t.Fatalf("%s: %+v", what, l) }
	if l.NodeOff < headerSize || l.NodeOff%pageAlign != 0 || l.NodeOff%l.NodeSize != 0 {
		fail("node area misplaced")
	}
	if l.SlotBase(int(l.Slots-1))%l.NodeSize != 0 || l.NodeLen != l.Slots*l.MeganodeSize {
		fail("slot bases misaligned")
	}
	if l.ExtentOff < l.NodeOff+l.NodeLen || l.ExtentOff%pageAlign != 0 || l.ExtentOff+l.ExtentLen != l.Size {
		fail("extent area misplaced")
	}
	if l.HeapOff < l.ExtentOff+l.Atoms || l.HeapOff%pageAlign != 0 || l.HeapOff+l.Atoms*l.AtomSize > l.Size {
		fail("heap misplaced")
	}
	// Maximal: one more atom would not fit.
	if n := l.Atoms + 1; alignUp(n, pageAlign)+n*l.AtomSize <= l.ExtentLen {
		fail("atom count not maximal")
	}
}

func TestComputeLayoutRandom(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 2000 {
		node := uint64(512) << rng.IntN(5)
		mega := node * uint64(8+rng.IntN(200))
		size := alignUp(uint64(rng.Int64N(64<<20))+1, pageAlign)
		atom := uint64(16) << rng.IntN(9)
		slots := uint64(1 + rng.IntN(50))
		l, err := computeLayout(size, mega, node, atom, slots)
		if err != nil {
			continue
		}
		checkLayoutInvariants(t, l)
	}
}

// validHeaderImage returns a formatted tiny region image.
func validHeaderImage(t testing.TB) ([]byte, Layout) {
	l := mustLayout(t, 64<<10, 4096, 512, 16, 2)
	mem, _ := newImage(t, l, 0xabcdef)
	return mem, l
}

// refreshCRC recomputes the header CRC after a test changed a field.
func refreshCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[offHeaderCRC:], crc32.Checksum(b[offMagic:offHeaderCRC], castagnoli))
}

func TestHeaderRoundTrip(t *testing.T) {
	mem, l := validHeaderImage(t)
	h, err := decodeHeader(mem)
	if err != nil {
		t.Fatal(err)
	}
	if h.Layout != l || h.ID != 0xabcdef {
		t.Fatalf("decoded %+v", h)
	}
	b := make([]byte, staticEnd)
	h.encode(b)
	if !bytes.Equal(b[offMagic:], mem[offMagic:staticEnd]) {
		t.Fatalf("re-encoding differs:\n%x\n%x", b[offMagic:], mem[offMagic:staticEnd])
	}
}

func TestHeaderDecodeErrors(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		name    string
		mutate  func(b []byte) []byte
		wantErr string
	}{
		{"truncated", func(b []byte) []byte { return b[:headerSize-1] }, "smaller than its"},
		{"empty", func(b []byte) []byte { return nil }, "smaller than its"},
		{"zeroed", func(b []byte) []byte { clear(b); return b }, "bad region magic"},
		{"magic", func(b []byte) []byte { b[offMagic] ^= 1; return b }, "bad region magic"},
		{"version", func(b []byte) []byte { le.PutUint32(b[offVersion:], 3); refreshCRC(b); return b }, "format version 3"},
		{"crc", func(b []byte) []byte { b[offRegionSize+1] ^= 1; return b }, "CRC"},
		{"crc field", func(b []byte) []byte { b[offHeaderCRC] ^= 1; return b }, "CRC"},
		{"reserved", func(b []byte) []byte { b[offReserved+3] = 1; refreshCRC(b); return b }, "reserved"},
		{"region id", func(b []byte) []byte { le.PutUint32(b[offRegionID:], 1<<24); refreshCRC(b); return b }, "region ID"},
		{"node size", func(b []byte) []byte { le.PutUint32(b[offNodeSize:], 1000); refreshCRC(b); return b }, "node size"},
		{"slots", func(b []byte) []byte { le.PutUint32(b[offSlots:], 3); refreshCRC(b); return b }, "layout"},
		{"heap offset", func(b []byte) []byte { le.PutUint64(b[offHeap:], le.Uint64(b[offHeap:])+4096); refreshCRC(b); return b }, "layout"},
		{"atoms", func(b []byte) []byte { le.PutUint64(b[offAtoms:], 1); refreshCRC(b); return b }, "layout"},
		{"region size", func(b []byte) []byte { le.PutUint64(b[offRegionSize:], 1<<50); refreshCRC(b); return b }, "region size"},
		{"slot beyond count", func(b []byte) []byte { b[offSlotBitmap] |= 1 << 2; return b }, "slot 2 of 2"},
		{"last slot bit", func(b []byte) []byte { b[headerSize-1] = 0x80; return b }, "marked in use"},
		{"free head misaligned", func(b []byte) []byte { le.PutUint64(b[offFreeLists+8:], 16384+16); return b }, "free list 1"},
		{"free head outside heap", func(b []byte) []byte { le.PutUint64(b[offFreeLists:], 8); return b }, "free list 0"},
		{"free head of impossible class", func(b []byte) []byte { le.PutUint64(b[offFreeLists+8*40:], 16384); return b }, "free list 40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, _ := validHeaderImage(t)
			_, err := decodeHeader(tc.mutate(mem))
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want ErrCorruption containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestGoldenImage pins the byte layout of a small region image: header,
// free lists, slot bitmap, control bytes and free-block links. Run with
// -update to accept a deliberate format change.
func TestGoldenImage(t *testing.T) {
	l := mustLayout(t, 64<<10, 4096, 512, 16, 2)
	r := newMemRegion(t, l, 42)
	r.SetRoot(blink.MakePtr(7, 0x1000))
	r.mu.Lock()
	r.setSlotLocked(1, true)
	r.mu.Unlock()
	e := r.Extents()
	var offs []uint64
	sizes := []int{16, 16, 16, 16, 100, 500, 17}
	for _, n := range sizes {
		off, err := e.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	for _, i := range []int{0, 2, 4} {
		e.Free(offs[i], sizes[i])
	}
	mustCheck(t, e)

	var b bytes.Buffer
	b.WriteString("# Region image: 64 KiB, 512-byte nodes, 2 meganodes of 4 KiB, 16-byte atoms.\n")
	b.WriteString("# Root 7:0x1000, slot 1 in use; extents of 16, 16, 16, 16, 100, 500, 17 bytes allocated; the first, third and fifth freed.\n\n")
	if err := dumpHeader(&b, r.Bytes()); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "\n# extent stats\n%+v\n", e.Stats())
	b.WriteString("\n# header page\n")
	hexDump(&b, r.Bytes()[:headerSize], 0)
	b.WriteString("\n# control bytes\n")
	hexDump(&b, r.Bytes()[l.ExtentOff:l.HeapOff], l.ExtentOff)
	b.WriteString("\n# heap (free blocks start with next, prev links)\n")
	hexDump(&b, r.Bytes()[l.HeapOff:l.HeapOff+l.Atoms*l.AtomSize], l.HeapOff)

	testutil.Golden(t, "region_image.golden", b.String(), "region format")
}

func FuzzDecodeHeader(f *testing.F) {
	for _, p := range [][5]uint64{
		{64 << 10, 4096, 512, 16, 2},
		{1 << 20, 64 << 10, 8192, 4096, 3},
		{4 << 20, 64 << 10, 1024, 64, 10},
	} {
		l := mustLayout(f, p[0], p[1], p[2], p[3], p[4])
		mem, _ := newImage(f, l, 9)
		f.Add(mem[:headerSize], false)
		f.Add(mem[:headerSize], true)
		v1 := bytes.Clone(mem[:headerSize]) // a format 1 header, still read
		binary.LittleEndian.PutUint32(v1[offVersion:], formatVersion1)
		f.Add(v1, true)
	}
	f.Add([]byte{}, false)
	f.Add(make([]byte, headerSize), true)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC && len(b) >= staticEnd {
			// Reach the checks behind the CRC.
			b = bytes.Clone(b)
			refreshCRC(b)
		}
		h, err := decodeHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v does not wrap ErrCorruption", err)
			}
			return
		}
		enc := make([]byte, staticEnd)
		h.encode(enc)
		if !bytes.Equal(enc[offMagic:], b[offMagic:staticEnd]) {
			t.Fatalf("accepted header does not re-encode to itself")
		}
		checkLayoutInvariants(t, h.Layout)
	})
}
