package sim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestEventQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cmp := func(a, b event) int {
		if a.before(&b) {
			return -1
		}
		if b.before(&a) {
			return 1
		}
		return 0
	}
	var q eventQueue
	var want []event // the oracle, kept sorted
	pop := func() {
		if got := q.pop(); got != want[0] {
			t.Fatalf("pop %+v, want %+v", got, want[0])
		}
		want = want[1:]
	}
	for i := range 5000 {
		ev := event{at: time.Duration(r.IntN(300)), ref: int32(i)}
		q.push(ev)
		ev.seq = q.seq
		at, _ := slices.BinarySearchFunc(want, ev, cmp)
		want = slices.Insert(want, at, ev)
		if i%3 == 0 { // interleave pops with pushes
			pop()
		}
	}
	for len(want) > 0 {
		pop()
	}
	if q.len() != 0 {
		t.Fatalf("%d events left", q.len())
	}
}

func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var h histogram
	var xs []time.Duration
	for range 20000 {
		x := time.Duration(r.ExpFloat64() * 50_000)
		xs = append(xs, x)
		h.add(x)
	}
	slices.Sort(xs)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := xs[int(q*float64(len(xs)))-1]
		got := h.quantile(q)
		if d := float64(got-want) / float64(want); d < -0.02 || d > 0.02 {
			t.Errorf("q%.2f = %v, want %v ± 2%%", q, got, want)
		}
	}
	var small histogram
	for _, v := range []time.Duration{3, 3, 7, 100} {
		small.add(v)
	}
	if small.quantile(0.5) != 3 || small.quantile(0.75) != 7 {
		t.Errorf("exact small values: p50 %v p75 %v", small.quantile(0.5), small.quantile(0.75))
	}
	var empty histogram
	if empty.quantile(0.5) != 0 {
		t.Error("quantile of an empty histogram is not 0")
	}
	small.merge(&h)
	if small.n != 20004 {
		t.Errorf("merged count %d", small.n)
	}
	for v := uint64(0); v < 1<<20; v += 997 {
		if lo, mid := bucketOf(v), bucketMid(bucketOf(v)); bucketOf(mid) != lo {
			t.Fatalf("bucket %d of %d: midpoint %d falls in bucket %d", lo, v, mid, bucketOf(mid))
		}
	}
}

func TestParamsValidate(t *testing.T) {
	bad := []struct {
		name string
		run  func() error
	}{
		{"cores", func() error {
			_, err := RunClosedLoop(Model{Cores: -1}, ClosedLoop{}, mustMode(t, "server"))
			return err
		}},
		{"jitter", func() error {
			_, err := RunClosedLoop(Model{Jitter: 1}, ClosedLoop{}, mustMode(t, "server"))
			return err
		}},
		{"net jitter", func() error {
			_, err := RunClosedLoop(Model{NetJitter: -time.Microsecond}, ClosedLoop{}, mustMode(t, "server"))
			return err
		}},
		{"clients", func() error {
			_, err := RunClosedLoop(Model{}, ClosedLoop{Clients: -2}, mustMode(t, "server"))
			return err
		}},
		{"duration", func() error {
			_, err := RunClosedLoop(Model{}, ClosedLoop{Duration: time.Nanosecond}, mustMode(t, "server"))
			return err
		}},
		{"selector", func() error {
			m := Model{}
			m.Selector.Window = 1
			_, err := RunClosedLoop(m, ClosedLoop{}, mustMode(t, "server"))
			return err
		}},
		{"table cores", func() error { _, err := (Table2{MinCores: 3, MaxCores: 2}).Run(); return err }},
		{"table step", func() error { _, err := (Table2{RatioStep: 120}).Run(); return err }},
		{"spike resolution", func() error { _, err := (Spike{Resolution: 3 * time.Second}).Run(); return err }},
		{"spike phases", func() error { _, err := (Spike{Before: -time.Second}).Run(); return err }},
	}
	for _, tt := range bad {
		if err := tt.run(); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: %v, want ErrInvalidParams", tt.name, err)
		}
	}
}

func TestTable2Ratios(t *testing.T) {
	tb := Table2{RatioStep: 5}
	if got := tb.ratios(); len(got) != 19 || got[0] != 5 || got[18] != 95 {
		t.Errorf("ratios %v, want 5..95", got)
	}
	tb.RatioStep = 30
	if got := tb.ratios(); !slices.Equal(got, []float64{30, 60, 90}) {
		t.Errorf("ratios %v, want 30 60 90", got)
	}
}
