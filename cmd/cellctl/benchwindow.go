package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cell/client"
)

// Windows of the measured time: --interval cuts it into equal parts (a
// time series, e.g. latency while meganodes split), --phases into named
// consecutive periods (e.g. before, during and after a load). Each worker
// records its latencies into one histogram per series, under its own
// mutex (uncontended but for the moment a window closes); the runner
// closes a window at its end by taking every worker's histogram and
// reading the clients' counters, so a window's figures are exact, not
// merged from smaller windows.

// maxWindows bounds the windows of one series.
const maxWindows = 100000

// phase is one --phases entry.
type phase struct {
	name string
	d    time.Duration
}

// parsePhases parses --phases ([NAME=]DURATION,...) into p.phases and sets
// --duration to their sum (an explicit different --duration is an error).
func (p *benchParams) parsePhases() error {
	p.phases = nil
	if strings.TrimSpace(p.Phases) == "" {
		return nil
	}
	var sum time.Duration
	for i, f := range strings.Split(p.Phases, ",") {
		name, dur, named := strings.Cut(strings.TrimSpace(f), "=")
		if !named {
			name, dur = fmt.Sprint(i+1), name
		}
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if err != nil || d <= 0 || strings.TrimSpace(name) == "" {
			return fmt.Errorf("--phases %q: want [NAME=]DURATION,... with durations above 0", p.Phases)
		}
		p.phases = append(p.phases, phase{strings.TrimSpace(name), d})
		sum += d
	}
	if len(p.phases) > maxWindows {
		return fmt.Errorf("--phases: at most %d", maxWindows)
	}
	if p.durationSet && p.Duration != sum {
		return fmt.Errorf("--phases add up to %v, --duration is %v: give one of them", sum, p.Duration)
	}
	p.Duration = sum
	return nil
}

// benchWindow are the figures of one part of the measured window.
type benchWindow struct {
	// Name is the phase's name (phases only).
	Name string `json:"name,omitempty"`
	// Start and End are seconds since the start of the measured window,
	// as the runner closed the windows.
	Start      float64 `json:"start_s"`
	End        float64 `json:"end_s"`
	Ops        uint64  `json:"ops"`
	Errors     uint64  `json:"errors"`
	Throughput float64 `json:"throughput"`
	latencies
	// ServerSide is the fraction of meganode hops done server-side, -1
	// without hops.
	ServerSide float64 `json:"server_side_fraction"`
	// Retries counts the clients' retries by cause (non-zero only).
	Retries map[string]uint64 `json:"retries,omitempty"`
}

// windowSeries is one series of windows being measured.
type windowSeries struct {
	ends  []time.Duration // end of each window, from the measured start
	names []string        // phases' names, or nil
	out   []benchWindow
	// lastAt and lastStats are the end of the previous window.
	lastAt    time.Time
	lastStats []client.Stats
}

// newSeries returns the series of p (intervals, then phases), empty
// without --interval and --phases.
func newSeries(p *benchParams) (intervals, phases *windowSeries) {
	if p.Interval > 0 {
		intervals = &windowSeries{}
		for at := p.Interval; ; at += p.Interval {
			if at >= p.Duration {
				intervals.ends = append(intervals.ends, p.Duration)
				break
			}
			intervals.ends = append(intervals.ends, at)
		}
	}
	if len(p.phases) > 0 {
		phases = &windowSeries{}
		var at time.Duration
		for _, ph := range p.phases {
			at += ph.d
			phases.ends = append(phases.ends, at)
			phases.names = append(phases.names, ph.name)
		}
	}
	return intervals, phases
}

// windowCounts is what a worker records for the open window of one series.
type windowCounts struct {
	hist   histogram
	errors uint64
}

// workerWindows are a worker's open windows, one per series.
type workerWindows struct {
	mu     sync.Mutex
	counts []windowCounts
}

func (ww *workerWindows) record(d time.Duration, failed bool) {
	if len(ww.counts) == 0 {
		return
	}
	ww.mu.Lock()
	for i := range ww.counts {
		c := &ww.counts[i]
		c.hist.record(d)
		if failed {
			c.errors++
		}
	}
	ww.mu.Unlock()
}

// closeWindow ends the open window of series number si (its index in the
// workers' counts) at `at`, with the clients' counters stats.
func (s *windowSeries) closeWindow(si int, workers []*benchWorker, at time.Time, start time.Time, stats []client.Stats) {
	var h histogram
	var errs uint64
	for _, w := range workers {
		w.win.mu.Lock()
		c := &w.win.counts[si]
		h.merge(&c.hist)
		errs += c.errors
		*c = windowCounts{}
		w.win.mu.Unlock()
	}
	win := benchWindow{
		Start: s.lastAt.Sub(start).Seconds(), End: at.Sub(start).Seconds(),
		Ops: h.n, Errors: errs, ServerSide: -1,
		latencies: h.latencies(),
	}
	if i := len(s.out); i < len(s.names) {
		win.Name = s.names[i]
	}
	if d := at.Sub(s.lastAt).Seconds(); d > 0 {
		win.Throughput = float64(h.n) / d
	}
	var server, clientHops uint64
	for i := range stats {
		a, b := &s.lastStats[i], &stats[i]
		server += b.ServerHops - a.ServerHops
		clientHops += b.ClientHops - a.ClientHops
		for k, v := range b.Retries {
			if n := v - a.Retries[k]; n > 0 {
				if win.Retries == nil {
					win.Retries = map[string]uint64{}
				}
				win.Retries[k] += n
			}
		}
	}
	if server+clientHops > 0 {
		win.ServerSide = float64(server) / float64(server+clientHops)
	}
	s.out = append(s.out, win)
	s.lastAt, s.lastStats = at, stats
}

// windowTable prints a series of windows.
func windowTable(title string, ws []benchWindow) *table {
	t := &table{title: title, header: []string{"WINDOW", "FROM", "TO", "OPS", "THROUGHPUT", "P50", "P90", "P99", "MAX", "SERVER-SIDE", "ERRORS", "RETRIES"}}
	for i, w := range ws {
		name := w.Name
		if name == "" {
			name = fmt.Sprint(i + 1)
		}
		t.add(name, fmt.Sprintf("%.2fs", w.Start), fmt.Sprintf("%.2fs", w.End), fmt.Sprint(w.Ops), fmtOpsRate(w.Throughput),
			fmtLatency(w.P50), fmtLatency(w.P90), fmtLatency(w.P99), fmtLatency(w.Max), fmtFraction(w.ServerSide), fmt.Sprint(w.Errors), fmtRetries(w.Retries))
	}
	return t
}
