package rsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cellstore/cell/internal/testutil"
)

// TestRegionRecordSizeClassesGolden pins the region record of a region
// with size-class extents (flag bit 0); records.golden keeps the one
// without, byte for byte.
func TestRegionRecordSizeClassesGolden(t *testing.T) {
	l := Layout{Size: 1 << 30, MeganodeSize: 64 << 20, NodeSize: 1024, SizeClasses: true}
	b := AppendRecord(nil, &Record{Kind: KindRegion, Value: AppendRegionBody(nil, l)})
	r, err := DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRegionBody(r.Value)
	if err != nil || got != l {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, l)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "# region with size classes (%d bytes)\n", len(b))
	dumpRecord(&out, b)
	testutil.Golden(t, "records_sizeclasses.golden", out.String(), "log record format")

	// Flags 0 is the record of every log before size classes; unknown
	// bits are refused.
	old := AppendRegionBody(nil, Layout{Size: 1 << 30, MeganodeSize: 64 << 20, NodeSize: 1024})
	if got, err := DecodeRegionBody(old); err != nil || got.SizeClasses {
		t.Fatalf("flags 0: %+v, %v", got, err)
	}
	for _, flags := range []uint32{2, 3, 1 << 31} {
		v := bytes.Clone(old)
		le.PutUint32(v[20:], flags)
		if _, err := DecodeRegionBody(v); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("flags %#x: %v, want ErrBadRecord", flags, err)
		}
	}
}

// TestApplyRegionRecordAllocator: the region record picks the extent
// allocator. A region made with size classes that applies the region
// record of an old log (flag 0) is made again without them, and the other
// way round; a record that agrees keeps the region. Two replicas applying
// one log with size classes hold byte-identical regions.
func TestApplyRegionRecordAllocator(t *testing.T) {
	sc := testLayout
	sc.SizeClasses = true
	for _, tc := range []struct {
		name          string
		made, record  Layout
		remade        bool
		wantSizeClass bool
	}{
		{"old log on a size-class region", sc, testLayout, true, false},
		{"size-class log on a buddy region", testLayout, sc, true, true},
		{"size classes kept", sc, sc, false, true},
		{"buddy kept", testLayout, testLayout, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, files := newMachine(t, 1, tc.made)
			if _, err := m.Apply(1, AppendRecord(nil, &Record{Kind: KindRegion, Value: AppendRegionBody(nil, tc.record)})); err != nil {
				t.Fatal(err)
			}
			if got := files.created == 2; got != tc.remade {
				t.Fatalf("region made %d times", files.created)
			}
			if m.Region().SizeClasses() != tc.wantSizeClass || LayoutOf(m.Region()) != tc.record {
				t.Fatalf("region size classes %v, layout %+v; want %+v", m.Region().SizeClasses(), LayoutOf(m.Region()), tc.record)
			}
		})
	}

	// One log, two replicas (one made without size classes at first).
	log := [][]byte{AppendRecord(nil, &Record{Kind: KindRegion, Value: AppendRegionBody(nil, sc)}),
		AppendRecord(nil, &Record{Kind: KindRoot, Value: AppendRootBody(nil, RootFormat)})}
	a, _ := newMachine(t, 1, sc)
	b, _ := newMachine(t, 1, testLayout)
	var leaf Result
	for i, rec := range log {
		ra, errA := a.Apply(uint64(i+1), rec)
		rb, errB := b.Apply(uint64(i+1), rec)
		if errA != nil || errB != nil || ra.New != rb.New {
			t.Fatalf("record %d: %v %v, %v %v", i, ra, errA, rb, errB)
		}
		leaf = ra
	}
	rng := rand.New(rand.NewPCG(4, 2))
	keys := map[int]bool{}
	for i := range 3000 {
		var rec []byte
		k := rng.IntN(1000)
		if keys[k] && rng.IntN(3) == 0 {
			rec = AppendRecord(nil, &Record{Kind: KindDelete, Meganode: leaf.New, Key: fmt.Appendf(nil, "key-%04d", k)})
			delete(keys, k)
		} else {
			rec = AppendRecord(nil, &Record{Kind: KindPut, Meganode: leaf.New, Key: fmt.Appendf(nil, "key-%04d", k), Value: bytes.Repeat([]byte{byte(i)}, 8+rng.IntN(300))})
			keys[k] = true
		}
		_, errA := a.Apply(uint64(len(log)+i+1), rec)
		_, errB := b.Apply(uint64(len(log)+i+1), rec)
		if errA != nil || errB != nil {
			t.Fatalf("record %d: %v, %v", i, errA, errB)
		}
	}
	if !a.Region().SizeClasses() || !bytes.Equal(a.Region().Bytes(), b.Region().Bytes()) {
		t.Fatal("replicas of one log with size classes differ")
	}
	if ss := a.Region().Extents().SlabStats(); ss.Slots != uint64(len(keys)) {
		t.Fatalf("slab stats %+v for %d keys", ss, len(keys))
	}
	if err := a.Region().Check(); err != nil {
		t.Fatal(err)
	}
}
