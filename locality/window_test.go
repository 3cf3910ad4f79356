package locality

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestWindowMatchesExact compares the incremental sums with an exact
// recomputation after many pushes of values of very different scales.
func TestWindowMatchesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	w := newWindow(100)
	var all []float64
	for i := range 100_037 {
		x := r.Float64() * 1e4
		if i%7 == 0 {
			x *= 1e6
		}
		w.push(x)
		all = append(all, x)
	}
	last := all[len(all)-100:]
	var sum, sq float64
	for _, x := range last {
		sum += x
		sq += x * x
	}
	mu := sum / 100
	sd := math.Sqrt(sq/100 - mu*mu)
	if math.Abs(w.mean()-mu) > 1e-9*mu || math.Abs(w.stddev()-sd) > 1e-6*sd {
		t.Errorf("mean %v σ %v, want %v %v", w.mean(), w.stddev(), mu, sd)
	}
	w.reset()
	if w.mean() != 0 || w.stddev() != 0 || w.n != 0 {
		t.Errorf("after reset: mean %v σ %v n %d", w.mean(), w.stddev(), w.n)
	}
}

func TestVerdicts(t *testing.T) {
	v := newVerdicts(4)
	for i, tt := range []struct {
		drop, tooMany bool
	}{
		{false, false}, {true, false}, {true, true}, // 2 drops > 1 keep
		{false, false}, // 2 drops, 2 keeps
		{false, false}, // evicts a keep: 2 drops, 2 keeps
		{false, false}, // evicts a drop: 1 drop
		{true, false},  // evicts a drop: 1 drop, 3 keeps
	} {
		if got := v.record(tt.drop); got != tt.tooMany {
			t.Fatalf("record %d (%v) = %v, want %v", i, tt.drop, got, tt.tooMany)
		}
	}
}
