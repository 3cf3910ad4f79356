package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/wire"
)

// benchOp measures one request type over loopback, client and server in
// this process (allocations of both sides are counted).
func benchOp(b *testing.B, op wire.Op, req wire.Message) {
	s, _ := newTestServer(b, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	c := dial(b, s)
	for i := range 1000 {
		put(b, c, fmt.Sprintf("key%05d", i), "value-value-value")
	}
	body := req.AppendTo(nil)
	ctx := ctxT(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f, err := c.Call(ctx, op, body)
		if err != nil {
			b.Fatal(err)
		}
		f.Release()
	}
}

func BenchmarkGet(b *testing.B) {
	benchOp(b, wire.OpGet, &wire.GetRequest{Key: []byte("key00420")})
}

func BenchmarkSearch(b *testing.B) {
	benchOp(b, wire.OpSearch, &wire.SearchRequest{Key: []byte("key00420")})
}

func BenchmarkSearchWithValue(b *testing.B) {
	benchOp(b, wire.OpSearch, &wire.SearchRequest{Key: []byte("key00420"), WantValue: true})
}

func BenchmarkPing(b *testing.B) {
	benchOp(b, wire.OpPing, &wire.GetRequest{})
}

// BenchmarkGetParallel keeps many requests in flight on one connection.
func BenchmarkGetParallel(b *testing.B) {
	s, _ := newTestServer(b, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	c := dial(b, s)
	put(b, c, "key", "value")
	body := (&wire.GetRequest{Key: []byte("key")}).AppendTo(nil)
	ctx := ctxT(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f, err := c.Call(ctx, wire.OpGet, body)
			if err != nil {
				b.Error(err)
				return
			}
			f.Release()
		}
	})
}

// TestGetDoesNotAllocate: a get over loopback, client and server in this
// process, allocates nothing in steady state (the worker handles its job
// in place: a pointer to the job it was given moved every job to the
// heap, 144 bytes per request).
func TestGetDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector (make test runs this without it)")
	}
	s, _ := newTestServer(t, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	c := dial(t, s)
	put(t, c, "key", "value")
	body := (&wire.GetRequest{Key: []byte("key")}).AppendTo(nil)
	ctx := ctxT(t)
	get := func() {
		f, err := c.Call(ctx, wire.OpGet, body)
		if err != nil {
			t.Fatal(err)
		}
		f.Release()
	}
	for range 100 {
		get()
	}
	// Both sides, and whatever else the server does meanwhile (raft's
	// heartbeats of a sole voter: none): allow a fraction for the runtime.
	if allocs := testing.AllocsPerRun(1000, get); allocs > 0.2 {
		t.Fatalf("%.2f allocations per get, want 0", allocs)
	}
}

// BenchmarkConditionalPut compares a plain put with a compare-and-set put
// (docs/transactions.md §12: "Conditional put throughput ≥ 0.9× plain
// put, same clients and settings"): 16 writers through one client, each
// on keys of its own, the compare-and-set chaining each put's version
// into the next one's condition, so every condition holds. One server,
// its log synced.
func BenchmarkConditionalPut(b *testing.B) {
	s, store := newTestServer(b, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	waitVersionedB(b, s)
	m, err := locality.ParseMode("server")
	if err != nil {
		b.Fatal(err)
	}
	c, err := client.New(ctxT(b), client.Config{Store: store, Mode: m, Provider: "tcp", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	value := []byte("value-value-value-value-value-value")
	var writer atomic.Int64
	for _, mode := range []string{"put", "put-if-version"} {
		b.Run(mode, func(b *testing.B) {
			b.SetParallelism(8) // 16 writers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := writer.Add(1)
				ctx := context.Background()
				var last [64]uint64 // each key's version (0: not written yet)
				for i := 0; pb.Next(); i++ {
					k := i % 64
					key := []byte(fmt.Sprintf("%s/%d/%d", mode, w, k))
					var err error
					if mode == "put" {
						err = c.Put(ctx, key, value)
					} else {
						last[k], err = c.PutIf(ctx, key, value, client.IfVersion(last[k]))
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// waitVersionedB waits until s's region applied its version record.
func waitVersionedB(b *testing.B, s *Server) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if v, _, _ := s.reps.own.sm.Versions(); v {
			return
		}
	}
	b.Fatal("no versions after 20 s")
}
