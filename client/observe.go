package client

import (
	"time"

	"github.com/cellstore/cell/locality"
)

// Feeding the selector cheaply.
//
// A client-side get over shm costs the client's CPU under 3 µs, and the
// selector's bookkeeping was about 0.85 µs of it (locality's
// BenchmarkClientHop; docs/bench-history.md §5b, "Selector overhead"): time.Now
// at each one-sided read's start and end and per Choose, each time.Now two
// clock reads (wall and monotonic), and a lock of the server's estimator
// per read and per hop. So, with the system clock:
//
//   - Times come from one monotonic clock read each: the client's base
//     time advanced by time.Since(base) (mono), half the cost of time.Now.
//     Latencies are differences of such readings, exactly as before.
//   - An operation keeps its latest reading (its start, then the end of
//     its last read or RPC) and the hop's Choose uses it (ChooseAt) instead
//     of reading the clock again. The estimator uses the time only to mark
//     the connection as used, at the 3 s scale of its idle timeout.
//   - A client-side hop collects its reads' latencies and hands them to
//     the estimator in one call at the hop's end (ObserveReadsAt): the same
//     samples in the same order, one lock instead of one per read.
//
// With another Clock (tests), latencies are still measured with the system
// clock and the estimator reads its own clock, as before.

// maxHopReads is how many read latencies a hop collects before handing
// them over; a hop normally reads its meganode's height in nodes plus the
// header and the record.
const maxHopReads = 16

// hopReads is the bookkeeping of one operation's one-sided reads not yet
// handed to the selector.
type hopReads struct {
	est   *locality.Estimator // whose reads lat holds; nil when n is 0
	lat   [maxHopReads]time.Duration
	n     int
	end   time.Duration // mono reading at the end of the last read
	bytes uint64        // bytes read, for the counters
	// wait is how long the hop waited for a CPU slot (Config.CPUSlots)
	// before its first read: added to that read's latency, so that the
	// selector sees what a client-side hop costs while slots are short,
	// as a client-side range page's latency does (it is timed from
	// before its slot).
	wait time.Duration
}

// mono returns a monotonic clock reading: the time since the client's
// base. One clock read (time.Now takes two).
func (c *Client) mono() time.Duration { return time.Since(c.base) }

// at returns the time of mono reading d: a time with a monotonic reading,
// usable as a time.Now result for durations and the selector.
func (c *Client) at(d time.Duration) time.Time { return c.base.Add(d) }

// now is time.Now for durations (its wall reading does not follow clock
// adjustments after New), at one clock read.
func (c *Client) now() time.Time { return c.at(c.mono()) }

// choose asks srv's estimator how to run the next hop.
func (op *searchOp) choose(srv *server) locality.Method {
	if !op.c.sysClock || op.now.IsZero() {
		return srv.est.Choose().Method
	}
	return srv.est.ChooseAt(op.now).Method
}

// observeRead records a one-sided read of n bytes from est's server that
// started and ended at mono readings start and end; the selector and the
// counters get it at the hop's end. Whoever reads through a searchOp
// calls flushReads when done.
func (op *searchOp) observeRead(est *locality.Estimator, start, end time.Duration, n int) {
	r := &op.reads
	if r.est != est || r.n == len(r.lat) {
		op.flushReads()
		r.est = est
	}
	r.lat[r.n] = end - start + r.wait
	r.wait = 0
	r.n++
	r.end = end
	r.bytes += uint64(n)
}

// flushReads hands the reads collected so far to the selector and the
// counters.
func (op *searchOp) flushReads() {
	r := &op.reads
	if r.n == 0 {
		return
	}
	c := op.c
	if c.sysClock {
		op.now = c.at(r.end)
		r.est.ObserveReadsAt(r.lat[:r.n], op.now)
	} else {
		r.est.ObserveReadsAt(r.lat[:r.n], c.selClock.Now())
	}
	c.counters.reads.Add(uint64(r.n))
	c.counters.readBytes.Add(r.bytes)
	r.est, r.n, r.bytes = nil, 0, 0
}

// observeRead feeds one read from est's server that started and ended at
// mono readings start and end to the selector at once (a range page's
// record read).
func (c *Client) observeRead(est *locality.Estimator, start, end time.Duration) {
	if c.sysClock {
		est.ObserveReadAt(end-start, c.at(end))
		return
	}
	est.ObserveRead(end - start)
}
