package locality

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// ServerID names a server connection, e.g. a node ID from the region table.
type ServerID uint64

// Estimator holds the estimates of one server connection and makes the
// choice for searches on it. Get one from Selector.Estimator; it is safe for
// concurrent use and stays valid until Selector.Remove of its ID.
type Estimator struct {
	sel *Selector
	id  ServerID

	mu struct {
		sync.Mutex
		ls      estimate // server-side search latency
		lr      estimate // one-sided read latency
		queue   window   // server-reported queueing time, parallel to ls's window
		service window   // server-reported service time, parallel to ls's window
		// qFresh is a short moving average (freshQueueSamples) of the
		// server-reported queueing time over every reply, outliers
		// included; qFreshN counts the replies in it.
		qFresh  float64
		qFreshN int
		rtt     float64 // lowest read latency seen, ns; +Inf when none
		last    time.Time
		rng     rand.PCG
		credit  float64 // Ratio mode: server-side credit in percent, in [0, 100)
		// tokens and tokensAt: the exploration bucket (MaxExploreRate),
		// tokens at time tokensAt.
		tokens   float64
		tokensAt time.Time
		dec      Decisions
		idle     uint64 // histories discarded for idleness
		// sharedCPU: this server's one-sided reads are served by its CPU
		// (a software provider), not by a NIC.
		sharedCPU bool
		// Range pages (page.go): the cost per pair of server-side and
		// client-side pages, the pages' ratio credit, exploration bucket
		// and decisions.
		ps, pc     estimate
		pageCredit float64
		pageTokens pageBucket
		// pageExploredAt: the last exploring page (or the first
		// decision with both estimates known).
		pageExploredAt time.Time
		pageDec        Decisions
		// hopExploredAt: the last exploring hop (or the first decision
		// with both estimates known).
		hopExploredAt time.Time
	}
}

// SetReadsShareServerCPU records whether one-sided reads from this server
// are served by the server's own CPU (rdma.Caps.SparesServerCPU false: the
// TCP stand-in) rather than by hardware that spares it (shm, RDMA NICs).
// In adaptive mode, unless Options.PaperRule, such a server is always
// searched server-side: see "Reads that cost the server CPU" in doc.go.
func (e *Estimator) SetReadsShareServerCPU(v bool) {
	e.mu.Lock()
	e.mu.sharedCPU = v
	e.mu.Unlock()
}

func newEstimator(s *Selector, id ServerID) *Estimator {
	n := s.opts.Window
	e := &Estimator{sel: s, id: id}
	e.mu.ls = newEstimate(n)
	e.mu.lr = newEstimate(n)
	e.mu.queue = newWindow(n)
	e.mu.service = newWindow(n)
	e.mu.ps = newEstimate(n)
	e.mu.pc = newEstimate(n)
	e.mu.rtt = math.Inf(1)
	// The PCG stream is a function of the selector's seed and the ID only,
	// so runs with the same seed draw the same numbers per connection.
	e.mu.rng.Seed(s.opts.Seed, uint64(id)^0x9e3779b97f4a7c15)
	// A random phase, so that connections with the same ratio do not all
	// send their server-side searches at the same moments.
	e.mu.credit = float64(draw(e.mu.rng.Uint64())) / (1 << 53) * 100
	e.mu.pageCredit = e.mu.credit
	return e
}

// ID returns the server the estimator belongs to.
func (e *Estimator) ID() ServerID { return e.id }

// Choose decides how to run the next meganode hop on this connection and
// counts the decision. It does not allocate.
func (e *Estimator) Choose() Choice { return e.ChooseAt(e.sel.opts.Clock.Now()) }

// ChooseAt is Choose at now, a recent time from Options.Clock: a caller
// that has just read the clock (at the start of its operation, or at the
// end of its last one-sided read) passes that reading and saves a clock
// read per hop. The time only marks the connection as used (see
// Options.IdleTimeout); the decision is the same.
func (e *Estimator) ChooseAt(now time.Time) Choice {
	e.mu.Lock()
	e.touchLocked(now)
	c := e.chooseLocked(now)
	e.mu.dec.count(c)
	e.mu.Unlock()
	return c
}

// fixedChoice is the method the selector's mode forces, if it is not
// adaptive. Ratio mode spreads evenly: every decision earns ServerPercent
// of *credit, and a full 100 buys a server-side one.
func (s *Selector) fixedChoice(credit *float64) (Choice, bool) {
	switch s.opts.Mode.Kind {
	case ServerOnly:
		return Choice{Method: ServerSide}, true
	case ClientOnly:
		return Choice{Method: ClientSide}, true
	case Ratio:
		if *credit += s.opts.Mode.ServerPercent; *credit >= 100 {
			*credit -= 100
			return Choice{Method: ServerSide}, true
		}
		return Choice{Method: ClientSide}, true
	}
	return Choice{}, false
}

// chooseLocked applies the selector's mode.
// REQUIRES: e.mu held.
func (e *Estimator) chooseLocked(now time.Time) Choice {
	s := e.sel
	if c, fixed := s.fixedChoice(&e.mu.credit); fixed {
		return c
	}
	// Adaptive. The paper's rule models the server's CPU queue and its
	// NIC's read queue as independent (§2.5: "We assume that Q_s and Q_r
	// are independent of each other"). When one-sided reads are served by
	// the server's CPU the two queues are one, and a client-side search
	// puts m node reads and a record read on it, each costing about as
	// much CPU as a whole server-side search: the server-side search is
	// never the worse choice, and exploring the other one only wastes
	// server CPU.
	if e.mu.sharedCPU && !s.opts.PaperRule {
		return Choice{Method: ServerSide}
	}
	// Cold start: get each estimate its first sample.
	if e.mu.ls.win.n == 0 {
		return Choice{Method: ServerSide}
	}
	if e.mu.lr.win.n == 0 {
		return Choice{Method: ClientSide}
	}
	m := s.M()
	best := ClientSide
	if e.serverBetterLocked(m) {
		best = ServerSide
	}
	if s.exploreThreshold == 0 {
		return Choice{Method: best}
	}
	thr := s.exploreThreshold
	if !s.opts.PaperRule {
		thr = e.hopExploreThresholdLocked(thr, m, best)
	}
	if draw(e.mu.rng.Uint64()) < thr && e.exploreTokenLocked(now) {
		e.mu.hopExploredAt = now
		return Choice{Method: best.other(), Explore: true}
	}
	if !s.opts.PaperRule && !e.mu.hopExploredAt.IsZero() && now.Sub(e.mu.hopExploredAt) >= hopExploreInterval {
		e.mu.hopExploredAt = now
		return Choice{Method: best.other(), Explore: true}
	}
	if e.mu.hopExploredAt.IsZero() {
		e.mu.hopExploredAt = now
	}
	return Choice{Method: best}
}

// hopExploreInterval is the longest a connection goes without exploring
// a hop (with exploration on and both estimates known).
const hopExploreInterval = time.Second

// hopExploreThresholdLocked is the exploration threshold thr for a hop
// whose best method is best: while client-side hops are the cheaper,
// scaled by their cost (m reads of l_r each) over a server-side hop's
// (l_s), so that exploring the server spends about p of the hops' time
// (see "Exploration by cost" in doc.go); while server-side hops are the
// cheaper, thr as it is.
// REQUIRES: e.mu held, both windows non-empty.
func (e *Estimator) hopExploreThresholdLocked(thr uint64, m float64, best Method) uint64 {
	if best == ServerSide {
		return thr
	}
	lo, hi := m*e.mu.lr.win.mean(), e.serverLatencyLocked()
	if hi <= 0 || lo >= hi {
		return thr
	}
	return uint64(float64(thr) * max(lo, 0) / hi)
}

// exploreTokenLocked takes a token from the exploration bucket, if it
// holds one: tokens accrue at MaxExploreRate per second up to one
// second's worth (see "Exploration by time" in doc.go). Without a cap, or
// with PaperRule, every draw explores.
// REQUIRES: e.mu held.
func (e *Estimator) exploreTokenLocked(now time.Time) bool {
	o := &e.sel.opts
	if o.PaperRule || o.MaxExploreRate < 0 {
		return true
	}
	if e.mu.tokensAt.IsZero() {
		e.mu.tokens, e.mu.tokensAt = o.MaxExploreRate, now
	} else if dt := now.Sub(e.mu.tokensAt); dt > 0 {
		e.mu.tokens = min(o.MaxExploreRate, e.mu.tokens+dt.Seconds()*o.MaxExploreRate)
		e.mu.tokensAt = now
	}
	if e.mu.tokens < 1 {
		return false
	}
	e.mu.tokens--
	return true
}

// serverBetterLocked is the paper's inequality (l_s − RTT) < m·(l_r − RTT),
// with l_s the queue-aware estimate unless the options say otherwise.
// REQUIRES: e.mu held, both windows non-empty (so RTT is known).
func (e *Estimator) serverBetterLocked(m float64) bool {
	rtt := e.mu.rtt
	return e.serverLatencyLocked()-rtt < m*(e.mu.lr.win.mean()-rtt)
}

// freshQueueSamples is the span of the short moving average of the
// server-reported queueing time (an exponential one, α = 2/(n+1)).
const freshQueueSamples = 8

// serverLatencyLocked estimates l_s. The paper's estimate is the moving
// average of the last n kept latencies. Unless Options.IgnoreServerTimes
// (see "Queue-aware estimate" in doc.go), when the latest replies report
// less queueing than the window's replies did on average, the difference
// is taken off: the window's mean latency less its mean reported queueing
// time (round trip, service and network: what does not change when the
// server gets busy) plus the short average of the latest reports. Only
// ever lower: a server getting busy is already seen within a few replies
// (its latencies are outliers of the window, which is soon reset), one
// idle again is not, while the window holds the busy period's latencies.
// REQUIRES: e.mu held, l_s's window non-empty.
func (e *Estimator) serverLatencyLocked() float64 {
	ls := e.mu.ls.win.mean()
	o := &e.sel.opts
	if o.IgnoreServerTimes || o.PaperRule || e.mu.qFreshN == 0 || e.mu.queue.n == 0 {
		return ls
	}
	if q := e.mu.queue.mean(); e.mu.qFresh < q {
		return ls - q + e.mu.qFresh
	}
	return ls
}

// observeQueueLocked feeds a reply's queueing time to the short average.
// REQUIRES: e.mu held.
func (e *Estimator) observeQueueLocked(q time.Duration) {
	x := max(float64(q), 0)
	if e.mu.qFreshN == 0 {
		e.mu.qFresh = x
	} else {
		const alpha = 2.0 / (freshQueueSamples + 1)
		e.mu.qFresh += alpha * (x - e.mu.qFresh)
	}
	e.mu.qFreshN++
}

// ObserveServer records one server-side meganode search on this connection:
// latency as the client measured it, and the queueing and service time the
// server reported in its reply. Non-positive latencies are ignored.
func (e *Estimator) ObserveServer(latency, queueTime, serviceTime time.Duration) {
	if latency <= 0 {
		return
	}
	e.ObserveServerAt(latency, queueTime, serviceTime, e.sel.opts.Clock.Now())
}

// ObserveServerAt is ObserveServer for a search whose reply arrived at now
// (a time from Options.Clock), saving a clock read as ObserveReadAt does.
func (e *Estimator) ObserveServerAt(latency, queueTime, serviceTime time.Duration, now time.Time) {
	if latency <= 0 {
		return
	}
	e.mu.Lock()
	e.touchLocked(now)
	e.observeQueueLocked(queueTime)
	switch e.mu.ls.observe(float64(latency), e.sel.opts.OutlierK, e.sel.opts.MinSamples) {
	case kept:
		e.mu.queue.push(float64(queueTime))
		e.mu.service.push(float64(serviceTime))
	case resetting:
		e.mu.queue.reset()
		e.mu.service.reset()
	}
	e.mu.Unlock()
}

// ObserveRead records the latency of one one-sided read on this connection.
// Non-positive latencies are ignored.
func (e *Estimator) ObserveRead(latency time.Duration) {
	if latency <= 0 {
		return
	}
	e.ObserveReadAt(latency, e.sel.opts.Clock.Now())
}

// ObserveReadAt is ObserveRead for a read that ended at now (a time from
// Options.Clock): callers that timed the read pass its end time and save a
// clock read on the hot path.
func (e *Estimator) ObserveReadAt(latency time.Duration, now time.Time) {
	if latency <= 0 {
		return
	}
	e.mu.Lock()
	e.touchLocked(now)
	e.observeReadLocked(latency)
	e.mu.Unlock()
}

// ObserveReadsAt records the latencies of several one-sided reads on this
// connection, in order, the last of which ended at now (a time from
// Options.Clock): the same as ObserveReadAt for each, taking the lock once.
// A client-side hop collects its reads' latencies and hands them over at
// its end. Non-positive latencies are ignored. latencies is not retained.
func (e *Estimator) ObserveReadsAt(latencies []time.Duration, now time.Time) {
	touched := false
	e.mu.Lock()
	for _, l := range latencies {
		if l <= 0 {
			continue
		}
		if !touched {
			e.touchLocked(now)
			touched = true
		}
		e.observeReadLocked(l)
	}
	e.mu.Unlock()
}

// observeReadLocked offers a read latency (positive) to RTT and l_r.
// REQUIRES: e.mu held.
func (e *Estimator) observeReadLocked(latency time.Duration) {
	x := float64(latency)
	e.mu.rtt = min(e.mu.rtt, x)
	e.mu.lr.observe(x, e.sel.opts.OutlierK, e.sel.opts.MinSamples)
}

// touchLocked discards the history if the connection was idle for the idle
// timeout, and marks it used at now. Callers may pass times read a little
// earlier (ChooseAt, ObserveReadsAt) by concurrent users, so the mark
// never moves back.
// REQUIRES: e.mu held.
func (e *Estimator) touchLocked(now time.Time) {
	if e.mu.last.IsZero() {
		e.mu.last = now
		return
	}
	d := now.Sub(e.mu.last)
	if t := e.sel.opts.IdleTimeout; t > 0 && d >= t {
		e.mu.ls.reset()
		e.mu.lr.reset()
		e.mu.queue.reset()
		e.mu.service.reset()
		e.mu.qFresh, e.mu.qFreshN = 0, 0
		e.mu.ps.reset()
		e.mu.pc.reset()
		e.mu.pageExploredAt = time.Time{}
		e.mu.hopExploredAt = time.Time{}
		e.mu.rtt = math.Inf(1)
		e.mu.idle++
	}
	if d > 0 {
		e.mu.last = now
	}
}

// probThreshold maps a probability p in [0, 1] to t such that draw(u) < t
// with probability p for a uniform uint64 u, exactly at both ends: 0 never
// and 1 always.
func probThreshold(p float64) uint64 {
	switch {
	case p <= 0:
		return 0
	case p >= 1:
		return 1 << 53
	default:
		return uint64(p * (1 << 53))
	}
}

// draw reduces a uniform uint64 to a uniform value in [0, 2^53), the
// domain of probThreshold.
func draw(u uint64) uint64 { return u >> 11 }
