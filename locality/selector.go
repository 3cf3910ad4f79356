package locality

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Selector is one client's locality selector: its options, the running
// average meganode height m, and an Estimator per server connection. It is
// safe for concurrent use.
type Selector struct {
	opts             Options
	exploreThreshold uint64 // probThreshold(opts.Explore)

	m atomic.Uint64 // float64 bits of the current m
	// uniform is h while the last Window heights were all h, else 0: then
	// m = h and observing h again changes nothing, which ObserveHeight
	// checks without the lock (a client observes a height per hop, nearly
	// always the same one).
	uniform atomic.Int64

	heightMu struct {
		sync.Mutex
		heights window // last Window meganode heights
		// run is the number of equal heights ending with the newest,
		// capped at Window.
		run int
	}

	mu struct {
		sync.RWMutex
		ests    map[ServerID]*Estimator
		retired Decisions // decisions of removed estimators
		// retiredPages: range page decisions of removed estimators
		retiredPages Decisions
	}
}

// NewSelector returns a selector with opts, after EnsureDefaults and
// Validate. The error wraps ErrInvalidOptions.
func NewSelector(opts Options) (*Selector, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Selector{opts: opts}
	s.exploreThreshold = probThreshold(opts.Explore)
	s.m.Store(math.Float64bits(opts.InitialHeight))
	s.heightMu.heights = newWindow(opts.Window)
	s.mu.ests = make(map[ServerID]*Estimator)
	return s, nil
}

// Options returns the options in effect (with defaults filled in).
func (s *Selector) Options() Options { return s.opts }

// Mode returns the selector's policy.
func (s *Selector) Mode() Mode { return s.opts.Mode }

// Estimator returns the estimator of server id, creating it on first use.
// A connection may keep it to skip the lookup on every call.
func (s *Selector) Estimator(id ServerID) *Estimator {
	s.mu.RLock()
	e := s.mu.ests[id]
	s.mu.RUnlock()
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e = s.mu.ests[id]; e == nil {
		e = newEstimator(s, id)
		s.mu.ests[id] = e
	}
	return e
}

// Remove forgets server id's estimator (its connection closed), keeping its
// decision counts in the totals. The removed Estimator must not be used
// afterwards; the next use of id starts a fresh one.
func (s *Selector) Remove(id ServerID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.mu.ests[id]
	if e == nil {
		return
	}
	delete(s.mu.ests, id)
	e.mu.Lock()
	s.mu.retired.add(e.mu.dec)
	s.mu.retiredPages.add(e.mu.pageDec)
	e.mu.Unlock()
}

// Choose decides how to run the next meganode hop on server id.
func (s *Selector) Choose(id ServerID) Choice { return s.Estimator(id).Choose() }

// ObserveServer records a server-side search on server id; see
// Estimator.ObserveServer.
func (s *Selector) ObserveServer(id ServerID, latency, queueTime, serviceTime time.Duration) {
	s.Estimator(id).ObserveServer(latency, queueTime, serviceTime)
}

// ObserveRead records a one-sided read from server id; see
// Estimator.ObserveRead.
func (s *Selector) ObserveRead(id ServerID, latency time.Duration) {
	s.Estimator(id).ObserveRead(latency)
}

// ObserveHeight records the height, in nodes, of a meganode traversed (as
// the server reports it or a client-side traversal finds it); m becomes the
// average of the last Window heights. Heights below 1 are ignored.
func (s *Selector) ObserveHeight(h int) {
	if h < 1 || s.uniform.Load() == int64(h) {
		return
	}
	x := float64(h)
	s.heightMu.Lock()
	w := &s.heightMu.heights
	if w.n > 0 && w.newest() == x {
		s.heightMu.run = min(s.heightMu.run+1, len(w.buf))
	} else {
		s.heightMu.run = 1
	}
	w.push(x)
	s.m.Store(math.Float64bits(w.mean()))
	if s.heightMu.run == len(w.buf) {
		s.uniform.Store(int64(h))
	} else {
		s.uniform.Store(0)
	}
	s.heightMu.Unlock()
}

// M returns the current estimate of m, the number of reads of a
// client-side meganode traversal.
func (s *Selector) M() float64 { return math.Float64frombits(s.m.Load()) }
