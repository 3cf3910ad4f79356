package sim

import (
	"fmt"
	"time"

	"github.com/cellstore/cell/locality"
)

// Defaults of Spike: the paper's Fig. 7 experiment (§4.4.3).
const (
	DefaultSpikeClients      = 24 // "search requests arrive at each of 24 Cell clients every 75 µs"
	DefaultSpikeExtraClients = 36 // "an additional 36 clients begin injecting searches at the same rate"
	DefaultSpikeInterval     = 75 * time.Microsecond
	DefaultSpikeWarmup       = 200 * time.Millisecond
	DefaultSpikeBefore       = time.Second
	DefaultSpikeLength       = 5 * time.Second // "increases unexpectedly for 5 seconds"
	DefaultSpikeAfter        = 2 * time.Second
	DefaultSpikeBucket       = 250 * time.Millisecond
	DefaultSpikeResolution   = time.Millisecond
)

// Spike reproduces the shape of the paper's Fig. 7: an open-loop load of
// Clients clients, each handed a search every Interval, rises to
// (Clients+ExtraClients)/Clients times for Length as ExtraClients more
// clients (with cold selectors) start at the same rate. Clients do not
// pipeline ("client pipelining disabled"): each has one search in flight
// and queues the others, and latency is measured from the moment the
// application hands over a search. The zero value of every field means its
// default.
type Spike struct {
	// Model is the cluster. With the defaults (4 servers of 1 core) the
	// base load is half the server-side capacity and the spike 1.25 times
	// it, so server-only searches queue without bound during the spike.
	Model Model `json:"model"`
	// Clients is the number of clients of the base load. Default 24.
	Clients int `json:"clients"`
	// ExtraClients is the number of clients added during the spike.
	// Default 36 (2.5× the load).
	ExtraClients int `json:"extra_clients"`
	// Interval is the time between two searches handed to one client.
	// Default 75µs.
	Interval time.Duration `json:"interval_ns"`
	// Outstanding is the number of searches a client keeps in flight.
	// Default 1 (no pipelining).
	Outstanding int `json:"outstanding"`
	// Warmup runs the base load before anything is measured. Default 200ms.
	Warmup time.Duration `json:"warmup_ns"`
	// Before, Length and After are the measured phases: base load, spike,
	// base load again. Defaults 1s, 5s, 2s.
	Before time.Duration `json:"before_ns"`
	Length time.Duration `json:"length_ns"`
	After  time.Duration `json:"after_ns"`
	// Bucket is the width of a timeline row. Default 250ms.
	Bucket time.Duration `json:"bucket_ns"`
	// Resolution is the width of the intervals in which the adaptive
	// selectors' server-side share is tracked to time the shift.
	// Default 1ms.
	Resolution time.Duration `json:"resolution_ns"`
}

// EnsureDefaults fills zero fields with their defaults.
func (s *Spike) EnsureDefaults() {
	s.Model.EnsureDefaults()
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.Clients, DefaultSpikeClients)
	def(&s.ExtraClients, DefaultSpikeExtraClients)
	def(&s.Outstanding, 1)
	defd(&s.Interval, DefaultSpikeInterval)
	defd(&s.Warmup, DefaultSpikeWarmup)
	defd(&s.Before, DefaultSpikeBefore)
	defd(&s.Length, DefaultSpikeLength)
	defd(&s.After, DefaultSpikeAfter)
	defd(&s.Bucket, DefaultSpikeBucket)
	defd(&s.Resolution, DefaultSpikeResolution)
}

// Validate reports whether the experiment can be run.
func (s *Spike) Validate() error {
	if err := s.Model.Validate(); err != nil {
		return err
	}
	total := s.Warmup + s.Before + s.Length + s.After
	switch {
	case s.Clients < 1 || s.Clients > 100_000 || s.ExtraClients < 0 || s.ExtraClients > 100_000:
		return fmt.Errorf("%w: clients %d + %d", ErrInvalidParams, s.Clients, s.ExtraClients)
	case s.Outstanding < 1 || s.Outstanding > 10_000:
		return fmt.Errorf("%w: outstanding %d not in [1, 10000]", ErrInvalidParams, s.Outstanding)
	case s.Interval < time.Nanosecond:
		return fmt.Errorf("%w: interval %v", ErrInvalidParams, s.Interval)
	case s.Warmup < 0 || s.Before <= 0 || s.Length <= 0 || s.After <= 0 || total > time.Hour:
		return fmt.Errorf("%w: phases %v/%v/%v/%v", ErrInvalidParams, s.Warmup, s.Before, s.Length, s.After)
	case s.Bucket <= 0 || (s.Before+s.Length+s.After)/s.Bucket > 100_000:
		return fmt.Errorf("%w: bucket %v", ErrInvalidParams, s.Bucket)
	case s.Resolution <= 0 || s.Resolution > s.Length/4 || s.Resolution > s.Before || total/s.Resolution > 10_000_000:
		return fmt.Errorf("%w: resolution %v (at most a quarter of the spike and the before phase)", ErrInvalidParams, s.Resolution)
	}
	return nil
}

// Phase summarises the searches handed over during one phase.
type Phase struct {
	Searches uint64        `json:"searches"`
	P50      time.Duration `json:"p50_ns"`
	P90      time.Duration `json:"p90_ns"`
	// ServerShare is the fraction of those searches done server-side.
	ServerShare float64 `json:"server_share"`
}

// SpikeBucket is one row of the timeline: the searches handed over in
// [Start, Start+Bucket), relative to the start of the Before phase.
type SpikeBucket struct {
	Start time.Duration `json:"start_ns"`
	Phase
}

// SpikeRun is the outcome of the experiment with one mode.
type SpikeRun struct {
	Mode     locality.Mode `json:"mode"`
	Before   Phase         `json:"before"`
	During   Phase         `json:"during"`
	After    Phase         `json:"after"`
	Timeline []SpikeBucket `json:"timeline"`
	// ShiftShare is the server-side share of the selectors' decisions
	// before the spike, in its second half, and in the second half of the
	// After phase.
	ShiftShare [3]float64 `json:"decision_share"`
	// Shift is the time from the spike's onset to the first Resolution
	// interval whose server-side share of decisions covered 90% of the
	// change between the before share and the spike's share; Recover the
	// same after the spike's end towards the after share. Zero when the
	// share moved less than 2 points, -1 when it never got there.
	Shift   time.Duration `json:"shift_ns"`
	Recover time.Duration `json:"recover_ns"`
}

// SpikeResult compares the adaptive selector with server-only search.
type SpikeResult struct {
	Params     Spike    `json:"params"`
	Adaptive   SpikeRun `json:"adaptive"`
	ServerOnly SpikeRun `json:"server_only"`
}

// Run simulates the experiment with the adaptive selector and with
// server-only search.
func (s Spike) Run() (SpikeResult, error) {
	s.EnsureDefaults()
	if err := s.Validate(); err != nil {
		return SpikeResult{}, err
	}
	res := SpikeResult{Params: s}
	var err error
	if res.Adaptive, err = s.run(locality.Mode{Kind: locality.Adaptive}); err != nil {
		return SpikeResult{}, err
	}
	if res.ServerOnly, err = s.run(locality.Mode{Kind: locality.ServerOnly}); err != nil {
		return SpikeResult{}, err
	}
	return res, nil
}

// phaseStats accumulates a Phase.
type phaseStats struct {
	lat    histogram
	server uint64
}

func (p *phaseStats) phase() Phase {
	ph := Phase{Searches: p.lat.n, P50: p.lat.quantile(0.5), P90: p.lat.quantile(0.9)}
	if p.lat.n > 0 {
		ph.ServerShare = float64(p.server) / float64(p.lat.n)
	}
	return ph
}

func (s *Spike) run(mode locality.Mode) (SpikeRun, error) {
	t0 := s.Warmup          // start of the Before phase
	onset := t0 + s.Before  // the spike starts
	end := onset + s.Length // the spike ends
	stop := end + s.After   // no more searches are handed over
	nb := int((stop - t0 + s.Bucket - 1) / s.Bucket)
	nr := int((stop - t0 + s.Resolution - 1) / s.Resolution)
	var (
		e        *engine
		phases   [3]phaseStats
		buckets  = make([]phaseStats, nb)
		decSrv   = make([]uint32, nr)
		decTotal = make([]uint32, nr)
	)
	e = newEngine(s.Model, mode, hooks{
		arrival: func(c *client) {
			if c.inflight < c.limit && c.head == len(c.backlog) {
				e.start(c, e.now)
			} else {
				c.backlog = append(c.backlog, e.now)
			}
			if next := e.now + c.interval; next < c.until {
				e.arrive(next, c)
			}
		},
		choose: func(_ *client, ch locality.Choice) {
			if e.now < t0 {
				return
			}
			i := int((e.now - t0) / s.Resolution)
			if i < nr {
				decTotal[i]++
				if ch.Method == locality.ServerSide {
					decSrv[i]++
				}
			}
		},
		done: func(o *op) {
			if o.issued < t0 {
				return
			}
			lat := e.now - o.issued
			srv := o.choice.Method == locality.ServerSide
			p := &phases[0]
			if o.issued >= end {
				p = &phases[2]
			} else if o.issued >= onset {
				p = &phases[1]
			}
			b := &buckets[(o.issued-t0)/s.Bucket]
			for _, st := range []*phaseStats{p, b} {
				st.lat.add(lat)
				if srv {
					st.server++
				}
			}
		},
	})
	addClients := func(n int, from, until time.Duration) error {
		for range n {
			c, err := e.addClient(s.Outstanding)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidParams, err)
			}
			c.interval, c.until = s.Interval, until
			// A random phase, so that clients do not hand over searches in
			// lockstep.
			e.arrive(from+time.Duration(e.rng.Int64N(int64(s.Interval))), c)
		}
		return nil
	}
	if err := addClients(s.Clients, 0, stop); err != nil {
		return SpikeRun{}, err
	}
	if err := addClients(s.ExtraClients, onset, end); err != nil {
		return SpikeRun{}, err
	}
	e.run(1<<63 - 1) // until every search handed over has completed

	run := SpikeRun{Mode: mode, Before: phases[0].phase(), During: phases[1].phase(), After: phases[2].phase()}
	run.Timeline = make([]SpikeBucket, nb)
	for i := range buckets {
		run.Timeline[i] = SpikeBucket{Start: time.Duration(i) * s.Bucket, Phase: buckets[i].phase()}
	}
	share := func(from, to time.Duration) float64 {
		var srv, tot uint64
		for i := int((from - t0) / s.Resolution); i < int((to-t0)/s.Resolution) && i < nr; i++ {
			srv += uint64(decSrv[i])
			tot += uint64(decTotal[i])
		}
		if tot == 0 {
			return 0
		}
		return float64(srv) / float64(tot)
	}
	before := share(onset-s.Before/2, onset)
	during := share(onset+s.Length/2, end)
	after := share(end+s.After/2, stop)
	run.ShiftShare = [3]float64{before, during, after}
	// crossing returns the time from 'from' to the first interval, before
	// 'to', whose share is 90% of the way from a to b.
	crossing := func(from, to time.Duration, a, b float64) time.Duration {
		if b-a < 0.02 && a-b < 0.02 {
			return 0
		}
		target := a + 0.9*(b-a)
		for i := int((from - t0) / s.Resolution); i < int((to-t0)/s.Resolution) && i < nr; i++ {
			if decTotal[i] == 0 {
				continue
			}
			v := float64(decSrv[i]) / float64(decTotal[i])
			if (b > a && v >= target) || (b < a && v <= target) {
				return t0 + time.Duration(i+1)*s.Resolution - from
			}
		}
		return -1
	}
	run.Shift = crossing(onset, end, before, during)
	run.Recover = crossing(end, stop, during, after)
	return run, nil
}
