package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellstore/cell/locality/sim"
)

// newSimCommand groups the simulations of the locality selector.
func newSimCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate the locality selector's queueing model (paper §2.5, §4.4)",
		Long: `Run the locality package's discrete-event simulation of the Cell paper's
queueing model: servers with a CPU queue (one FIFO queue, --cores cores)
and a NIC read queue, clients each with their own selector. Runs are
deterministic: the same flags and --seed print the same numbers.`,
		Args: cobra.NoArgs, // "cellctl sim bogus" is an error, not help
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSimTable2Command(g), newSimSpikeCommand(g))
	return cmd
}

// addModelFlags binds the cluster model's flags (all but cores).
func addModelFlags(fs *pflag.FlagSet, m *sim.Model) {
	fs.IntVar(&m.Servers, "servers", sim.DefaultServers, "servers; each search goes to one at random")
	fs.Float64Var(&m.CoreRate, "core-rate", sim.DefaultCoreRate, "server-side searches per second per core")
	fs.Float64Var(&m.NICRate, "nic-rate", sim.DefaultNICRate, "one-sided 1 KiB reads per second per server NIC")
	fs.DurationVar(&m.RTT, "rtt", sim.DefaultRTT, "network round trip, without service time")
	fs.DurationVar(&m.NetJitter, "net-jitter", 0, "mean of an exponential delay added to every round trip")
	fs.IntVar(&m.M, "m", sim.DefaultM, "reads per client-side meganode traversal (meganode height)")
	fs.Float64Var(&m.Jitter, "service-jitter", sim.DefaultJitter, "service times spread uniformly over ±this fraction of their mean (negative: fixed)")
	fs.Uint64Var(&m.Seed, "seed", sim.DefaultSeed, "random seed; the same seed gives the same result")
	fs.IntVar(&m.Selector.Window, "window", 0, "selector: samples per moving average, n (0: default 100)")
	fs.Float64Var(&m.Selector.OutlierK, "outlier-k", 0, "selector: outlier threshold K (0: default 3, negative: off)")
	fs.Float64Var(&m.Selector.Explore, "explore", 0, "selector: exploration probability p (0: default 0.01, negative: off)")
	fs.BoolVar(&m.Selector.IgnoreServerTimes, "ignore-server-times", false, "selector: estimate l_s from latencies alone, as the paper does, not with the servers' reported queueing times (locality.Options.IgnoreServerTimes)")
}

func modelTitle(m sim.Model) string {
	t := fmt.Sprintf("%d servers; %s searches/s per core; %s reads/s per NIC; RTT %v", m.Servers,
		fmtRate(m.CoreRate), fmtRate(m.NICRate), m.RTT)
	if m.NetJitter > 0 {
		t += fmt.Sprintf(" + exp(%v)", m.NetJitter)
	}
	return t + fmt.Sprintf("; m=%d; seed %d", m.M, m.Seed)
}

func newSimTable2Command(g *globals) *cobra.Command {
	var p sim.Table2
	cmd := &cobra.Command{
		Use:   "table2",
		Short: "Throughput at 1–8 server cores: server-only, client-only, adaptive, best fixed ratio (paper Table 2)",
		Long: `Reproduce the shape of the paper's Table 2: saturating closed-loop load,
throughput per core count of server-only and client-only search, the
adaptive selector (with its server-side share), and the best fixed ratio
found by sweeping the server-side percentage from 0 to 100% in --ratio-step
steps. Client-only does not depend on the cores; it is simulated once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p.EnsureDefaults() // for the title; Run works on its own copy
			if err := p.Validate(); err != nil {
				return err
			}
			bar := newProgress(g, "simulating", false)
			p.Progress = func(done, total int) { bar.set(done, total) }
			rows, err := p.Run()
			bar.finish()
			if err != nil {
				return err
			}
			return g.print(table2Result{p, rows}, func() []*table { return table2Tables(p, rows) })
		},
	}
	fs := cmd.Flags()
	addModelFlags(fs, &p.Model)
	fs.IntVar(&p.MinCores, "min-cores", 1, "fewest cores per server")
	fs.IntVar(&p.MaxCores, "max-cores", 8, "most cores per server")
	fs.IntVar(&p.Load.Clients, "clients", sim.DefaultClients, "client processes, each with its own selector")
	fs.IntVar(&p.Load.Outstanding, "outstanding", sim.DefaultOutstanding, "searches each client keeps in flight")
	fs.DurationVar(&p.Load.Warmup, "warmup", sim.DefaultWarmup, "simulated time before measuring")
	fs.DurationVar(&p.Load.Duration, "duration", sim.DefaultDuration, "simulated time measured per run")
	fs.Float64Var(&p.RatioStep, "ratio-step", 5, "step of the fixed-ratio sweep, in percent")
	fs.IntVar(&p.Parallel, "parallel", 1, "runs simulated at once (the result does not depend on it)")
	return cmd
}

func table2Tables(p sim.Table2, rows []sim.Table2Row) []*table {
	t := &table{
		title: fmt.Sprintf("Search throughput, %s; %d clients × %d in flight; %v measured after %v",
			modelTitle(p.Model), p.Load.Clients, p.Load.Outstanding, p.Load.Duration, p.Load.Warmup),
		header: []string{"CORES", "SERVER-ONLY", "CLIENT-ONLY", "CELL", "(SERVER-SIDE)", "BEST FIXED", "(AT)", "CELL/BEST", "CELL/(S+C)"},
	}
	for _, r := range rows {
		t.add(fmt.Sprint(r.Cores), fmtRate(r.ServerOnly.Rate), fmtRate(r.ClientOnly.Rate),
			fmtRate(r.Adaptive.Rate), fmtPercent(r.Adaptive.ServerShare),
			fmtRate(r.BestFixed.Rate), r.BestFixed.Mode.String(),
			fmtRatio(r.VsBest), fmtRatio(r.VsSum))
	}
	rule := "the paper's rule with the queue-aware estimate of l_s"
	if p.Model.Selector.IgnoreServerTimes {
		rule = "the paper's rule"
	}
	t.notes = []string{"CELL is the adaptive selector (" + rule + "); BEST FIXED is the best of server-only, client-only and every ratio=P in between."}
	return []*table{t}
}

// table2Result is the JSON output of sim table2.
type table2Result struct {
	Params sim.Table2      `json:"params"`
	Rows   []sim.Table2Row `json:"rows"`
}

func newSimSpikeCommand(g *globals) *cobra.Command {
	var p sim.Spike
	cmd := &cobra.Command{
		Use:   "spike",
		Short: "Latency through a 2.5× load spike: adaptive vs server-only (paper Fig. 7)",
		Long: `Reproduce the shape of the paper's Fig. 7: clients handed a search every
--interval each, without pipelining; for --length, --extra-clients more
clients join at the same rate. Prints latency percentiles by phase, the
selectors' server-side share and how fast it moved, and a timeline.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := p.Run()
			if err != nil {
				return err
			}
			return g.print(res, func() []*table { return spikeTables(res) })
		},
	}
	fs := cmd.Flags()
	addModelFlags(fs, &p.Model)
	fs.IntVar(&p.Model.Cores, "cores", sim.DefaultCores, "cores per server")
	fs.IntVar(&p.Clients, "clients", sim.DefaultSpikeClients, "clients of the base load")
	fs.IntVar(&p.ExtraClients, "extra-clients", sim.DefaultSpikeExtraClients, "clients added during the spike")
	fs.DurationVar(&p.Interval, "interval", sim.DefaultSpikeInterval, "time between two searches handed to one client")
	fs.IntVar(&p.Outstanding, "outstanding", 1, "searches a client keeps in flight (1: no pipelining)")
	fs.DurationVar(&p.Warmup, "warmup", sim.DefaultSpikeWarmup, "base load before measuring")
	fs.DurationVar(&p.Before, "before", sim.DefaultSpikeBefore, "measured base load before the spike")
	fs.DurationVar(&p.Length, "length", sim.DefaultSpikeLength, "length of the spike")
	fs.DurationVar(&p.After, "after", sim.DefaultSpikeAfter, "measured base load after the spike")
	fs.DurationVar(&p.Bucket, "bucket", sim.DefaultSpikeBucket, "width of a timeline row")
	fs.DurationVar(&p.Resolution, "resolution", sim.DefaultSpikeResolution, "interval over which the selectors' share is tracked to time the shift")
	return cmd
}

func spikeTables(r sim.SpikeResult) []*table {
	p := r.Params
	load := float64(p.Clients) / p.Interval.Seconds()
	spike := float64(p.Clients+p.ExtraClients) / p.Interval.Seconds()
	sum := &table{
		title: fmt.Sprintf("Load spike, %s; %d cores per server; %s searches/s, %s during the %v spike (%.1f×)",
			modelTitle(p.Model), p.Model.Cores, fmtRate(load), fmtRate(spike), p.Length, spike/load),
		header: []string{"MODE", "PHASE", "SEARCHES", "P50", "P90", "SERVER-SIDE"},
	}
	for _, run := range []sim.SpikeRun{r.Adaptive, r.ServerOnly} {
		for _, ph := range []struct {
			name string
			ph   sim.Phase
		}{{"before", run.Before}, {"spike", run.During}, {"after", run.After}} {
			sum.add(run.Mode.String(), ph.name, fmt.Sprint(ph.ph.Searches), fmtLatency(ph.ph.P50), fmtLatency(ph.ph.P90), fmtPercent(ph.ph.ServerShare))
		}
	}
	a := r.Adaptive
	sum.notes = []string{
		fmt.Sprintf("adaptive decisions server-side: %s before, %s late in the spike, %s late after it",
			fmtPercent(a.ShiftShare[0]), fmtPercent(a.ShiftShare[1]), fmtPercent(a.ShiftShare[2])),
		fmt.Sprintf("shift after the onset: %s; back after the end: %s (90%% of the change, %v resolution)",
			fmtShift(a.Shift), fmtShift(a.Recover), p.Resolution),
	}
	tl := &table{
		title:  fmt.Sprintf("Timeline (searches by the time they were handed over; spike from %v to %v)", p.Before, p.Before+p.Length),
		header: []string{"T", "ADAPTIVE P50", "P90", "SERVER-SIDE", "SERVER-ONLY P50", "P90"},
	}
	for i, b := range a.Timeline {
		s := r.ServerOnly.Timeline[i]
		tl.add(fmt.Sprint(b.Start), fmtLatency(b.P50), fmtLatency(b.P90), fmtPercent(b.ServerShare), fmtLatency(s.P50), fmtLatency(s.P90))
	}
	return []*table{sum, tl}
}

func fmtShift(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d == 0:
		return "no change"
	}
	return d.String()
}
