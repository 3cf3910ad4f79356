package blink

import (
	"fmt"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
)

// BenchmarkMeganodeSplit times a local split of a 64 MiB meganode of 1 KiB
// nodes filled to 75% with 16-byte keys: the copy of the right half into a
// new meganode (records shared) in batches of 64 leaves, the link and the
// freeing of the old right half in batches of 256 nodes, each step under
// one writer lock (what server's split records do, without the log).
//
//	go test -run '^$' -bench MeganodeSplit -benchtime 3x ./blink
func BenchmarkMeganodeSplit(b *testing.B) {
	const mega = 64 << 20
	mem := atomicmem.Alloc(2*mega + 256<<20)
	for range b.N {
		b.StopTimer()
		ext := &testExtents{next: 2 * mega, end: uint64(len(mem)), free: map[int][]uint64{}}
		opts := Options{NodeSize: 1024}
		x, err := Format(mem, Config{Region: testRegion, Base: 0, Size: mega, Bounds: Full}, ext, opts)
		if err != nil {
			b.Fatal(err)
		}
		keys := 0
		for i := 0; x.Fill() < 0.75; i++ {
			if err := x.Put([]byte(fmt.Sprintf("key-%011d", uint64(i)*2654435761%(1<<40))), []byte("value")); err != nil {
				b.Fatal(err)
			}
			keys++
		}
		b.StartTimer()
		start := time.Now()
		sep, err := x.SplitKey()
		if err != nil {
			b.Fatal(err)
		}
		if err := x.Freeze(sep); err != nil {
			b.Fatal(err)
		}
		y, err := Format(mem, Config{Region: testRegion, Base: mega, Size: mega, Bounds: Bounds{Min: sep, MaxInf: true}}, ext, opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := y.BeginCopy(x.Right()); err != nil {
			b.Fatal(err)
		}
		var longest time.Duration
		for from := sep; from != nil; {
			t0 := time.Now()
			if from, err = CopyRight(x, y, from, 64); err != nil {
				b.Fatal(err)
			}
			longest = max(longest, time.Since(t0))
		}
		copied := time.Since(start)
		if err := x.LinkRight(y.Root()); err != nil {
			b.Fatal(err)
		}
		for done := false; !done; {
			t0 := time.Now()
			if done, err = x.FreeRight(256); err != nil {
				b.Fatal(err)
			}
			longest = max(longest, time.Since(t0))
		}
		if err := x.Thaw(); err != nil {
			b.Fatal(err)
		}
		if err := y.Thaw(); err != nil {
			b.Fatal(err)
		}
		total := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(keys), "keys")
		b.ReportMetric(float64(copied.Microseconds())/1e3, "copy-ms")
		b.ReportMetric(float64(total.Microseconds())/1e3, "split-ms")
		b.ReportMetric(float64(longest.Microseconds()), "longest-step-µs")
		b.ReportMetric(x.Fill(), "left-fill")
		b.ReportMetric(y.Fill(), "right-fill")
		b.StartTimer()
	}
}
