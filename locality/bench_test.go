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

// benchModes are the modes the per-mode benchmarks run: the paper's rule,
// the two fixed modes Fig. 4 compares it with, and a ratio.
var benchModes = []Mode{{Kind: Adaptive}, {Kind: ClientOnly}, {Kind: ServerOnly}, RatioMode(50)}

// BenchmarkEstimatorChooseMode is one Choose on a warm estimator, per mode.
func BenchmarkEstimatorChooseMode(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(mode.String(), func(b *testing.B) {
			e := benchSelector(b, mode).Estimator(1)
			b.ReportAllocs()
			for b.Loop() {
				e.Choose()
			}
		})
	}
}

// BenchmarkEstimatorChooseAtMode is ChooseAt with a time the caller has,
// per mode: Choose without its clock read.
func BenchmarkEstimatorChooseAtMode(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(mode.String(), func(b *testing.B) {
			e := benchSelector(b, mode).Estimator(1)
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				e.ChooseAt(now)
			}
		})
	}
}

// BenchmarkEstimatorChooseModeParallel is Choose from several goroutines on
// one estimator, as the in-flight searches of one client on one server
// connection do.
func BenchmarkEstimatorChooseModeParallel(b *testing.B) {
	for _, mode := range benchModes {
		b.Run(mode.String(), func(b *testing.B) {
			e := benchSelector(b, mode).Estimator(1)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					e.Choose()
				}
			})
		})
	}
}

// hopReads is the one-sided reads of a client-side get in Fig. 4's tree:
// the meganode header, four nodes and the record.
const hopReads = 6

// BenchmarkClientHop is the selector's share of one client-side meganode
// hop as the client fed it one call per event: a Choose, an ObserveReadAt
// per one-sided read, timed with a system clock reading at its start and
// one at its end (the reads themselves left out), and an ObserveHeight.
// One op is one hop.
func BenchmarkClientHop(b *testing.B) {
	for _, mode := range benchModes[:2] {
		b.Run(mode.String(), func(b *testing.B) {
			s := benchSelector(b, mode)
			e := s.Estimator(1)
			b.ReportAllocs()
			for b.Loop() {
				benchHopPerCall(s, e)
			}
		})
	}
}

// BenchmarkClientHopParallel is BenchmarkClientHop from several goroutines
// on one estimator.
func BenchmarkClientHopParallel(b *testing.B) {
	for _, mode := range benchModes[:2] {
		b.Run(mode.String(), func(b *testing.B) {
			s := benchSelector(b, mode)
			e := s.Estimator(1)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchHopPerCall(s, e)
				}
			})
		})
	}
}

func benchHopPerCall(s *Selector, e *Estimator) {
	e.Choose()
	for range hopReads {
		start := time.Now()
		end := time.Now()
		e.ObserveReadAt(end.Sub(start), end)
	}
	s.ObserveHeight(4)
}

// BenchmarkClientHopBatched is the selector's share of the same hop as the
// client feeds it now: ChooseAt with a time it already has, each read timed
// by two monotonic clock reads (time.Since of a base, one clock read each
// where time.Now takes two), one ObserveReadsAt for the hop's reads and an
// ObserveHeight of the unchanged height (lock-free).
func BenchmarkClientHopBatched(b *testing.B) {
	for _, mode := range benchModes[:2] {
		b.Run(mode.String(), func(b *testing.B) {
			s := benchSelector(b, mode)
			e := s.Estimator(1)
			base := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				benchHopBatched(s, e, base)
			}
		})
	}
}

// BenchmarkClientHopBatchedParallel is BenchmarkClientHopBatched from
// several goroutines on one estimator.
func BenchmarkClientHopBatchedParallel(b *testing.B) {
	for _, mode := range benchModes[:2] {
		b.Run(mode.String(), func(b *testing.B) {
			s := benchSelector(b, mode)
			e := s.Estimator(1)
			base := time.Now()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchHopBatched(s, e, base)
				}
			})
		})
	}
}

func benchHopBatched(s *Selector, e *Estimator, base time.Time) {
	var lat [hopReads]time.Duration
	end := time.Since(base)
	e.ChooseAt(base.Add(end))
	for r := range lat {
		start := time.Since(base)
		end = time.Since(base)
		lat[r] = end - start
	}
	e.ObserveReadsAt(lat[:], base.Add(end))
	s.ObserveHeight(4)
}
