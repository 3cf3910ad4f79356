package blink

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// testExtents is a deterministic size-class allocator over part of a test
// region, standing in for meganode's buddy allocator in this package's unit
// tests (the meganode package runs the same tree over the real one).
type testExtents struct {
	mu         sync.Mutex
	next, end  uint64
	free       map[int][]uint64
	inUse      int
	allocCalls int
}

func (e *testExtents) Alloc(n int) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.allocCalls++
	if l := e.free[n]; len(l) > 0 {
		off := l[len(l)-1]
		e.free[n] = l[:len(l)-1]
		e.inUse++
		return off, nil
	}
	if e.next+uint64(n) > e.end {
		return 0, fmt.Errorf("test extents: %d bytes: %w", n, ErrExtentsFull)
	}
	off := e.next
	e.next += uint64(n)
	e.inUse++
	return off, nil
}

func (e *testExtents) Free(off uint64, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.free[n] = append(e.free[n], off)
	e.inUse--
}

const testRegion = 7

type testTreeOpts struct {
	nodeSize     int
	meganodeSize uint64
	extentBytes  uint64
	fill         float64
	bounds       *Bounds
	level        int
	maxRestarts  int    // Options.MaxRestarts; 0 is the default
	legacy       uint64 // non-zero: format in versioned mode with this U
}

// newTestTree formats a meganode at offset 0 of a fresh heap region and
// registers the invariant checker to run when the test ends.
func newTestTree(tb testing.TB, o testTreeOpts) (*Tree, *testExtents) {
	tb.Helper()
	if o.nodeSize == 0 {
		o.nodeSize = 1024
	}
	if o.meganodeSize == 0 {
		o.meganodeSize = 4 << 20
	}
	if o.extentBytes == 0 {
		o.extentBytes = 16 << 20
	}
	b := Full
	if o.bounds != nil {
		b = *o.bounds
	}
	mem := atomicmem.Alloc(int(o.meganodeSize + o.extentBytes))
	ext := &testExtents{next: o.meganodeSize, end: o.meganodeSize + o.extentBytes, free: map[int][]uint64{}}
	tr, err := Format(mem, Config{Region: testRegion, Base: 0, Size: o.meganodeSize, Level: o.level, Bounds: b,
		Versioned: o.legacy != 0, Legacy: o.legacy},
		ext, Options{NodeSize: o.nodeSize, FillThreshold: o.fill, MaxRestarts: o.maxRestarts})
	if err != nil {
		tb.Fatalf("Format: %v", err)
	}
	tb.Cleanup(func() { mustCheck(tb, tr) })
	return tr, ext
}

func mustCheck(tb testing.TB, tr *Tree) {
	tb.Helper()
	if err := tr.CheckErr(); err != nil {
		tb.Fatal(err)
	}
}

func mustPut(tb testing.TB, tr *Tree, k, v string) {
	tb.Helper()
	if err := tr.Put([]byte(k), []byte(v)); err != nil {
		tb.Fatalf("Put(%q): %v", k, err)
	}
}

func mustGet(tb testing.TB, tr *Tree, k, want string) {
	tb.Helper()
	got, err := tr.Get([]byte(k), nil)
	if err != nil {
		tb.Fatalf("Get(%q): %v", k, err)
	}
	if string(got) != want {
		tb.Fatalf("Get(%q) = %q, want %q", k, got, want)
	}
}
