package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/cellstore/cell/locality"
)

// Table2 reproduces the shape of the paper's Table 2 (§4.4.1): throughput
// at 1 to 8 server cores of server-only, client-only, the adaptive selector
// and the best fixed ratio of server-side searches. The zero value of every
// field means its default.
type Table2 struct {
	// Model is the cluster; its Cores field is replaced by each row's count.
	Model Model `json:"model"`
	// Load is the saturating closed-loop load of every run.
	Load ClosedLoop `json:"load"`
	// FixedWarmup, if set, replaces Load.Warmup for the runs whose policy
	// is fixed (server-only, client-only, the ratio sweep). They have
	// nothing to learn and their queues settle within a few hundred round
	// trips, so tests use a short one to save time; the adaptive runs
	// always warm up for Load.Warmup, which must cover the selectors'
	// convergence from a cold start. Default Load.Warmup.
	FixedWarmup time.Duration `json:"fixed_warmup_ns"`
	// FixedDuration, if set, replaces Load.Duration for the same runs. A
	// fixed ratio spread evenly over each connection's searches gives a
	// steady throughput, which a short run measures to within a fraction
	// of a percent; the adaptive runs need Load.Duration to average the
	// selectors' fluctuations. Default Load.Duration.
	FixedDuration time.Duration `json:"fixed_duration_ns"`
	// MinCores and MaxCores bound the rows. Defaults 1 and 8.
	MinCores int `json:"min_cores"`
	MaxCores int `json:"max_cores"`
	// RatioStep is the step, in percent, of the fixed-ratio sweep from 0 to
	// 100%. Default 5.
	RatioStep float64 `json:"ratio_step"`
	// Parallel is the number of runs simulated at once. Runs are
	// independent, so the result does not depend on it. Default 1.
	Parallel int `json:"-"`
	// Progress, if set, is called after each run with the runs done and the
	// total, from one goroutine at a time.
	Progress func(done, total int) `json:"-"`
}

// Table2Row is one core count.
type Table2Row struct {
	Cores      int        `json:"cores"`
	ServerOnly Throughput `json:"server_only"`
	// ClientOnly does not depend on the cores; every row shows the same run.
	ClientOnly Throughput `json:"client_only"`
	Adaptive   Throughput `json:"adaptive"`
	// BestFixed is the best run of the sweep (which includes 0% and 100%,
	// that is client-only and server-only).
	BestFixed Throughput `json:"best_fixed"`
	// Sweep holds the runs of every ratio strictly between 0% and 100%.
	Sweep []Throughput `json:"sweep"`
	// VsBest is Adaptive.Rate / BestFixed.Rate; VsSum is Adaptive.Rate /
	// (ServerOnly.Rate + ClientOnly.Rate).
	VsBest float64 `json:"adaptive_vs_best_fixed"`
	VsSum  float64 `json:"adaptive_vs_sum"`
}

// EnsureDefaults fills zero fields with their defaults.
func (t *Table2) EnsureDefaults() {
	t.Model.EnsureDefaults()
	t.Load.EnsureDefaults()
	if t.MinCores == 0 {
		t.MinCores = 1
	}
	if t.MaxCores == 0 {
		t.MaxCores = max(8, t.MinCores)
	}
	if t.RatioStep == 0 {
		t.RatioStep = 5
	}
	if t.Parallel == 0 {
		t.Parallel = 1
	}
	if t.FixedWarmup == 0 {
		t.FixedWarmup = t.Load.Warmup
	}
	if t.FixedDuration == 0 {
		t.FixedDuration = t.Load.Duration
	}
}

// Validate reports whether the experiment can be run.
func (t *Table2) Validate() error {
	if err := t.Model.Validate(); err != nil {
		return err
	}
	if err := t.Load.Validate(); err != nil {
		return err
	}
	switch {
	case t.MinCores < 1 || t.MaxCores < t.MinCores || t.MaxCores > 1024:
		return fmt.Errorf("%w: cores %d..%d", ErrInvalidParams, t.MinCores, t.MaxCores)
	case !(t.RatioStep > 0 && t.RatioStep <= 100):
		return fmt.Errorf("%w: ratio step %v not in (0, 100]", ErrInvalidParams, t.RatioStep)
	case t.FixedWarmup < 0:
		return fmt.Errorf("%w: fixed warmup %v < 0", ErrInvalidParams, t.FixedWarmup)
	case t.FixedDuration < time.Microsecond || t.FixedDuration > time.Hour:
		return fmt.Errorf("%w: fixed duration %v not in [1µs, 1h]", ErrInvalidParams, t.FixedDuration)
	case t.Parallel < 1:
		return fmt.Errorf("%w: parallel %d < 1", ErrInvalidParams, t.Parallel)
	}
	return nil
}

// ratios returns the sweep's ratios strictly between 0 and 100.
func (t *Table2) ratios() []float64 {
	var rs []float64
	for i := 1; ; i++ {
		r := float64(i) * t.RatioStep
		if r >= 100-1e-9 {
			return rs
		}
		rs = append(rs, r)
	}
}

// Run simulates every configuration and returns one row per core count.
func (t Table2) Run() ([]Table2Row, error) {
	t.EnsureDefaults()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	type job struct {
		cores int
		mode  locality.Mode
		out   *Throughput
	}
	ratios := t.ratios()
	rows := make([]Table2Row, t.MaxCores-t.MinCores+1)
	var clientOnly Throughput
	jobs := []job{{cores: t.MinCores, mode: locality.Mode{Kind: locality.ClientOnly}, out: &clientOnly}}
	for i := range rows {
		r := &rows[i]
		r.Cores = t.MinCores + i
		r.Sweep = make([]Throughput, len(ratios))
		jobs = append(jobs,
			job{r.Cores, locality.Mode{Kind: locality.ServerOnly}, &r.ServerOnly},
			job{r.Cores, locality.Mode{Kind: locality.Adaptive}, &r.Adaptive})
		for k, p := range ratios {
			jobs = append(jobs, job{r.Cores, locality.RatioMode(p), &r.Sweep[k]})
		}
	}

	var (
		mu       sync.Mutex
		firstErr error
		done     int
		wg       sync.WaitGroup
		next     = make(chan job)
	)
	for range t.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				m, load := t.Model, t.Load
				m.Cores = j.cores
				if j.mode.Kind != locality.Adaptive {
					load.Warmup, load.Duration = t.FixedWarmup, t.FixedDuration
				}
				res, err := RunClosedLoop(m, load, j.mode)
				mu.Lock()
				*j.out = res
				if err != nil && firstErr == nil {
					firstErr = err
				}
				done++
				if t.Progress != nil {
					t.Progress(done, len(jobs))
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}

	for i := range rows {
		r := &rows[i]
		r.ClientOnly = clientOnly
		r.BestFixed = r.ClientOnly
		for _, cand := range append([]Throughput{r.ServerOnly}, r.Sweep...) {
			if cand.Rate > r.BestFixed.Rate {
				r.BestFixed = cand
			}
		}
		if r.BestFixed.Rate > 0 {
			r.VsBest = r.Adaptive.Rate / r.BestFixed.Rate
		}
		if s := r.ServerOnly.Rate + r.ClientOnly.Rate; s > 0 {
			r.VsSum = r.Adaptive.Rate / s
		}
	}
	return rows, nil
}
