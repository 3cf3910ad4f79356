package drill

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// FaultEvent is one fault as it happened: the server struck and when
// (recorder times, so comparable with the operations').
type FaultEvent struct {
	Kind   FaultKind     `json:"kind"`
	Server string        `json:"server"`
	Fault  time.Duration `json:"fault_ns"`
	Heal   time.Duration `json:"heal_ns"`
}

// Report is what a drill found. Times are recorder times (since Start)
// unless named otherwise.
type Report struct {
	Start    time.Time `json:"start"`
	Workload Workload  `json:"workload"`
	Schedule Schedule  `json:"schedule"`
	Fault    FaultKind `json:"fault,omitempty"`
	// LoadStart and LoadEnd bound the load (StageLoad).
	LoadStart time.Duration `json:"load_start_ns"`
	LoadEnd   time.Duration `json:"load_end_ns"`

	// Operations counts every recorded operation by outcome (all stages).
	Operations Counts `json:"operations"`
	// Phases are the load's ops and errors per second and latencies
	// before the first fault, during the faults, between them and after
	// the last heal (those that last a time).
	Phases []Phase `json:"phases"`
	// Faults are the faults struck, each with its figures.
	Faults []FaultStats `json:"faults"`
	// Unavailability summarises FaultStats.Unavailable over the faults.
	Unavailability Spread `json:"unavailability"`
	// Regions summarises, per region, its unavailability over the faults.
	Regions []RegionStats `json:"regions,omitempty"`
	// Latency is the p50/p99 of the load's successful operations.
	Latency Latency `json:"latency"`
	// Timeline is the load's operations per second, by outcome.
	Timeline []Second `json:"timeline"`

	// Recovery is the time from the end of the load until every key was
	// read (one successful get each).
	Recovery time.Duration `json:"recovery_ns"`
	// Lost are the keys whose final read the history does not allow.
	Lost []Loss `json:"lost"`
	// Linearizability is porcupine's verdict.
	Linearizability Linearizability `json:"linearizability"`
	// ClusterCheck lists the violations the cluster check found; nil
	// with ClusterChecked false when it was not run.
	ClusterChecked bool     `json:"cluster_checked"`
	ClusterCheck   []string `json:"cluster_check"`
	// History is every recorded operation, by invoke time (not in the
	// JSON form: write it apart, it is large).
	History []Op `json:"-"`
	// Errors are failures of the drill itself (a fault not struck, a key
	// not read back): the run's verdict is then a failure.
	Errors []string `json:"errors,omitempty"`
}

// OK reports whether the drill passed: nothing lost, the history
// linearizable, the cluster check clean, no failure of the drill itself.
func (r *Report) OK() bool {
	return len(r.Lost) == 0 && r.Linearizability.OK() && len(r.ClusterCheck) == 0 && len(r.Errors) == 0
}

// Counts are operations by outcome.
type Counts struct {
	OK      int `json:"ok"`
	Failed  int `json:"failed"`
	Unknown int `json:"unknown"`
}

func (c *Counts) add(o Outcome) {
	switch o {
	case OK:
		c.OK++
	case Failed:
		c.Failed++
	default:
		c.Unknown++
	}
}

// Errors is Failed + Unknown.
func (c Counts) Errors() int { return c.Failed + c.Unknown }

// Phase is the load over a part of the run.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Counts  Counts  `json:"counts"`
	OpsPS   float64 `json:"ops_per_sec"`    // successful operations
	ErrPS   float64 `json:"errors_per_sec"` // failed and unknown
	Latency Latency `json:"latency"`
	spans   []span  // the intervals the phase covers
}

// Names of the phases.
const (
	PhaseBefore  = "before"
	PhaseDuring  = "during"
	PhaseBetween = "between"
	PhaseAfter   = "after"
)

// Latency is a p50/p99/max of operation latencies.
type Latency struct {
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// Spread is p50/p99/max over faults.
type Spread struct {
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// FaultStats are one fault's figures.
type FaultStats struct {
	FaultEvent
	// Unavailable is the longest unavailability window of any region.
	Unavailable time.Duration `json:"unavailable_ns"`
	// ByRegion is the unavailability window of each region's keys (region
	// 0: all keys, when the placement is not known).
	ByRegion map[uint32]time.Duration `json:"by_region"`
	// Before, During and After are the successful operations per second
	// from the previous heal (or the load's start) to the fault, from the
	// fault to its heal, and from the heal to the next fault (or the
	// load's end).
	Before float64 `json:"before_ops_per_sec"`
	During float64 `json:"during_ops_per_sec"`
	After  float64 `json:"after_ops_per_sec"`
}

// RegionStats summarise one region's unavailability over the faults.
type RegionStats struct {
	Region      uint32 `json:"region"`
	Keys        int    `json:"keys"`
	Unavailable Spread `json:"unavailable"`
}

// Second is the load's operations that returned in one second.
type Second struct {
	T int `json:"t"` // seconds since the load's start
	Counts
}

type span struct{ from, to time.Duration }

func (s span) contains(t time.Duration) bool { return t >= s.from && t < s.to }

func (s span) len() time.Duration { return max(s.to-s.from, 0) }

// Summarize computes the report's figures from the history: the load's
// operations between loadStart and loadEnd, the faults as struck, and the
// placement of the keys (nil Region: one group of all keys). The checks'
// results (Lost, Linearizability, ClusterCheck) are the caller's to fill.
func Summarize(ops []Op, faults []FaultEvent, loadStart, loadEnd time.Duration, pl Placement) *Report {
	r := &Report{LoadStart: loadStart, LoadEnd: loadEnd, Faults: []FaultStats{}, Lost: []Loss{}, Timeline: []Second{}}
	var load []Op
	for _, op := range ops {
		r.Operations.add(op.Outcome)
		if op.Stage == StageLoad {
			load = append(load, op)
		}
	}
	slices.SortFunc(load, func(a, b Op) int { return cmp.Compare(a.Return, b.Return) })
	r.Timeline = timeline(load, loadStart)
	r.Phases = phases(load, faults, loadStart, loadEnd)
	r.Latency = latencies(okLatencies(load))
	byRegion := successesByRegion(load, pl)
	r.Faults, r.Unavailability, r.Regions = faultStats(load, faults, loadStart, loadEnd, byRegion)
	return r
}

// timeline counts the load's outcomes per second from loadStart.
func timeline(load []Op, loadStart time.Duration) []Second {
	tl := []Second{}
	for _, op := range load {
		t := int((op.Return - loadStart) / time.Second)
		for len(tl) <= t {
			tl = append(tl, Second{T: len(tl)})
		}
		tl[t].add(op.Outcome)
	}
	return tl
}

// phases sums the load up in the phases the faults make: before the
// first, during each, between two, after the last (only before without
// faults); a phase of no time is left out.
func phases(load []Op, faults []FaultEvent, loadStart, loadEnd time.Duration) []Phase {
	ps := []*Phase{{Name: PhaseBefore}, {Name: PhaseDuring}, {Name: PhaseBetween}, {Name: PhaseAfter}}
	if len(faults) == 0 {
		ps[0].spans = []span{{loadStart, loadEnd}}
	} else {
		ps[0].spans = []span{{loadStart, faults[0].Fault}}
		for i, f := range faults {
			ps[1].spans = append(ps[1].spans, span{f.Fault, f.Heal})
			if i+1 < len(faults) {
				ps[2].spans = append(ps[2].spans, span{f.Heal, faults[i+1].Fault})
			}
		}
		ps[3].spans = []span{{faults[len(faults)-1].Heal, loadEnd}}
	}
	var out []Phase
	for _, p := range ps {
		var d time.Duration
		for _, s := range p.spans {
			d += s.len()
		}
		if d <= 0 {
			continue
		}
		var lat []time.Duration
		for _, op := range load {
			if !slices.ContainsFunc(p.spans, func(s span) bool { return s.contains(op.Return) }) {
				continue
			}
			p.Counts.add(op.Outcome)
			if op.Outcome == OK {
				lat = append(lat, op.Latency())
			}
		}
		p.Seconds = d.Seconds()
		p.OpsPS = float64(p.Counts.OK) / p.Seconds
		p.ErrPS = float64(p.Counts.Errors()) / p.Seconds
		p.Latency = latencies(lat)
		out = append(out, *p)
	}
	return out
}

// okLatencies are the latencies of the load's successful operations.
func okLatencies(load []Op) []time.Duration {
	var lat []time.Duration
	for _, op := range load {
		if op.Outcome == OK {
			lat = append(lat, op.Latency())
		}
	}
	return lat
}

// regionSuccesses are, per region, the number of keys placed in it and
// the return times of its successful operations (sorted, as load is).
type regionSuccesses struct {
	regions []uint32 // sorted; {0} when nothing is known
	keys    map[uint32]int
	success map[uint32][]time.Duration
}

// successesByRegion groups the load's successes by the region of their
// key (0 when unknown).
func successesByRegion(load []Op, pl Placement) regionSuccesses {
	rs := regionSuccesses{keys: map[uint32]int{}, success: map[uint32][]time.Duration{}}
	for _, reg := range pl.Region {
		rs.keys[reg]++
	}
	for _, op := range load {
		if op.Outcome == OK {
			reg := pl.Region[op.Key] // 0 when unknown
			rs.success[reg] = append(rs.success[reg], op.Return)
		}
	}
	seen := map[uint32]bool{}
	for reg := range rs.keys {
		seen[reg] = true
	}
	for reg := range rs.success {
		seen[reg] = true
	}
	rs.regions = slices.Sorted(maps.Keys(seen))
	if len(rs.regions) == 0 {
		rs.regions = []uint32{0}
	}
	return rs
}

// faultStats measures each fault: the success rates before, during and
// after it, and per region the unavailability it caused (the longest gap
// between successes from the fault to the next one); then the spread of
// the worst region's per fault, and of each region's.
func faultStats(load []Op, faults []FaultEvent, loadStart, loadEnd time.Duration, rs regionSuccesses) ([]FaultStats, Spread, []RegionStats) {
	okIn := func(s span) float64 {
		if s.len() <= 0 {
			return 0
		}
		n := 0
		for _, op := range load {
			if op.Outcome == OK && s.contains(op.Return) {
				n++
			}
		}
		return float64(n) / s.len().Seconds()
	}
	out := []FaultStats{}
	perRegion := map[uint32][]time.Duration{}
	var worst []time.Duration
	for i, f := range faults {
		end, prev := loadEnd, loadStart
		if i+1 < len(faults) {
			end = faults[i+1].Fault
		}
		if i > 0 {
			prev = faults[i-1].Heal
		}
		fs := FaultStats{FaultEvent: f, ByRegion: map[uint32]time.Duration{},
			Before: okIn(span{prev, f.Fault}), During: okIn(span{f.Fault, f.Heal}), After: okIn(span{f.Heal, end})}
		for _, reg := range rs.regions {
			w := unavailable(rs.success[reg], f.Fault, end)
			fs.ByRegion[reg] = w
			fs.Unavailable = max(fs.Unavailable, w)
			perRegion[reg] = append(perRegion[reg], w)
		}
		worst = append(worst, fs.Unavailable)
		out = append(out, fs)
	}
	var regions []RegionStats
	if len(faults) > 0 {
		for _, reg := range rs.regions {
			regions = append(regions, RegionStats{Region: reg, Keys: rs.keys[reg], Unavailable: spread(perRegion[reg])})
		}
	}
	return out, spread(worst), regions
}

// unavailable returns the longest gap between successes (sorted return
// times) that overlaps [from, to): from the last success before from (or
// from itself) through each success in [from, to), to to.
func unavailable(success []time.Duration, from, to time.Duration) time.Duration {
	i, _ := slices.BinarySearch(success, from)
	prev := from
	if i > 0 {
		prev = success[i-1]
	}
	var longest time.Duration
	for ; i < len(success) && success[i] < to; i++ {
		longest = max(longest, success[i]-prev)
		prev = success[i]
	}
	return max(longest, to-prev)
}

// latencies returns the p50/p99/max of ds (reordered).
func latencies(ds []time.Duration) Latency {
	s := spread(ds)
	return Latency(s)
}

// spread returns the p50/p99/max of ds (sorted in place); zero if empty.
func spread(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	slices.Sort(ds)
	return Spread{P50: percentile(ds, 50), P99: percentile(ds, 99), Max: ds[len(ds)-1]}
}

// percentile returns the p-th percentile of sorted ds, nearest rank.
func percentile(ds []time.Duration, p int) time.Duration {
	rank := (p*len(ds) + 99) / 100 // ceil(p/100 * n)
	return ds[max(rank, 1)-1]
}
