package locality

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Decisions counts choices. Server and Client count every decision by the
// method chosen; Explore counts those of them that were exploration.
type Decisions struct {
	Server  uint64 `json:"server"`
	Client  uint64 `json:"client"`
	Explore uint64 `json:"explore"`
}

func (d *Decisions) count(c Choice) {
	if c.Method == ServerSide {
		d.Server++
	} else {
		d.Client++
	}
	if c.Explore {
		d.Explore++
	}
}

func (d *Decisions) add(o Decisions) {
	d.Server += o.Server
	d.Client += o.Client
	d.Explore += o.Explore
}

// Total returns the number of decisions.
func (d Decisions) Total() uint64 { return d.Server + d.Client }

// ServerShare returns the fraction of decisions that were server-side, or 0
// when there were none.
func (d Decisions) ServerShare() float64 {
	if d.Total() == 0 {
		return 0
	}
	return float64(d.Server) / float64(d.Total())
}

// EstimateSnapshot is one latency estimate (l_s or l_r) of a connection.
type EstimateSnapshot struct {
	// Mean is the moving average, 0 when Samples is 0.
	Mean time.Duration `json:"mean_ns"`
	// StdDev is σ of the window.
	StdDev time.Duration `json:"stddev_ns"`
	// Samples is the number of samples in the window (≤ Window).
	Samples int `json:"samples"`
	// Observed, Dropped and Resets count, since the estimator was created,
	// the samples offered, those discarded as outliers, and the histories
	// discarded because drops outnumbered keeps.
	Observed uint64 `json:"observed"`
	Dropped  uint64 `json:"dropped"`
	Resets   uint64 `json:"resets"`
}

func (e *estimate) snapshot() EstimateSnapshot {
	return EstimateSnapshot{
		Mean:     time.Duration(e.win.mean()),
		StdDev:   time.Duration(e.win.stddev()),
		Samples:  e.win.n,
		Observed: e.observed,
		Dropped:  e.dropped,
		Resets:   e.resets,
	}
}

// EstimatorSnapshot is the state of one connection's estimator.
type EstimatorSnapshot struct {
	Server ServerID `json:"server"`
	// LS and LR are the l_s and l_r estimates.
	LS EstimateSnapshot `json:"ls"`
	LR EstimateSnapshot `json:"lr"`
	// RTT is the lowest read latency observed, 0 when none since the last
	// idle reset.
	RTT time.Duration `json:"rtt_ns"`
	// QueueTime and ServiceTime are the moving averages of the times the
	// server reported with the samples kept in LS.
	QueueTime   time.Duration `json:"queue_ns"`
	ServiceTime time.Duration `json:"service_ns"`
	// ServerBetter is the rule's verdict now (false while LS or LR is
	// empty).
	ServerBetter bool      `json:"server_better"`
	Decisions    Decisions `json:"decisions"`
	// PageServer and PageClient are the range page cost estimates, per
	// pair returned, of server-side and client-side pages (page.go).
	PageServer EstimateSnapshot `json:"page_server"`
	PageClient EstimateSnapshot `json:"page_client"`
	// PageServerBetter is the page rule's verdict now (false while
	// either is empty); PageDecisions counts the range page decisions.
	PageServerBetter bool      `json:"page_server_better"`
	PageDecisions    Decisions `json:"page_decisions"`
	// IdleResets counts histories discarded after an idle period.
	IdleResets uint64 `json:"idle_resets"`
}

// Snapshot returns the estimator's state. m is the selector's current m.
func (e *Estimator) Snapshot() EstimatorSnapshot {
	m := e.sel.M()
	e.mu.Lock()
	defer e.mu.Unlock()
	snap := EstimatorSnapshot{
		Server:      e.id,
		LS:          e.mu.ls.snapshot(),
		LR:          e.mu.lr.snapshot(),
		QueueTime:   time.Duration(e.mu.queue.mean()),
		ServiceTime: time.Duration(e.mu.service.mean()),
		Decisions:   e.mu.dec,
		IdleResets:  e.mu.idle,

		PageServer:    e.mu.ps.snapshot(),
		PageClient:    e.mu.pc.snapshot(),
		PageDecisions: e.mu.pageDec,
	}
	if e.mu.ps.win.n > 0 && e.mu.pc.win.n > 0 {
		snap.PageServerBetter = e.pageServerBetterLocked()
	}
	if !math.IsInf(e.mu.rtt, 1) {
		snap.RTT = time.Duration(e.mu.rtt)
	}
	if e.mu.ls.win.n > 0 && e.mu.lr.win.n > 0 {
		snap.ServerBetter = e.serverBetterLocked(m)
	}
	return snap
}

// Snapshot is a selector's state, for metrics and tools.
type Snapshot struct {
	Mode Mode `json:"mode"`
	// M is the current running average meganode height.
	M float64 `json:"m"`
	// Decisions sums the decisions of all estimators, removed ones included.
	Decisions Decisions `json:"decisions"`
	// PageDecisions sums their range page decisions likewise.
	PageDecisions Decisions `json:"page_decisions"`
	// Servers holds one entry per live estimator, sorted by Server.
	Servers []EstimatorSnapshot `json:"servers"`
}

// Snapshot returns the selector's state. It allocates; call it from metrics
// collection, not per request.
func (s *Selector) Snapshot() Snapshot {
	s.mu.RLock()
	ests := make([]*Estimator, 0, len(s.mu.ests))
	for _, e := range s.mu.ests {
		ests = append(ests, e)
	}
	snap := Snapshot{Mode: s.opts.Mode, M: s.M(), Decisions: s.mu.retired, PageDecisions: s.mu.retiredPages}
	s.mu.RUnlock()
	slices.SortFunc(ests, func(a, b *Estimator) int { return cmp.Compare(a.id, b.id) })
	snap.Servers = make([]EstimatorSnapshot, len(ests))
	for i, e := range ests {
		snap.Servers[i] = e.Snapshot()
		snap.Decisions.add(snap.Servers[i].Decisions)
		snap.PageDecisions.add(snap.Servers[i].PageDecisions)
	}
	return snap
}
