package locality

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestOptionsDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	want := Options{
		Window: 100, OutlierK: 3, MinSamples: 10, InitialHeight: 5,
		Explore: 0.01, IdleTimeout: 3 * time.Second, Clock: SystemClock, Seed: o.Seed,
		MaxExploreRate: 200,
	}
	if o != want {
		t.Errorf("defaults = %+v, want %+v", o, want)
	}
	if o.Seed == 0 {
		t.Error("default seed is 0, want a random one")
	}
	small := Options{Window: 4}
	small.EnsureDefaults()
	if small.MinSamples != 4 {
		t.Errorf("min samples with window 4 = %d, want 4", small.MinSamples)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Options)
	}{
		{"mode", func(o *Options) { o.Mode = RatioMode(120) }},
		{"window", func(o *Options) { o.Window = 1 }},
		{"K ≤ 1", func(o *Options) { o.OutlierK = 1 }},
		{"K NaN", func(o *Options) { o.OutlierK = math.NaN() }},
		{"min samples", func(o *Options) { o.MinSamples = 101 }},
		{"height", func(o *Options) { o.InitialHeight = 0.5 }},
		{"explore", func(o *Options) { o.Explore = 0.6 }},
		{"clock", func(o *Options) { o.Clock = nil }},
	}
	for _, tt := range tests {
		o := Options{}
		o.EnsureDefaults()
		tt.mod(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidOptions", tt.name, err)
		}
	}
	o := Options{Mode: RatioMode(120)}
	if _, err := NewSelector(o); !errors.Is(err, ErrInvalidOptions) || !errors.Is(err, ErrInvalidMode) {
		t.Errorf("NewSelector with a bad mode: %v, want ErrInvalidOptions wrapping ErrInvalidMode", err)
	}
	// Negative values switch features off and are valid.
	o = Options{OutlierK: -1, Explore: -1, IdleTimeout: -1}
	if _, err := NewSelector(o); err != nil {
		t.Errorf("disabled features: %v", err)
	}
}
