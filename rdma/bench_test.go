package rdma

import (
	"context"
	"fmt"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// BenchmarkRead measures one synchronous read of a node-sized (and other)
// range: latency per read and allocations on the client. The tcp numbers
// include a loopback round trip and the responder's work, on the same
// cores; shm is a memory copy plus two atomic loads of the slot.
func BenchmarkRead(b *testing.B) {
	for _, h := range harnesses {
		for _, size := range []int{64, 1 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("provider=%s/size=%s", h.name, byteSize(size)), func(b *testing.B) {
				p, rk := benchPair(b, h)
				dst := atomicmem.Alloc(size)
				ctx := context.Background()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					off := uint64(i*4096) % (rk.Len - uint64(size))
					if err := p.cl.Read(ctx, &rk, off, dst); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkReadInFlight measures throughput with many 1 KiB reads in flight
// through a CQ (range scans, multi-get).
func BenchmarkReadInFlight(b *testing.B) {
	for _, h := range harnesses {
		for _, depth := range []int{16, 128} {
			b.Run(fmt.Sprintf("provider=%s/inflight=%d", h.name, depth), func(b *testing.B) {
				p, rk := benchPair(b, h)
				ctx := context.Background()
				cq := NewCQ(depth)
				ops := make([]Op, depth)
				for i := range ops {
					ops[i].Prepare(&rk, uint64(i)*4096, atomicmem.Alloc(1024))
				}
				b.SetBytes(1024)
				b.ReportAllocs()
				posted := 0
				for i := range ops {
					if err := p.cl.Post(ctx, &ops[i], cq); err != nil {
						b.Fatal(err)
					}
					posted++
				}
				for b.Loop() {
					op, err := cq.Wait(ctx)
					if err != nil || op.Err() != nil {
						b.Fatal(err, op.Err())
					}
					if err := p.cl.Post(ctx, op, cq); err != nil {
						b.Fatal(err)
					}
				}
				for range posted {
					if _, err := cq.Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchPair starts a provider with a registered file region.
func benchPair(b *testing.B, h harness) (*pair, RemoteKey) {
	region := newFileRegion(b, 1)
	fillPattern(region.Bytes(), 1)
	p := h.start(b, harnessKnobs{})
	return p, mustRegister(b, p.srv, region)
}
