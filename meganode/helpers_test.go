package meganode

import (
	"bytes"
	"errors"
	"fmt"

	"io"
	"log/slog"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// testLogger logs through t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// mustLayout computes a layout or fails the test.
func mustLayout(t testing.TB, size, mega, node, atom, slots uint64) Layout {
	t.Helper()
	l, err := computeLayout(size, mega, node, atom, slots)
	if err != nil {
		t.Fatalf("computeLayout: %v", err)
	}
	return l
}

// newImage formats a region of layout l in heap memory (checked by the race
// detector, unlike a mapping).
func newImage(t testing.TB, l Layout, id uint32) ([]byte, *Extents) {
	t.Helper()
	mem := atomicmem.Alloc(int(l.Size))
	ext := formatImage(mem, header{Layout: l, ID: id})
	return mem, ext
}

// newMemRegion returns a Region over heap memory.
func newMemRegion(t testing.TB, l Layout, id uint32) *Region {
	t.Helper()
	mem, ext := newImage(t, l, id)
	r := newRegion(testLogger(t), nil, mem, header{Layout: l, ID: id}, ext)
	t.Cleanup(func() {
		if err := r.Check(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("region check at cleanup: %v", err)
		}
		_ = r.Close()
	})
	return r
}

// mustCheck runs the allocator's invariant checker.
func mustCheck(t testing.TB, e *Extents) {
	t.Helper()
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

// extentState is the part of a region image the allocator owns: free list
// heads and control bytes.
func extentState(mem []byte, l Layout) []byte {
	var b bytes.Buffer
	b.Write(mem[offFreeLists:offApplied])
	b.Write(mem[l.ExtentOff:l.HeapOff])
	return b.Bytes()
}

// hexDump writes b like hexdump -C, offsets starting at base, with runs of
// identical lines after the first shown as one "*".
func hexDump(w io.Writer, b []byte, base uint64) {
	var prev []byte
	star := false
	for i := 0; i < len(b); i += 16 {
		line := b[i:min(i+16, len(b))]
		if prev != nil && bytes.Equal(line, prev) {
			if !star {
				fmt.Fprintln(w, "*")
				star = true
			}
			continue
		}
		prev, star = line, false
		fmt.Fprintf(w, "%08x ", base+uint64(i))
		for j := range 16 {
			if j == 8 {
				fmt.Fprint(w, " ")
			}
			if j < len(line) {
				fmt.Fprintf(w, " %02x", line[j])
			} else {
				fmt.Fprint(w, "   ")
			}
		}
		fmt.Fprint(w, "  |")
		for _, c := range line {
			if c < 0x20 || c > 0x7e {
				c = '.'
			}
			fmt.Fprintf(w, "%c", c)
		}
		fmt.Fprintln(w, "|")
	}
	fmt.Fprintf(w, "%08x\n", base+uint64(len(b)))
}
