package locality

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The client's cheap paths (ChooseAt, ObserveReadsAt, ObserveHeight's
// lock-free check) must leave the rule exactly as the one-call-per-event
// methods do: these tests run both side by side on the same samples.

// readSamples returns n read latencies around 12µs with outliers (some far
// enough to reset the history) and the odd non-positive one.
func readSamples(r *rand.Rand, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		x := time.Duration(11_000 + r.IntN(2_000))
		switch v := r.IntN(100); {
		case v < 3:
			x *= 20 // an outlier
		case v < 4:
			x = -x
		case v < 5:
			x = 0
		}
		if i%500 >= 400 {
			x *= 3 // a level shift: drops outnumber keeps, history reset
		}
		out[i] = x
	}
	return out
}

func TestObserveReadsAtMatchesObserveReadAt(t *testing.T) {
	seq, _ := mustSelector(t, Options{})
	bat, _ := mustSelector(t, Options{})
	es, eb := seq.Estimator(1), bat.Estimator(1)
	for _, e := range []*Estimator{es, eb} {
		fillServer(e, 40*us, 20)
	}
	r := rand.New(rand.NewPCG(7, 7))
	samples := readSamples(r, 20_000)
	now := time.Unix(1_000_000, 0)
	for i := 0; i < len(samples); {
		batch := samples[i:min(i+r.IntN(9), len(samples))] // 0 to 8 reads per hop
		i += len(batch)
		now = now.Add(time.Duration(len(batch)) * 13 * us)
		for _, l := range batch {
			es.ObserveReadAt(l, now)
		}
		eb.ObserveReadsAt(batch, now)
		if a, b := es.Snapshot(), eb.Snapshot(); a.LR != b.LR || a.RTT != b.RTT {
			t.Fatalf("after %d samples: one by one l_r %+v rtt %v; batched %+v rtt %v", i, a.LR, a.RTT, b.LR, b.RTT)
		}
		if a, b := es.ChooseAt(now), eb.ChooseAt(now); a != b {
			t.Fatalf("after %d samples: one by one chose %+v, batched %+v", i, a, b)
		}
	}
	if snap := eb.Snapshot(); snap.LR.Resets == 0 || snap.LR.Dropped == 0 {
		t.Errorf("samples exercised neither outliers nor resets: %+v", snap.LR)
	}
}

func TestChooseAtMatchesChoose(t *testing.T) {
	for _, mode := range benchModes {
		t.Run(mode.String(), func(t *testing.T) {
			a, clkA := mustSelector(t, Options{Mode: mode, Explore: 0.2})
			b, clkB := mustSelector(t, Options{Mode: mode, Explore: 0.2})
			ea, eb := a.Estimator(3), b.Estimator(3)
			for i := range 5000 {
				if i%100 == 0 {
					for _, e := range []*Estimator{ea, eb} {
						e.ObserveRead(time.Duration(10_000 + i))
						e.ObserveServer(time.Duration(14_000+3*i), 0, 0)
					}
				}
				if i%1000 == 999 { // long idle: history discarded
					clkA.Advance(4 * time.Second)
					clkB.Advance(4 * time.Second)
				}
				ca, cb := ea.Choose(), eb.ChooseAt(clkB.Now())
				if ca != cb {
					t.Fatalf("choice %d: Choose %+v, ChooseAt %+v", i, ca, cb)
				}
			}
			sa, sb := ea.Snapshot(), eb.Snapshot()
			if sa.Decisions != sb.Decisions || sa.IdleResets != sb.IdleResets || sa.IdleResets != 5 {
				t.Errorf("Choose: %+v, %d idle resets; ChooseAt: %+v, %d", sa.Decisions, sa.IdleResets, sb.Decisions, sb.IdleResets)
			}
		})
	}
}

// TestUseMarkNeverMovesBack: a time read before another user's later one
// (a concurrent operation's start) does not make the connection look idle
// for longer than it was.
func TestUseMarkNeverMovesBack(t *testing.T) {
	s, clk := mustSelector(t, Options{Explore: -1})
	e := s.Estimator(1)
	early := clk.Now()
	clk.Advance(2 * time.Second)
	fillServer(e, 30*us, 5) // used at early+2s
	e.ChooseAt(early)       // an op that started at early
	clk.Advance(2 * time.Second)
	e.Choose() // 2s after the last use, 4s after early
	if snap := e.Snapshot(); snap.IdleResets != 0 || snap.LS.Samples != 5 {
		t.Errorf("history discarded after 2s of idleness: %+v", snap)
	}
}

// TestObserveHeightFastPathExact: m equals the mean of the last n heights
// after every call, through long runs of one height (the lock-free path)
// and changes.
func TestObserveHeightFastPathExact(t *testing.T) {
	s, _ := mustSelector(t, Options{Window: 10, MinSamples: 2})
	r := rand.New(rand.NewPCG(3, 4))
	var all []int
	h := 4
	sawUniform := false
	for i := range 5000 {
		if r.IntN(30) == 0 {
			h = 1 + r.IntN(6)
		}
		x := h
		if r.IntN(200) == 0 {
			x = 0 // ignored
		}
		s.ObserveHeight(x)
		if x >= 1 {
			all = append(all, x)
		}
		last := all[max(0, len(all)-10):]
		sum := 0
		for _, v := range last {
			sum += v
		}
		if want := float64(sum) / float64(len(last)); s.M() != want {
			t.Fatalf("call %d: m = %v, want %v (last heights %v)", i, s.M(), want, last)
		}
		sawUniform = sawUniform || s.uniform.Load() != 0
	}
	if !sawUniform {
		t.Errorf("no run of 10 equal heights took the lock-free path")
	}
}

// TestObserveHeightConcurrent: goroutines observing the same height (the
// lock-free path) race with ones observing others; afterwards the published
// m and the uniform mark agree with the window.
func TestObserveHeightConcurrent(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for i := range 20_000 {
				h := 5
				if g == 0 && i%1000 < 50 {
					h = 3 + r.IntN(4)
				}
				s.ObserveHeight(h)
				if m := s.M(); m < 3 || m > 6 {
					t.Errorf("m = %v outside the heights observed", m)
					return
				}
			}
		})
	}
	wg.Wait()
	s.heightMu.Lock()
	defer s.heightMu.Unlock()
	w := &s.heightMu.heights
	if got, want := s.M(), w.mean(); got != want {
		t.Errorf("m = %v, window mean %v", got, want)
	}
	if u := s.uniform.Load(); u != 0 {
		for _, x := range w.buf[:w.n] {
			if x != float64(u) || w.n != len(w.buf) {
				t.Fatalf("uniform mark %d, window %v", u, w.buf[:w.n])
			}
		}
	}
}
