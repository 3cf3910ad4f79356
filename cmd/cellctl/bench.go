package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/rdma"
)

// benchParams are the flags of cellctl bench.
type benchParams struct {
	Mode              string        `json:"mode"`
	PaperRule         bool          `json:"paper_rule,omitempty"`
	IgnoreServerTimes bool          `json:"ignore_server_times,omitempty"`
	Provider          string        `json:"provider"`
	FabricProvider    string        `json:"fabric_provider,omitempty"`
	FabricAddr        string        `json:"fabric_addr,omitempty"`
	Clients           int           `json:"clients"`
	InFlight          int           `json:"in_flight"`
	Conns             int           `json:"conns_per_server"`
	Duration          time.Duration `json:"duration_ns"`
	Warmup            time.Duration `json:"warmup_ns"`
	Keys              int           `json:"keys"`
	Keyspace          int           `json:"keyspace"`
	Cache             string        `json:"cache"`
	CPUSlots          int           `json:"cpu_slots,omitempty"`
	Workload          string        `json:"workload"`
	WritePercent      float64       `json:"write_percent"`
	Distribution      string        `json:"distribution"`
	Interval          time.Duration `json:"interval_ns,omitempty"`
	Phases            string        `json:"phases,omitempty"`
	ValueSize         int           `json:"value_size"`
	KeyPrefix         string        `json:"key_prefix"`
	Seed              uint64        `json:"seed"`
	ServerPID         int           `json:"server_pid,omitempty"`
	NoProgress        bool          `json:"-"`
	CPUProfile        string        `json:"-"`

	// Target is what is measured: cell, or etcd (the cluster at
	// EtcdEndpoints, keys under EtcdPrefix).
	Target        string   `json:"target"`
	EtcdEndpoints []string `json:"etcd_endpoints,omitempty"`
	EtcdPrefix    string   `json:"etcd_prefix,omitempty"`

	mode locality.Mode
	// cpuSlots, shared by every client instance: --cpu-slots.
	cpuSlots *client.CPUSlots
	// keys picks the key of each operation (--distribution).
	keys keyChooser
	// mixed: each operation is a put with probability WritePercent,
	// else a read (mixed and ycsb-* workloads).
	mixed bool
	// phases are the --phases, parsed.
	phases []phase
	// durationSet and writePercentSet: the flags were given.
	durationSet, writePercentSet bool
	// inserts numbers the inserts of ycsb-d and ycsb-e; zetaBase is
	// zeta of the keyspace for ycsb-d's latest distribution.
	inserts  *insertCounter
	zetaBase zetaBase
}

// Workloads.
const (
	workloadSearch = "search" // Contains: a search without the value
	workloadGet    = "get"
	workloadPut    = "put"
	workloadMixed  = "mixed" // --write-percent puts, the rest gets
	// YCSB's core workloads A, B and C (reads are gets, updates puts of
	// stored keys), keys zipfian unless --distribution says otherwise.
	workloadYCSBA = "ycsb-a" // 50% puts
	workloadYCSBB = "ycsb-b" // 5% puts
	workloadYCSBC = "ycsb-c" // gets only
)

// ycsbWritePercent is the share of puts of each YCSB workload.
var ycsbWritePercent = map[string]float64{workloadYCSBA: 50, workloadYCSBB: 5, workloadYCSBC: 0}

// validate checks the flags and fills the derived fields.
func (p *benchParams) validate() error {
	if err := p.validateTarget(); err != nil {
		return err
	}
	p.Workload = strings.ToLower(p.Workload)
	p.mixed = p.Workload == workloadMixed
	switch p.Workload {
	case workloadSearch, workloadGet, workloadPut, workloadMixed:
		if p.Distribution == "" {
			p.Distribution = distUniform
		}
	case workloadYCSBA, workloadYCSBB, workloadYCSBC:
		if p.writePercentSet {
			return fmt.Errorf("--write-percent: workload %s has %v%% puts", p.Workload, ycsbWritePercent[p.Workload])
		}
		p.WritePercent, p.mixed = ycsbWritePercent[p.Workload], true
		if p.Distribution == "" {
			p.Distribution = distZipfian
		}
	case workloadYCSBD, workloadYCSBE, workloadYCSBF:
		if p.writePercentSet {
			return fmt.Errorf("--write-percent: workload %s has a fixed mix (%s)", p.Workload, ycsbDescription[p.Workload])
		}
		p.WritePercent = 0
		if p.Distribution == "" {
			p.Distribution = distZipfian
			if p.Workload == workloadYCSBD {
				p.Distribution = distLatest
			}
		}
	default:
		return fmt.Errorf("--workload %q: want search, get, put, mixed, ycsb-a, ycsb-b, ycsb-c, ycsb-d, ycsb-e or ycsb-f", p.Workload)
	}
	p.Distribution = strings.ToLower(p.Distribution)
	if p.Distribution == distLatest && p.Workload != workloadYCSBD {
		return fmt.Errorf("--distribution latest: only for ycsb-d (it reads the keys the run inserts)")
	}
	if err := p.parsePhases(); err != nil {
		return err
	}
	switch {
	case p.Clients < 1 || p.Clients > 1024:
		return fmt.Errorf("--clients %d: want 1..1024", p.Clients)
	case p.InFlight < 1 || p.InFlight > 4096:
		return fmt.Errorf("--in-flight %d: want 1..4096", p.InFlight)
	case p.Conns < 1 || p.Conns > 64:
		return fmt.Errorf("--conns %d: want 1..64", p.Conns)
	case p.Duration <= 0:
		return fmt.Errorf("--duration %v: want more than 0", p.Duration)
	case p.Interval < 0 || p.Interval > 0 && (p.Interval < 10*time.Millisecond || p.Duration/p.Interval > maxWindows):
		return fmt.Errorf("--interval %v: want 0 (off) or 10ms and more, at most %d per --duration", p.Interval, maxWindows)
	case p.Warmup < 0:
		return fmt.Errorf("--warmup %v: want 0 or more", p.Warmup)
	case p.Keys < 0 || p.Keyspace < 0:
		return fmt.Errorf("--keys %d, --keyspace %d: want 0 or more", p.Keys, p.Keyspace)
	case p.ValueSize < 0 || p.ValueSize > 1<<20:
		return fmt.Errorf("--value-size %d: want 0..1048576", p.ValueSize)
	case p.WritePercent < 0 || p.WritePercent > 100:
		return fmt.Errorf("--write-percent %v: want 0..100", p.WritePercent)
	case p.ServerPID < 0:
		return fmt.Errorf("--server-pid %d", p.ServerPID)
	case p.KeyPrefix == "":
		return fmt.Errorf("--key-prefix: want at least one byte")
	}
	if p.Keyspace == 0 {
		p.Keyspace = p.Keys
	}
	if p.Workload != workloadPut && p.Keyspace == 0 {
		return fmt.Errorf("--workload %s reads stored keys: give --keys N (to store them first) or --keyspace N (stored by an earlier run)", p.Workload)
	}
	if p.Keyspace == 0 {
		p.Keyspace = 100000
	}
	dist := p.Distribution
	if dist == distLatest {
		dist = distZipfian // for nothing: latest keys are drawn by latestKeys
		p.zetaBase = newZetaBase(p.Keyspace)
	}
	kc, err := newKeyChooser(dist, p.Keyspace)
	if err != nil {
		return err
	}
	p.keys = kc
	p.inserts = &insertCounter{base: max(p.Keys, p.Keyspace)}
	return nil
}

// validateTarget checks --target and the flags of that target. Against
// etcd, Cell's client flags (--mode, --provider, --cache, --conns) have no
// meaning and are cleared, so that no result suggests otherwise.
func (p *benchParams) validateTarget() error {
	switch p.Target = strings.ToLower(strings.TrimSpace(p.Target)); p.Target {
	case "", targetCell:
		p.Target, p.EtcdEndpoints, p.EtcdPrefix = targetCell, nil, ""
	case targetEtcd:
		var eps []string
		for _, ep := range p.EtcdEndpoints {
			if ep = strings.TrimSpace(ep); ep == "" {
				return fmt.Errorf("--etcd-bench-endpoints: empty endpoint in %q", strings.Join(p.EtcdEndpoints, ","))
			}
			eps = append(eps, ep)
		}
		if len(eps) == 0 {
			return fmt.Errorf("--target etcd: give the etcd cluster to measure with --etcd-bench-endpoints")
		}
		if p.EtcdPrefix == "" {
			return fmt.Errorf("--etcd-prefix-bench: want at least one byte")
		}
		p.EtcdEndpoints = eps
		p.Mode, p.PaperRule, p.IgnoreServerTimes, p.Provider, p.Cache, p.Conns = "", false, false, "", "", 1
		return nil
	default:
		return fmt.Errorf("--target %q: want cell or etcd", p.Target)
	}
	m, err := locality.ParseMode(p.Mode)
	if err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	p.mode, p.Mode = m, m.String()
	switch p.Provider = strings.ToLower(p.Provider); p.Provider {
	case client.ProviderTCP, client.ProviderSHM, client.ProviderAuto:
		p.FabricProvider, p.FabricAddr = "", ""
	case client.ProviderFabric:
		if err := checkFabricFlags(p.FabricProvider); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--provider %q: want tcp, shm, auto or fabric", p.Provider)
	}
	switch p.Cache = strings.ToLower(p.Cache); p.Cache {
	case "on", "off":
	default:
		return fmt.Errorf("--cache %q: want on or off", p.Cache)
	}
	switch {
	case p.CPUSlots < 0:
		return fmt.Errorf("--cpu-slots %d: want 0 (no bound) or more", p.CPUSlots)
	case p.CPUSlots > 0:
		p.cpuSlots = client.NewCPUSlots(p.CPUSlots)
	}
	return nil
}

// config returns the client configuration of one bench client.
func (p *benchParams) config(base client.Config) client.Config {
	base.Mode = p.mode
	base.Selector.PaperRule = p.PaperRule
	base.Selector.IgnoreServerTimes = p.IgnoreServerTimes
	base.Provider = p.Provider
	if p.Provider == client.ProviderFabric {
		base.Fabric = rdma.FabricClientOptions{Provider: p.FabricProvider, Node: p.FabricAddr}
	}
	base.ConnsPerServer = p.Conns
	if p.Cache == "off" {
		base.NodeCacheBytes = -1
		base.PathCacheEntries = -1
	}
	base.CPUSlots = p.cpuSlots
	return base
}

func newBenchCommand(g *globals) *cobra.Command {
	p := benchParams{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency of searches, gets and puts",
		Long: `Run a closed-loop workload against the cluster: --clients client
instances (each with its own selector and --conns connections per server),
each keeping --in-flight operations going, for --warmup then --duration.
--keys keys are stored first (values of --value-size bytes); operations
pick keys among --keyspace (default: the preloaded keys) with a generator
seeded by --seed, uniformly or with --distribution zipfian: YCSB's
scrambled zipfian (constant 0.99; the hottest key gets 3.8% of the
operations, popular keys are scattered over the keyspace).

Workloads: search (Contains: a search without the value), get, put,
mixed (--write-percent puts, the rest gets), and YCSB's core workloads
ycsb-a (50% puts, 50% gets), ycsb-b (5% puts), ycsb-c (gets only),
ycsb-d (5% inserts of new keys, 95% gets of keys chosen with YCSB's
"latest" distribution: the newest the most often), ycsb-e (5% inserts,
95% scans: a zipfian start key and 1..100 pairs, uniformly) and ycsb-f
(50% gets, 50% read-modify-writes: a get and a put of the key, timed as
one operation), zipfian unless --distribution uniform. Inserts store
keys after the preloaded ones (max(--keys, --keyspace) onwards). --mode sets the locality selector
(adaptive, server, client, ratio=P: P% of hops server-side), --provider
the one-sided read provider (fabric: over libfabric, with the servers'
--fabric-provider; cellctl built with -tags libfabric), --cache off disables the node and meganode
path caches.

Prints throughput, latency percentiles (also per operation kind when the
workload mixes them), the fraction of meganode hops done server-side and
the retries by cause, all over the measured --duration; with --server-pid
(a cellserver on this host) also the server's CPU seconds per operation,
from /proc/PID/stat. --interval D adds the same figures for every D of
the measured window (a time series), --phases the figures of consecutive
named periods (--phases base=5s,load=5s: --duration is their sum). A
progress bar goes to stderr when it is a terminal (not with
--no-progress).

Failed operations (errors; not found is no failure) are counted and
reported, and make cellctl exit with status 1 after the figures are
printed. Failed preload writes do too, before the run: the preload goes
on past a failure (it gives up after 100 of them) and then reports how
many of its writes failed.

--target etcd runs the same workloads, keys, values, clients and
operations in flight against the KV API of the etcd cluster at
--etcd-bench-endpoints (not --endpoints, which finds Cell), for
side-by-side comparisons: put is a Put, get a Get (linearizable), search
a Get with CountOnly, keys are stored under --etcd-prefix-bench, and every
client is its own etcd client (its own gRPC connection). --mode,
--provider, --cache and --conns do not apply; --server-pid can be etcd's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p.durationSet = cmd.Flags().Changed("duration")
			p.writePercentSet = cmd.Flags().Changed("write-percent")
			if err := p.validate(); err != nil {
				return err
			}
			res, err := runBench(g, &p)
			if err != nil {
				return err
			}
			if err := g.print(res, func() []*table { return benchTables(res) }); err != nil {
				return err
			}
			return benchFailure(res)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&p.Target, "target", targetCell, "what to measure: cell, or etcd (the KV API of the cluster at --etcd-bench-endpoints)")
	fs.StringSliceVar(&p.EtcdEndpoints, "etcd-bench-endpoints", nil, "--target etcd: endpoints of the etcd cluster to measure, comma-separated (not --endpoints, Cell's region table)")
	fs.StringVar(&p.EtcdPrefix, "etcd-prefix-bench", "/cellbench/", "--target etcd: prefix of the bench keys in etcd")
	fs.StringVar(&p.Mode, "mode", "adaptive", "search mode: adaptive, server, client or ratio=P")
	fs.BoolVar(&p.IgnoreServerTimes, "ignore-server-times", false, "adaptive: estimate a server-side search from latencies alone, as the paper does, not with the server's reported queueing times")
	fs.BoolVar(&p.PaperRule, "paper-rule", false, "adaptive: apply the paper's rule even where one-sided reads cost the server CPU (tcp), for side-by-side comparison")
	fs.StringVar(&p.Provider, "provider", "tcp", "one-sided read provider: tcp, shm, auto or fabric (libfabric: --fabric-provider)")
	addFabricFlags(fs, &p.FabricProvider, &p.FabricAddr)
	fs.IntVar(&p.Clients, "clients", 4, "client instances, each with its own selector and connections")
	fs.IntVar(&p.InFlight, "in-flight", 1, "operations each client keeps in flight (pipelining)")
	fs.IntVar(&p.Conns, "conns", client.DefaultConnsPerServer, "connections per client and server")
	fs.DurationVar(&p.Duration, "duration", 10*time.Second, "measured time")
	fs.DurationVar(&p.Warmup, "warmup", time.Second, "time run before measuring (the selector settles)")
	fs.IntVar(&p.Keys, "keys", 10000, "keys stored before the run (0: none; put only)")
	fs.IntVar(&p.Keyspace, "keyspace", 0, "keys operations choose from (default: --keys, or 100000 without)")
	fs.StringVar(&p.Cache, "cache", "on", "node and meganode path caches: on or off")
	fs.IntVar(&p.CPUSlots, "cpu-slots", 0, "while a server-side call waits, at most this many goroutines of all client instances do client-side work over shm (client.Config.CPUSlots; 0: no bound)")
	fs.StringVar(&p.Workload, "workload", "get", "search, get, put, mixed, ycsb-a, ycsb-b, ycsb-c, ycsb-d, ycsb-e or ycsb-f")
	fs.Float64Var(&p.WritePercent, "write-percent", 10, "mixed: percentage of puts")
	fs.StringVar(&p.Distribution, "distribution", "", "key choice: uniform, zipfian (YCSB's scrambled zipfian) or latest (ycsb-d); default latest for ycsb-d, zipfian for the other ycsb-*, else uniform")
	fs.DurationVar(&p.Interval, "interval", 0, "also report every interval of the measured window (0: off)")
	fs.StringVar(&p.Phases, "phases", "", "also report consecutive periods of the measured window: [NAME=]DURATION,... (sets --duration to their sum)")
	fs.IntVar(&p.ValueSize, "value-size", 64, "bytes per value")
	fs.StringVar(&p.KeyPrefix, "key-prefix", "bench/", "prefix of the keys (then 12 digits)")
	fs.Uint64Var(&p.Seed, "seed", 1, "random seed of key choice and values")
	fs.IntVar(&p.ServerPID, "server-pid", 0, "PID of a cellserver on this host, to report its CPU time per operation")
	fs.BoolVar(&p.NoProgress, "no-progress", false, "no progress bar")
	fs.StringVar(&p.CPUProfile, "cpu-profile", "", "write a CPU profile of the measured window (this process) to this file")
	cmd.AddCommand(newBenchTransportCommand(g))
	return cmd
}

// benchFailure is the error of a run whose operations failed (not found
// is no failure): the figures are printed, then cellctl exits 1.
func benchFailure(r benchResult) error {
	if r.Errors == 0 {
		return nil
	}
	msg := fmt.Sprintf("bench: %d of %d operations failed", r.Errors, r.Ops)
	if r.FirstError != "" {
		msg += "; first error: " + r.FirstError
	}
	return errors.New(msg)
}

// benchResult is the outcome of a bench run (the JSON output).
type benchResult struct {
	Params benchParams `json:"params"`
	// Ops counts operations completed in the measured window, Errors
	// those that failed (not-found answers excluded: NotFound counts them).
	Ops      uint64  `json:"ops"`
	Errors   uint64  `json:"errors"`
	NotFound uint64  `json:"not_found"`
	Seconds  float64 `json:"seconds"`
	// Throughput is Ops per second.
	Throughput float64 `json:"throughput"`
	latencies
	// ServerHops and ClientHops count meganode hops by method (client
	// Stats); ServerSide is ServerHops over both, -1 without hops.
	ServerHops uint64            `json:"server_hops"`
	ClientHops uint64            `json:"client_hops"`
	ServerSide float64           `json:"server_side_fraction"`
	Reads      uint64            `json:"one_sided_reads"`
	Retries    map[string]uint64 `json:"retries"`
	// M is the selectors' mean meganode height estimate at the end.
	M float64 `json:"m"`
	// Selector sums the selectors' decisions in the window and what
	// their estimators did with samples (adaptive mode's diagnostics).
	Selector selectorSummary `json:"selector"`
	// ServerCPU is the server's CPU seconds (user + system) during the
	// window, with --server-pid (else nil); ServerCPUPerOp per operation,
	// in µs. /proc counts in 10 ms ticks.
	ServerCPU      *float64 `json:"server_cpu_seconds,omitempty"`
	ServerCPUPerOp *float64 `json:"server_cpu_us_per_op,omitempty"`
	// ClientCPUPerOp is this process's CPU per operation, in µs.
	ClientCPUPerOp float64 `json:"client_cpu_us_per_op"`
	FirstError     string  `json:"first_error,omitempty"`
	// ByOp breaks the operations down by kind (get, put, search).
	ByOp map[string]opResult `json:"by_op"`
	// StartUnixNano and EndUnixNano are the wall-clock ends of the
	// measured window, to line up runs of several processes.
	StartUnixNano int64 `json:"start_unix_ns"`
	EndUnixNano   int64 `json:"end_unix_ns"`
	// Intervals (--interval) and Phases (--phases) are the figures of
	// consecutive parts of the measured window.
	Intervals    []benchWindow `json:"intervals,omitempty"`
	PhaseResults []benchWindow `json:"phases,omitempty"`
}

// latencies are the latency figures of a result, a window or an
// operation kind (embedded: their JSON fields are the owner's).
type latencies struct {
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"` // p99.9
	Max  time.Duration `json:"max_ns"`
}

// opResult are the figures of one kind of operation.
type opResult struct {
	Ops      uint64 `json:"ops"`
	Errors   uint64 `json:"errors"`
	NotFound uint64 `json:"not_found"`
	latencies
}

func benchTables(r benchResult) []*table {
	p := r.Params
	workload := p.Workload
	switch {
	case ycsbDescription[p.Workload] != "":
		workload += " (" + ycsbDescription[p.Workload] + ")"
	case p.Workload == workloadMixed:
		workload += fmt.Sprintf(" (%v%% puts)", p.WritePercent)
	}
	t := &table{
		title: fmt.Sprintf("bench: %s workload, %s × %d in flight (%s each), provider %s, cache %s, %s, %s over %d, %d-byte values; %v measured after %v",
			workload, plural(p.Clients, "client"), p.InFlight, plural(p.Conns, "conn"), p.Provider, p.Cache, plural(p.Keys, "key"), p.Distribution, p.Keyspace, p.ValueSize, p.Duration, p.Warmup),
		header: []string{"MODE", "OPS", "THROUGHPUT", "MEAN", "P50", "P99", "P99.9", "MAX", "SERVER-SIDE", "ERRORS"},
	}
	mode := p.Mode
	if p.Target == targetEtcd {
		t.title = fmt.Sprintf("bench, target etcd at %s (keys under %s): %s workload, %s × %d in flight, %s, %s over %d, %d-byte values; %v measured after %v",
			strings.Join(p.EtcdEndpoints, ","), p.EtcdPrefix, workload, plural(p.Clients, "client"), p.InFlight, plural(p.Keys, "key"), p.Distribution, p.Keyspace, p.ValueSize, p.Duration, p.Warmup)
		t.header[0], mode = "TARGET", targetEtcd
	}
	row := []string{mode, fmt.Sprint(r.Ops), fmtOpsRate(r.Throughput), fmtLatency(r.Mean), fmtLatency(r.P50), fmtLatency(r.P99),
		fmtLatency(r.P999), fmtLatency(r.Max), fmtFraction(r.ServerSide), fmt.Sprint(r.Errors)}
	if r.ServerCPUPerOp != nil {
		t.header = append(t.header, "SERVER CPU/OP")
		row = append(row, fmtMicros(*r.ServerCPUPerOp))
	}
	t.header = append(t.header, "CLIENT CPU/OP")
	row = append(row, fmtMicros(r.ClientCPUPerOp))
	t.add(row...)
	if len(r.ByOp) > 1 {
		for _, op := range slices.Sorted(maps.Keys(r.ByOp)) {
			o := r.ByOp[op]
			t.notes = append(t.notes, fmt.Sprintf("%s: %s, mean %s, p50 %s, p99 %s, p99.9 %s, max %s, %s",
				op, plural(o.Ops, "op"), fmtLatency(o.Mean), fmtLatency(o.P50), fmtLatency(o.P99), fmtLatency(o.P999), fmtLatency(o.Max), plural(o.Errors, "error")))
		}
	}
	if p.Target != targetEtcd {
		t.notes = append(t.notes, "retries: "+fmtRetries(r.Retries))
		t.notes = append(t.notes, fmt.Sprintf("meganode hops: %d server-side, %d client-side (%d one-sided reads); m=%.2f", r.ServerHops, r.ClientHops, r.Reads, r.M))
	}
	if sel := r.Selector; p.Target != targetEtcd && p.mode.Kind == locality.Adaptive && sel.Decisions.Total() > 0 {
		t.notes = append(t.notes, fmt.Sprintf("selector: %d server, %d client decisions (%d exploring); l_s %v, l_r %v, RTT %v; l_r samples %d, %d dropped, %d resets; %d idle resets",
			sel.Decisions.Server, sel.Decisions.Client, sel.Decisions.Explore, fmtLatency(sel.MeanLS), fmtLatency(sel.MeanLR), fmtLatency(sel.RTT),
			sel.LR.Observed, sel.LR.Dropped, sel.LR.Resets, sel.IdleResets))
	}
	if sel := r.Selector; p.Target != targetEtcd && sel.PageDecisions.Total() > 0 {
		t.notes = append(t.notes, fmt.Sprintf("range pages: %d server-side, %d client-side (%d exploring); cost per pair: server %v, client %v",
			sel.PageDecisions.Server, sel.PageDecisions.Client, sel.PageDecisions.Explore, fmtLatency(sel.PageServer), fmtLatency(sel.PageClient)))
	}
	if r.NotFound > 0 {
		t.notes = append(t.notes, fmt.Sprintf("not found: %d", r.NotFound))
	}
	if r.FirstError != "" {
		t.notes = append(t.notes, "first error: "+oneLine(r.FirstError))
	}
	tables := []*table{t}
	if len(r.PhaseResults) > 0 {
		tables = append(tables, windowTable("Phases", r.PhaseResults))
	}
	if len(r.Intervals) > 0 {
		tables = append(tables, windowTable(fmt.Sprintf("Every %v", p.Interval), r.Intervals))
	}
	return tables
}

// selectorSummary sums the selectors' state over the measured window.
type selectorSummary struct {
	Decisions locality.Decisions `json:"decisions"`
	// PageDecisions are the range page decisions; PageServer and
	// PageClient average the estimators' final costs per pair of
	// server-side and client-side pages.
	PageDecisions locality.Decisions `json:"page_decisions"`
	PageServer    time.Duration      `json:"page_server_ns"`
	PageClient    time.Duration      `json:"page_client_ns"`
	// LS and LR count, over every estimator, the samples offered to the
	// l_s and l_r averages, those dropped as outliers and the history
	// resets (more dropped than kept).
	LS sampleCounts `json:"ls"`
	LR sampleCounts `json:"lr"`
	// IdleResets counts histories dropped after 3 s idle.
	IdleResets uint64 `json:"idle_resets"`
	// MeanLS, MeanLR and RTT average the estimators' final l_s, l_r and
	// RTT.
	MeanLS time.Duration `json:"mean_ls_ns"`
	MeanLR time.Duration `json:"mean_lr_ns"`
	RTT    time.Duration `json:"rtt_ns"`
}

type sampleCounts struct {
	Observed uint64 `json:"observed"`
	Dropped  uint64 `json:"dropped"`
	Resets   uint64 `json:"resets"`
}

// fmtOpsRate formats operations per second.
func fmtOpsRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM/s", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fK/s", v/1e3)
	default:
		return fmt.Sprintf("%.0f/s", v)
	}
}

// fmtFraction formats a fraction as a percentage, "-" when negative
// (undefined).
func fmtFraction(f float64) string {
	if f < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func fmtMicros(us float64) string { return fmt.Sprintf("%.2fµs", us) }

// fmtRetries lists the non-zero retry counts by cause, sorted.
func fmtRetries(m map[string]uint64) string {
	var parts []string
	for k, v := range m {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
