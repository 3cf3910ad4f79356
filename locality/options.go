package locality

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of Options, the constants the paper suggests (§2.5).
const (
	DefaultWindow        = 100
	DefaultOutlierK      = 3.0
	DefaultMinSamples    = 10
	DefaultInitialHeight = 5.0
	DefaultExplore       = 0.01
	DefaultIdleTimeout   = 3 * time.Second
)

// Clock tells the selector the time. Implementations must be safe for
// concurrent use and monotonic (time.Now's readings are).
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the wall clock (with its monotonic reading).
var SystemClock Clock = systemClock{}

// Options configure a Selector. The zero value of every field means its
// default; where a feature can be switched off, a negative value does it.
type Options struct {
	// Mode is the policy. Default Adaptive.
	Mode Mode
	// Window is n, the number of recent samples per estimate whose average
	// estimates l_s, l_r and m; it is also the moving period of the
	// outlier reset. Default 100. At least 2.
	Window int
	// OutlierK is K: a sample s with |s − μ| ≥ Kσ is discarded. Default 3.
	// Negative disables outlier rejection (and with it the reset); a
	// positive value must exceed 1 (the paper: "as long as K > 1").
	OutlierK float64
	// MinSamples is how many samples a window must hold before outliers are
	// judged (σ of fewer means little). Default 10. In [2, Window].
	MinSamples int
	// InitialHeight is m, the meganode height in nodes, until the first
	// ObserveHeight. Default 5 (a 64 MiB meganode of 1 KiB nodes).
	InitialHeight float64
	// Explore is p, the probability of choosing the method estimated to be
	// worse. Default 0.01. Negative disables exploration. At most 0.5.
	Explore float64
	// IdleTimeout discards a connection's history when it was not used for
	// this long. Default 3s. Negative disables it.
	IdleTimeout time.Duration
	// Clock is the time source. Default SystemClock.
	Clock Clock
	// Seed seeds the random streams (exploration, ratio mode); each
	// Estimator draws from its own stream derived from Seed and its server
	// ID. Default 0 means a seed drawn at random by EnsureDefaults; set any
	// other value for a reproducible run.
	Seed uint64
	// PaperRule applies the paper's rule as the paper states it: the
	// inequality even for servers whose one-sided reads cost the server
	// CPU (Estimator.SetReadsShareServerCPU), and exploration with
	// probability Explore whatever the rate (MaxExploreRate ignored).
	// Default false: see "Reads that cost the server CPU" and "Exploration
	// by time" in doc.go. Set it to measure the paper's rule side by side
	// with Cell's refinements.
	PaperRule bool
	// IgnoreServerTimes estimates l_s from latencies alone, as the paper
	// does. By default the queueing part of l_s's moving average is
	// replaced by a short average of the latest replies' reports of the
	// server's queueing time, so that a server idle again after a burst
	// is seen within a few replies instead of a window's worth: see
	// "Queue-aware estimate" in doc.go. PaperRule implies it.
	IgnoreServerTimes bool
	// MaxExploreRate caps the exploring choices per second on one server
	// connection (a token bucket holding at most one second's worth): p
	// of a fast connection's hops is far more samples than the window
	// needs, and each costs a round trip through the slower path.
	// Default 2·Window per second (the window refreshed twice a second).
	// Negative: no cap.
	MaxExploreRate float64
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.OutlierK == 0 {
		o.OutlierK = DefaultOutlierK
	}
	if o.MinSamples == 0 {
		o.MinSamples = min(DefaultMinSamples, o.Window)
	}
	if o.InitialHeight == 0 {
		o.InitialHeight = DefaultInitialHeight
	}
	if o.Explore == 0 {
		o.Explore = DefaultExplore
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxExploreRate == 0 {
		o.MaxExploreRate = 2 * float64(o.Window)
	}
	if o.Clock == nil {
		o.Clock = SystemClock
	}
	for o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
}

// Validate reports whether the options (after EnsureDefaults) are usable.
func (o *Options) Validate() error {
	if err := o.Mode.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if o.Window < 2 {
		return fmt.Errorf("%w: window %d < 2", ErrInvalidOptions, o.Window)
	}
	if math.IsNaN(o.OutlierK) || (o.OutlierK >= 0 && o.OutlierK <= 1) || math.IsInf(o.OutlierK, 1) {
		return fmt.Errorf("%w: outlier K %v must be > 1 and finite, or negative to disable", ErrInvalidOptions, o.OutlierK)
	}
	if o.MinSamples < 2 || o.MinSamples > o.Window {
		return fmt.Errorf("%w: min samples %d not in [2, window %d]", ErrInvalidOptions, o.MinSamples, o.Window)
	}
	if math.IsNaN(o.InitialHeight) || math.IsInf(o.InitialHeight, 0) || o.InitialHeight < 1 {
		return fmt.Errorf("%w: initial height %v < 1", ErrInvalidOptions, o.InitialHeight)
	}
	if math.IsNaN(o.MaxExploreRate) || math.IsInf(o.MaxExploreRate, 0) {
		return fmt.Errorf("%w: explore rate %v", ErrInvalidOptions, o.MaxExploreRate)
	}
	if math.IsNaN(o.Explore) || o.Explore > 0.5 {
		return fmt.Errorf("%w: explore probability %v > 0.5", ErrInvalidOptions, o.Explore)
	}
	if o.Clock == nil {
		return fmt.Errorf("%w: nil clock", ErrInvalidOptions)
	}
	return nil
}
