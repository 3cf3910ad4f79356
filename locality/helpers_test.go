package locality

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a manually advanced Clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// mustSelector returns a selector on a fake clock with seed 1 unless opts
// set them.
func mustSelector(t testing.TB, opts Options) (*Selector, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	if opts.Clock == nil {
		opts.Clock = clk
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	s, err := NewSelector(opts)
	if err != nil {
		t.Fatalf("NewSelector: %v", err)
	}
	return s, clk
}

const us = time.Microsecond

// fill offers each latency to server id's l_s (server) or l_r (read)
// estimate, count times.
func fillServer(e *Estimator, lat time.Duration, count int) {
	for range count {
		e.ObserveServer(lat, 0, 0)
	}
}

func fillRead(e *Estimator, lat time.Duration, count int) {
	for range count {
		e.ObserveRead(lat)
	}
}

// countChoices calls Choose n times and returns the decisions.
func countChoices(e *Estimator, n int) Decisions {
	var d Decisions
	for range n {
		d.count(e.Choose())
	}
	return d
}
