package meganode

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// BenchmarkSnapshotPause: how long a snapshot of a region holding data
// bytes stops its writers, the two ways side by side.
//
//   - copy: the image copied whole into memory (a buffer sized for it, as
//     server.fsm.Snapshot did before captures), writers excluded
//     throughout;
//   - capture: Region.Capture, after which writers go on while the image
//     is written.
//
// write is the capture's image written out (to io.Discard), which no
// longer holds writers: the persist's own cost, for comparison.
//
//	go test -run '^$' -bench BenchmarkSnapshotPause -benchtime 5x ./meganode/
func BenchmarkSnapshotPause(b *testing.B) {
	for _, data := range []uint64{64 << 20, 1 << 30} {
		r := filledRegion(b, data)
		name := fmt.Sprintf("data=%dMiB", data>>20)
		b.Run(name+"/copy", func(b *testing.B) {
			for b.Loop() {
				buf := bytes.NewBuffer(make([]byte, 0, data+data/8))
				if _, err := r.WriteImage(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/capture", func(b *testing.B) {
			for b.Loop() {
				c, err := r.Capture()
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
		b.Run(name+"/write", func(b *testing.B) {
			for b.Loop() {
				c, err := r.Capture()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.WriteImage(io.Discard); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// filledRegion returns a region over heap memory with data bytes of
// extents in use, every page of them non-zero.
func filledRegion(b *testing.B, data uint64) *Region {
	b.Helper()
	size := data + data/4 + 16<<20
	l := mustLayout(b, size, 1<<20, 1024, 64, 8)
	mem, ext := newImage(b, l, 7)
	r := newRegion(testLogger(b), nil, mem, header{Layout: l, ID: 7}, ext)
	b.Cleanup(func() { _ = r.Close() })
	const block = 1 << 20
	for n := uint64(0); n < data; n += block {
		off, err := r.Extents().Alloc(block)
		if err != nil {
			b.Fatalf("alloc after %d MiB: %v", n>>20, err)
		}
		fill := r.Bytes()[off : off+block]
		for i := range fill {
			fill[i] = byte(i | 1)
		}
	}
	return r
}
