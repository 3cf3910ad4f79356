package sim

import (
	"fmt"
	"time"

	"github.com/cellstore/cell/locality"
)

// Defaults of ClosedLoop.
const (
	DefaultClients     = 32
	DefaultOutstanding = 8
	DefaultWarmup      = 25 * time.Millisecond
	DefaultDuration    = 40 * time.Millisecond
)

// ClosedLoop is a saturating load: Clients clients, each keeping
// Outstanding searches in flight and issuing the next one the moment one
// completes (no think time), as in the paper's throughput experiments. The
// zero value of every field means its default.
type ClosedLoop struct {
	// Clients is the number of client processes, each with its own
	// selector. Default 32.
	Clients int `json:"clients"`
	// Outstanding is the number of searches each client keeps in flight
	// (pipelining depth). Default 8.
	Outstanding int `json:"outstanding"`
	// Warmup is simulated time before measuring, for the selectors and
	// queues to settle. Default 25ms.
	Warmup time.Duration `json:"warmup_ns"`
	// Duration is the simulated time measured. Default 40ms.
	Duration time.Duration `json:"duration_ns"`
}

// EnsureDefaults fills zero fields with their defaults.
func (l *ClosedLoop) EnsureDefaults() {
	if l.Clients == 0 {
		l.Clients = DefaultClients
	}
	if l.Outstanding == 0 {
		l.Outstanding = DefaultOutstanding
	}
	if l.Warmup == 0 {
		l.Warmup = DefaultWarmup
	}
	if l.Duration == 0 {
		l.Duration = DefaultDuration
	}
}

// Validate reports whether the load can be run.
func (l *ClosedLoop) Validate() error {
	switch {
	case l.Clients < 1 || l.Clients > 100_000:
		return fmt.Errorf("%w: clients %d not in [1, 100000]", ErrInvalidParams, l.Clients)
	case l.Outstanding < 1 || l.Outstanding > 10_000:
		return fmt.Errorf("%w: outstanding %d not in [1, 10000]", ErrInvalidParams, l.Outstanding)
	case l.Warmup < 0:
		return fmt.Errorf("%w: warmup %v < 0", ErrInvalidParams, l.Warmup)
	case l.Duration < time.Microsecond || l.Duration > time.Hour:
		return fmt.Errorf("%w: duration %v not in [1µs, 1h]", ErrInvalidParams, l.Duration)
	}
	return nil
}

// Throughput is the outcome of one closed-loop run.
type Throughput struct {
	Mode locality.Mode `json:"mode"`
	// Searches is the number of searches completed while measuring, and
	// Rate the same per second.
	Searches uint64  `json:"searches"`
	Rate     float64 `json:"rate"`
	// ServerShare is the fraction of those searches done server-side.
	ServerShare float64 `json:"server_share"`
	// Explored is the fraction of them chosen by exploration.
	Explored float64 `json:"explored"`
	// P50 and P90 are search latency percentiles.
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	// CPU and NIC are the servers' mean utilisations.
	CPU float64 `json:"cpu_util"`
	NIC float64 `json:"nic_util"`
}

// RunClosedLoop simulates load on model with every client in mode.
func RunClosedLoop(model Model, load ClosedLoop, mode locality.Mode) (Throughput, error) {
	model.EnsureDefaults()
	load.EnsureDefaults()
	if err := model.Validate(); err != nil {
		return Throughput{}, err
	}
	if err := load.Validate(); err != nil {
		return Throughput{}, err
	}
	if err := mode.Validate(); err != nil {
		return Throughput{}, fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	var (
		e         *engine
		measuring bool
		res       = Throughput{Mode: mode}
		server    uint64
		explored  uint64
		lat       histogram
	)
	e = newEngine(model, mode, hooks{
		arrival: func(c *client) { e.start(c, e.now) },
		done: func(o *op) {
			if measuring {
				res.Searches++
				if o.choice.Method == locality.ServerSide {
					server++
				}
				if o.choice.Explore {
					explored++
				}
				lat.add(e.now - o.issued)
			}
			e.start(o.c, e.now) // closed loop: the next search at once
		},
	})
	for range load.Clients {
		c, err := e.addClient(load.Outstanding)
		if err != nil {
			return Throughput{}, fmt.Errorf("%w: %w", ErrInvalidParams, err)
		}
		// Stagger the first searches over one round trip so clients do
		// not start in lockstep.
		for range load.Outstanding {
			e.arrive(time.Duration(e.rng.Int64N(int64(model.RTT))), c)
		}
	}
	e.run(load.Warmup)
	measuring = true
	e.resetUsage()
	e.run(load.Warmup + load.Duration)
	res.Rate = float64(res.Searches) / load.Duration.Seconds()
	if res.Searches > 0 {
		res.ServerShare = float64(server) / float64(res.Searches)
		res.Explored = float64(explored) / float64(res.Searches)
	}
	res.P50, res.P90 = lat.quantile(0.5), lat.quantile(0.9)
	res.CPU, res.NIC = e.usage(load.Duration)
	return res, nil
}
