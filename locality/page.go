package locality

import (
	"time"
)

// Range pages (Cell's addition, measured: see "Range pages" in doc.go).
//
// A range page is not a search hop: server-side it is one Range call that
// returns up to a page of pairs, client-side a search for the first leaf
// and a walk along the leaves' right links with one vector read of the
// records per leaf. The hop rule's terms (l_s of one meganode search, l_r
// of one node read, m) do not price it, so each Estimator also keeps two
// estimates of a page's cost, one per method, fed by the pages the client
// measured: the latency of the page divided by the pairs it returned (at
// least 1), a cost per pair. The cheaper method is chosen, with the same
// cold start, outlier rejection, moving period and idle reset as hops,
// and exploration by cost: probability Explore scaled by the ratio of the
// cheaper cost to the dearer one (capped by MaxExploreRate with a bucket
// of its own), and at least once a second.

// pageBucket is an exploration token bucket.
type pageBucket struct {
	tokens float64
	at     time.Time
}

// take takes a token if the bucket, refilled at rate per second up to
// rate, holds one.
func (b *pageBucket) take(now time.Time, rate float64) bool {
	if b.at.IsZero() {
		b.tokens, b.at = rate, now
	} else if dt := now.Sub(b.at); dt > 0 {
		b.tokens = min(rate, b.tokens+dt.Seconds()*rate)
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// ChoosePage decides how to serve the next forward range page whose
// first leaf is on this server (its region readable one-sided) and
// counts the decision in the page decisions. It does not allocate.
func (e *Estimator) ChoosePage() Choice { return e.ChoosePageAt(e.sel.opts.Clock.Now()) }

// ChoosePageAt is ChoosePage at now, a recent time from Options.Clock.
func (e *Estimator) ChoosePageAt(now time.Time) Choice {
	e.mu.Lock()
	e.touchLocked(now)
	c := e.choosePageLocked(now)
	e.mu.pageDec.count(c)
	e.mu.Unlock()
	return c
}

// choosePageLocked applies the selector's mode to a page.
// REQUIRES: e.mu held.
func (e *Estimator) choosePageLocked(now time.Time) Choice {
	s := e.sel
	// The pages' own ratio credit, so that P% of the pages (and P% of
	// the hops) go server-side however they interleave.
	if c, fixed := s.fixedChoice(&e.mu.pageCredit); fixed {
		return c
	}
	// Adaptive. Cold start: each estimate gets its first sample.
	if e.mu.ps.win.n == 0 {
		return Choice{Method: ServerSide}
	}
	if e.mu.pc.win.n == 0 {
		return Choice{Method: ClientSide}
	}
	best, lo, hi := ClientSide, e.mu.pc.win.mean(), e.mu.ps.win.mean()
	if e.pageServerBetterLocked() {
		best, lo, hi = ServerSide, hi, lo
	}
	if e.mu.pageExploredAt.IsZero() {
		e.mu.pageExploredAt = now
	}
	if s.exploreThreshold == 0 {
		return Choice{Method: best}
	}
	// Exploration by cost: with probability p·lo/hi, so that exploring
	// spends about p of the time the pages take (each exploring page
	// costs hi instead of lo); the paper's p with PaperRule. And at
	// least once per pageExploreInterval, so that a worse method's
	// estimate never goes stale for long.
	thr := s.exploreThreshold
	if !s.opts.PaperRule && hi > 0 {
		thr = uint64(float64(thr) * min(1, lo/hi))
	}
	explore := draw(e.mu.rng.Uint64()) < thr && e.pageTokenLocked(now)
	if !explore && !s.opts.PaperRule && now.Sub(e.mu.pageExploredAt) >= pageExploreInterval {
		explore = true
	}
	if explore {
		e.mu.pageExploredAt = now
		return Choice{Method: best.other(), Explore: true}
	}
	return Choice{Method: best}
}

// pageExploreInterval is the longest a connection goes without exploring
// a page (with exploration on and both estimates known).
const pageExploreInterval = time.Second

// pageTokenLocked is exploreTokenLocked for pages, with a bucket of their
// own (hops are far more numerous and would take every token).
// REQUIRES: e.mu held.
func (e *Estimator) pageTokenLocked(now time.Time) bool {
	o := &e.sel.opts
	if o.PaperRule || o.MaxExploreRate < 0 {
		return true
	}
	return e.mu.pageTokens.take(now, o.MaxExploreRate)
}

// pageServerBetterLocked reports whether the server-side cost per pair is
// below the client-side one. Ties go client-side, as the hop rule's do.
// REQUIRES: e.mu held, both windows non-empty.
func (e *Estimator) pageServerBetterLocked() bool {
	return e.mu.ps.win.mean() < e.mu.pc.win.mean()
}

// ObservePage records one range page served by method m that took
// latency (as the client measured it, the whole page: the Range call, or
// the client-side search and leaf walk with its reads) and returned pairs
// pairs. The sample is the cost per pair, latency/max(pairs, 1).
// Non-positive latencies are ignored.
func (e *Estimator) ObservePage(m Method, latency time.Duration, pairs int) {
	if latency <= 0 {
		return
	}
	e.ObservePageAt(m, latency, pairs, e.sel.opts.Clock.Now())
}

// ObservePageAt is ObservePage for a page that ended at now (a time from
// Options.Clock).
func (e *Estimator) ObservePageAt(m Method, latency time.Duration, pairs int, now time.Time) {
	if latency <= 0 {
		return
	}
	x := float64(latency) / float64(max(pairs, 1))
	e.mu.Lock()
	e.touchLocked(now)
	est := &e.mu.ps
	if m == ClientSide {
		est = &e.mu.pc
	}
	est.observe(x, e.sel.opts.OutlierK, e.sel.opts.MinSamples)
	e.mu.Unlock()
}
