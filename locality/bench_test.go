package locality

import (
	"sync/atomic"
	"testing"
	"time"
)

func benchSelector(b *testing.B, mode Mode) *Selector {
	s, err := NewSelector(Options{Mode: mode, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for id := range ServerID(4) {
		e := s.Estimator(id)
		e.ObserveRead(10 * us)
		fillRead(e, 12*us, 100)
		fillServer(e, 20*us, 100)
	}
	return s
}

func BenchmarkChoose(b *testing.B) {
	for _, mode := range []Mode{{Kind: Adaptive}, RatioMode(50)} {
		b.Run(mode.String(), func(b *testing.B) {
			s := benchSelector(b, mode)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				s.Choose(ServerID(i & 3))
			}
		})
	}
}

func BenchmarkEstimatorChoose(b *testing.B) {
	e := benchSelector(b, Mode{}).Estimator(1)
	b.ReportAllocs()
	for b.Loop() {
		e.Choose()
	}
}

func BenchmarkObserveServer(b *testing.B) {
	s := benchSelector(b, Mode{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.ObserveServer(ServerID(i&3), time.Duration(20_000+i&1023), time.Microsecond, 5*time.Microsecond)
	}
}

func BenchmarkObserveRead(b *testing.B) {
	s := benchSelector(b, Mode{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.ObserveRead(ServerID(i&3), time.Duration(12_000+i&511))
	}
}

// BenchmarkChooseParallel is the client's hot path under contention: many
// goroutines choosing and observing on four connections.
func BenchmarkChooseParallel(b *testing.B) {
	s := benchSelector(b, Mode{})
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		id := ServerID(next.Add(1) & 3)
		for pb.Next() {
			if s.Choose(id).Method == ServerSide {
				s.ObserveServer(id, 20*time.Microsecond, time.Microsecond, 5*time.Microsecond)
			} else {
				s.ObserveRead(id, 12*time.Microsecond)
			}
		}
	})
}
