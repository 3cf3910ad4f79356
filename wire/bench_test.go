package wire

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCallPing measures round trips of an 8-byte Ping over loopback
// TCP through one Conn, with 1 to 64 concurrent callers. The server echoes
// on its reading goroutine through a ReplyWriter. ns/op is the inverse of
// throughput; allocs/op counts both ends.
func BenchmarkCallPing(b *testing.B) {
	srv := startServerMode(b, nil, echo(0), true)
	for _, callers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			c := mustDial(b, srv.addr(), nil)
			body := []byte("pingping")
			b.SetParallelism((callers + 1) / 2) // GOMAXPROCS is 2 here; exact with -cpu 1
			if callers == 1 {
				b.SetParallelism(1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					f, err := c.Call(ctx, OpPing, body)
					if err != nil {
						b.Error(err)
						return
					}
					f.Release()
				}
			})
		})
	}
}

// BenchmarkCallPingDeadline is BenchmarkCallPing/callers=8 with a context
// deadline on every call (budget in the header, cancellable wait).
func BenchmarkCallPingDeadline(b *testing.B) {
	srv := startServerMode(b, nil, echo(0), true)
	c := mustDial(b, srv.addr(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f, err := c.Call(ctx, OpPing, nil)
			if err != nil {
				b.Error(err)
				return
			}
			f.Release()
		}
	})
}

func BenchmarkDecodeSearchReply(b *testing.B) {
	body := (&SearchReply{Kind: SearchNext, Next: ptrB, Meganode: Meganode{Ptr: ptrA, Level: 2, Height: 5,
		Range: KeyRange{Min: []byte("user000123"), Max: []byte("user000456")}}}).AppendTo(nil)
	var m SearchReply
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := m.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFrame(b *testing.B) {
	frame := AppendFrame(nil, Header{Op: OpSearch, ID: 1}, make([]byte, 64))
	rd := mustReader(b, &loopReader{b: frame}, nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := rd.ReadFrame(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFramePooled(b *testing.B) {
	frame := AppendFrame(nil, Header{Op: OpSearch, ID: 1}, make([]byte, 64))
	rd := mustReader(b, &loopReader{b: frame}, nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		f, err := rd.ReadFramePooled()
		if err != nil {
			b.Fatal(err)
		}
		f.Release()
	}
}

// BenchmarkReadFrameLarge reads 1 MiB frames (a large value): the cost
// of growing the body buffer as the bytes arrive.
func BenchmarkReadFrameLarge(b *testing.B) {
	frame := AppendFrame(nil, Header{Op: OpPut, ID: 1}, make([]byte, 1<<20))
	rd := mustReader(b, &loopReader{b: frame}, nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		f, err := rd.ReadFramePooled()
		if err != nil {
			b.Fatal(err)
		}
		f.Release()
	}
}
