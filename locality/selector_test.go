package locality

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestColdStart(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	e := s.Estimator(1)
	// No l_s: the server side gives it its first sample.
	for range 3 {
		if c := e.Choose(); c != (Choice{Method: ServerSide}) {
			t.Fatalf("cold: %+v, want server", c)
		}
	}
	e.ObserveServer(30*us, 0, 0)
	// l_s but no l_r: the client side.
	for range 3 {
		if c := e.Choose(); c != (Choice{Method: ClientSide}) {
			t.Fatalf("without l_r: %+v, want client", c)
		}
	}
	e.ObserveRead(10 * us)
	// Both known: the rule (30−10 ≥ 5·0 → client).
	if c := e.Choose(); c.Method != ClientSide {
		t.Fatalf("warm: %+v, want client", c)
	}
	if d := e.Snapshot().Decisions; d.Explore != 0 {
		t.Errorf("cold-start choices counted as exploration: %+v", d)
	}
}

func TestDeterministicWithSeed(t *testing.T) {
	run := func() []Choice {
		s, _ := mustSelector(t, Options{Seed: 42, Explore: 0.3})
		e := s.Estimator(9)
		e.ObserveRead(10 * us)
		fillRead(e, 12*us, 20)
		fillServer(e, 15*us, 20)
		out := make([]Choice, 1000)
		for i := range out {
			out[i] = e.Choose()
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("choice %d differs between runs with the same seed: %+v vs %+v", i, a[i], b[i])
		}
	}
}

func TestSnapshotAndRemove(t *testing.T) {
	s, _ := mustSelector(t, Options{Mode: Mode{Kind: ServerOnly}})
	for _, id := range []ServerID{7, 3, 5} {
		countChoices(s.Estimator(id), int(id))
		s.ObserveServer(id, 20*us, 3*us, 6*us)
		s.ObserveRead(id, 12*us)
	}
	s.ObserveHeight(4)
	snap := s.Snapshot()
	if snap.M != 4 || snap.Mode.Kind != ServerOnly || len(snap.Servers) != 3 {
		t.Fatalf("snapshot %+v", snap)
	}
	for i, want := range []ServerID{3, 5, 7} {
		es := snap.Servers[i]
		if es.Server != want || es.Decisions.Server != uint64(want) || es.LS.Mean != 20*us ||
			es.QueueTime != 3*us || es.ServiceTime != 6*us || es.RTT != 12*us || es.LR.Observed != 1 {
			t.Errorf("servers[%d] = %+v", i, es)
		}
	}
	if snap.Decisions != (Decisions{Server: 15}) {
		t.Errorf("totals %+v, want 15 server", snap.Decisions)
	}
	s.Remove(5)
	s.Remove(99) // unknown: no-op
	snap = s.Snapshot()
	if len(snap.Servers) != 2 || snap.Decisions != (Decisions{Server: 15}) {
		t.Errorf("after Remove: %d servers, totals %+v; want 2 and 15 kept", len(snap.Servers), snap.Decisions)
	}
	if e := s.Estimator(5); e.Snapshot().LS.Samples != 0 {
		t.Error("Estimator after Remove kept the old history")
	}
}

// TestConcurrentUse runs every method from several goroutines; run it with
// -race. The decision totals must add up exactly.
func TestConcurrentUse(t *testing.T) {
	s, clk := mustSelector(t, Options{})
	const goroutines, perG = 8, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range perG {
				id := ServerID(r.IntN(4))
				var c Choice
				if g%2 == 0 {
					c = s.Choose(id)
				} else {
					c = s.Estimator(id).ChooseAt(clk.Now())
				}
				switch c.Method {
				case ServerSide:
					s.ObserveServer(id, time.Duration(15_000+r.IntN(10_000)), 1000, 6000)
				case ClientSide:
					if g%2 == 0 {
						for range 5 {
							s.ObserveRead(id, time.Duration(10_000+r.IntN(5_000)))
						}
						break
					}
					var reads [5]time.Duration
					for j := range reads {
						reads[j] = time.Duration(10_000 + r.IntN(5_000))
					}
					s.Estimator(id).ObserveReadsAt(reads[:], clk.Now())
				}
				s.ObserveHeight(4 + r.IntN(3))
				if i%500 == 0 {
					_ = s.Snapshot()
					clk.Advance(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	snap := s.Snapshot()
	if got := snap.Decisions.Total(); got != goroutines*perG {
		t.Errorf("decisions %d, want %d", got, goroutines*perG)
	}
	if m := snap.M; m < 4 || m > 6 {
		t.Errorf("m = %v, want in [4, 6]", m)
	}
}

func TestNoAllocations(t *testing.T) {
	s, _ := mustSelector(t, Options{})
	e := s.Estimator(1)
	e.ObserveRead(10 * us)
	fillServer(e, 20*us, 20)
	now := time.Unix(1_000_000, 0)
	reads := []time.Duration{12 * us, 13 * us, 11 * us}
	checks := []struct {
		name string
		f    func()
	}{
		{"Selector.Choose", func() { s.Choose(1) }},
		{"Estimator.Choose", func() { e.Choose() }},
		{"Selector.ObserveServer", func() { s.ObserveServer(1, 20*us, us, 5*us) }},
		{"Estimator.ObserveServerAt", func() { e.ObserveServerAt(20*us, us, 5*us, now) }},
		{"Estimator.ChooseAt", func() { e.ChooseAt(now) }},
		{"Estimator.ObserveRead", func() { e.ObserveRead(12 * us) }},
		{"Estimator.ObserveReadsAt", func() { e.ObserveReadsAt(reads, now) }},
		{"Selector.ObserveHeight", func() { s.ObserveHeight(5) }},
		{"Selector.ObserveHeight, changing", func() { s.ObserveHeight(4 + int(now.UnixNano()&1)); now = now.Add(1) }},
	}
	for _, c := range checks {
		if n := testing.AllocsPerRun(1000, c.f); n != 0 {
			t.Errorf("%s allocates %v times per call, want 0", c.name, n)
		}
	}
}

// TestOutliersJudgedAfterMinSamples: the first MinSamples samples after a
// reset are all kept, however far apart.
func TestOutliersJudgedAfterMinSamples(t *testing.T) {
	s, _ := mustSelector(t, Options{MinSamples: 4})
	e := s.Estimator(1)
	for _, lat := range []time.Duration{10 * us, 11 * us, 500 * us, 10 * us} {
		e.ObserveServer(lat, 0, 0)
	}
	if snap := e.Snapshot(); snap.LS.Dropped != 0 || snap.LS.Samples != 4 {
		t.Fatalf("warm-up samples: %+v, want 4 kept", snap.LS)
	}
	for range 20 {
		e.ObserveServer(10*us, 0, 0)
	}
	e.ObserveServer(2*time.Millisecond, 0, 0)
	if snap := e.Snapshot(); snap.LS.Dropped != 1 {
		t.Errorf("after warm-up: %+v, want the 2ms sample dropped", snap.LS)
	}
}

// TestRatioSpreadEvenly: ratio=P sends server-side exactly every 100/P
// searches when that is whole, from any starting phase.
func TestRatioSpreadEvenly(t *testing.T) {
	for seed := range uint64(5) {
		s, _ := mustSelector(t, Options{Mode: RatioMode(25), Seed: seed + 1})
		e := s.Estimator(ServerID(seed))
		last := -1
		for i := range 400 {
			if e.Choose().Method != ServerSide {
				continue
			}
			if last >= 0 && i-last != 4 {
				t.Fatalf("seed %d: server-side searches %d and %d, want every 4th", seed, last, i)
			}
			last = i
		}
	}
}

// TestReadsShareServerCPU: a server whose one-sided reads cost its CPU is
// searched server-side in adaptive mode, even when the paper's inequality
// would choose client-side; Options.PaperRule restores the paper's rule.
func TestReadsShareServerCPU(t *testing.T) {
	for _, paper := range []bool{false, true} {
		s, err := NewSelector(Options{Seed: 1, Explore: -1, PaperRule: paper})
		if err != nil {
			t.Fatal(err)
		}
		e := s.Estimator(1)
		e.SetReadsShareServerCPU(true)
		// A loaded server: l_s far above m·l_r.
		for i := 0; i < 50; i++ {
			e.ObserveServer(500*time.Microsecond, 480*time.Microsecond, 5*time.Microsecond)
			e.ObserveRead(16 * time.Microsecond)
		}
		got := e.Choose().Method
		want := ServerSide
		if paper {
			want = ClientSide
		}
		if got != want {
			t.Errorf("PaperRule=%v: chose %v, want %v", paper, got, want)
		}
		e.SetReadsShareServerCPU(false)
		if got := e.Choose().Method; got != ClientSide {
			t.Errorf("PaperRule=%v, reads spare the CPU: chose %v, want client-side", paper, got)
		}
	}
}
