package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// cellctl bench transport: the transports under Cell, without the tree
// (the paper's Table 1): one-sided reads of --read-size bytes spread over
// a region, small RPCs (wire pings of --rpc-size bytes, echoed), and both
// at once, per one-sided provider and number of operations in flight,
// with the server's CPU per operation.

// transportParams are the flags of cellctl bench transport.
type transportParams struct {
	Providers      []string      `json:"providers"`
	FabricProvider string        `json:"fabric_provider,omitempty"`
	FabricAddr     string        `json:"fabric_addr,omitempty"`
	Region         uint32        `json:"region"`
	ReadSize       int           `json:"read_size"`
	RPCSize        int           `json:"rpc_size"`
	InFlight       []int         `json:"in_flight"`
	Workloads      []string      `json:"workloads"`
	Duration       time.Duration `json:"duration_ns"`
	Warmup         time.Duration `json:"warmup_ns"`
	Repeat         int           `json:"repeat"`
	ServerPID      int           `json:"server_pid,omitempty"`
	Seed           uint64        `json:"seed"`

	idle time.Duration // the server's CPU per second, idle
}

// Workloads of bench transport.
const (
	transportRead = "read" // one-sided reads
	transportRPC  = "rpc"  // wire pings
	transportMix  = "mix"  // both: each worker alternates them
)

// transportRow is one measured cell: a workload over one provider with a
// number of operations in flight, in one round.
type transportRow struct {
	Round    int    `json:"round"`
	Workload string `json:"workload"`
	// Provider is the one-sided provider ("fabric/tcp;ofi_rxm" for the
	// fabric provider); empty for rpc.
	Provider  string        `json:"provider,omitempty"`
	InFlight  int           `json:"in_flight"`
	Ops       uint64        `json:"ops"`
	OpsPerSec float64       `json:"ops_per_sec"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	// ServerCPUPerOp is the server's CPU time (all its threads) per
	// operation over the window, with --server-pid; -1 without.
	// ServerBusyPerOp is the part above what the server spends idle
	// (transportResult.ServerIdle).
	ServerCPUPerOp  time.Duration `json:"server_cpu_per_op_ns"`
	ServerBusyPerOp time.Duration `json:"server_busy_cpu_per_op_ns"`
	// ClientCPUPerOp is this process's.
	ClientCPUPerOp time.Duration `json:"client_cpu_per_op_ns"`
	Errors         uint64        `json:"errors"`
	FirstError     string        `json:"first_error,omitempty"`
}

// transportResult is what bench transport prints.
type transportResult struct {
	Params     transportParams `json:"params"`
	Region     uint32          `json:"region"`
	RegionSize uint64          `json:"region_size"`
	Host       string          `json:"host"`
	HostRPC    string          `json:"host_rpc"`
	// ServerIdle is the server's CPU time per second with nothing
	// measured running (its raft ticks, lease renewals, fabric progress
	// ticks), over --duration before the grid; -1 without --server-pid.
	ServerIdle time.Duration  `json:"server_idle_cpu_per_sec_ns"`
	Rows       []transportRow `json:"rows"`
}

func newBenchTransportCommand(g *globals) *cobra.Command {
	p := transportParams{}
	var providers, inflight, workloads string
	cmd := &cobra.Command{
		Use:   "transport",
		Short: "Measure the transports: one-sided reads, small RPCs and both, per provider, with the server's CPU per operation",
		Long: `Measure what Cell's searches are made of, without the tree (the shape of
the paper's Table 1): one-sided reads of --read-size bytes (1 KiB) at
random 8-byte aligned offsets over a whole region, small RPCs (wire pings
of --rpc-size bytes, echoed by the region's host), and both at once
(each worker alternates a read and an RPC), for each one-sided provider
in --providers (tcp: the tcp responder; shm: same-host shared memory;
fabric: libfabric with --fabric-provider, or fabric/PROVIDER, say
fabric/shm,fabric/tcp; cellctl built with -tags libfabric) and each number of operations in flight in --in-flight (each
a closed-loop worker). The region is --region, or the root's; the
servers must have registered it with the providers (cellserver
--provider fabric for fabric).

Every cell runs --warmup then --duration; the whole grid runs --repeat
times, the providers in a rotated order each round, and every round is
printed (the machine may be shared: compare within a round). With
--server-pid (the region's host on this host) the server's CPU time per
operation is given, from /proc/PID/task/*/schedstat (all its threads,
libfabric's included); this process's is given too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.parse(providers, inflight, workloads); err != nil {
				return err
			}
			res, err := runTransport(g, &p)
			if err != nil {
				return err
			}
			return g.print(res, func() []*table { return transportTables(res) })
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&providers, "providers", "tcp,shm", "one-sided providers to measure, comma-separated: tcp, shm, fabric (--fabric-provider's), fabric/PROVIDER (fabric/shm, fabric/verbs)")
	addFabricFlags(fs, &p.FabricProvider, &p.FabricAddr)
	fs.Uint32Var(&p.Region, "region", 0, "region to read (default: the root's)")
	fs.IntVar(&p.ReadSize, "read-size", 1024, "bytes per one-sided read (a multiple of 8)")
	fs.IntVar(&p.RPCSize, "rpc-size", 128, "bytes per RPC request (echoed in the reply)")
	fs.StringVar(&inflight, "in-flight", "1,16", "operations in flight, comma-separated: one cell each")
	fs.StringVar(&workloads, "workloads", "read,rpc,mix", "workloads, comma-separated: read, rpc, mix")
	fs.DurationVar(&p.Duration, "duration", 3*time.Second, "measured time per cell")
	fs.DurationVar(&p.Warmup, "warmup", 500*time.Millisecond, "time run before measuring, per cell")
	fs.IntVar(&p.Repeat, "repeat", 1, "rounds over the whole grid")
	fs.IntVar(&p.ServerPID, "server-pid", 0, "PID of the region's host (a cellserver on this host), for its CPU per operation")
	fs.Uint64Var(&p.Seed, "seed", 1, "random seed of the read offsets")
	return cmd
}

// parse checks the flags.
func (p *transportParams) parse(providers, inflight, workloads string) error {
	for _, s := range strings.Split(providers, ",") {
		s = strings.TrimSpace(s)
		name, lf, _ := strings.Cut(s, "/")
		switch name {
		case rdma.ProviderTCP, rdma.ProviderSHM:
			if lf != "" {
				return fmt.Errorf("--providers: %q: only fabric takes a libfabric provider", s)
			}
		case rdma.ProviderFabric:
			if lf == "" {
				lf = p.FabricProvider
			}
			if err := checkFabricFlags(lf); err != nil {
				return err
			}
			s = name + "/" + lf
		default:
			return fmt.Errorf("--providers: %q is not tcp, shm, fabric or fabric/PROVIDER", s)
		}
		if !slices.Contains(p.Providers, s) {
			p.Providers = append(p.Providers, s)
		}
	}
	if !slices.ContainsFunc(p.Providers, func(s string) bool { return strings.HasPrefix(s, rdma.ProviderFabric) }) {
		p.FabricProvider, p.FabricAddr = "", ""
	}
	for _, s := range strings.Split(inflight, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("--in-flight: %q is not a number in [1, 1024]", s)
		}
		p.InFlight = append(p.InFlight, n)
	}
	for _, s := range strings.Split(workloads, ",") {
		switch s = strings.TrimSpace(strings.ToLower(s)); s {
		case transportRead, transportRPC, transportMix:
			p.Workloads = append(p.Workloads, s)
		default:
			return fmt.Errorf("--workloads: %q is not read, rpc or mix", s)
		}
	}
	switch {
	case p.ReadSize < 8 || p.ReadSize%8 != 0 || p.ReadSize > rdma.DefaultMaxReadLen:
		return fmt.Errorf("--read-size %d: want a multiple of 8 in [8, %d]", p.ReadSize, rdma.DefaultMaxReadLen)
	case p.RPCSize < 0 || p.RPCSize > 1<<20:
		return fmt.Errorf("--rpc-size %d: want [0, 1MiB]", p.RPCSize)
	case p.Duration <= 0 || p.Warmup < 0:
		return fmt.Errorf("--duration %v, --warmup %v: want a positive duration and a warmup of 0 or more", p.Duration, p.Warmup)
	case p.Repeat < 1:
		return fmt.Errorf("--repeat %d: want at least 1", p.Repeat)
	}
	return nil
}

// transportReader is one provider's client and the region's key for it.
type transportReader struct {
	name string
	cl   rdma.Client
	rk   rdma.RemoteKey
}

func runTransport(g *globals, p *transportParams) (transportResult, error) {
	res := transportResult{Params: *p}
	store, err := g.openTable()
	if err != nil {
		return res, err
	}
	defer store.Close()
	ctx, cancel := g.commandContext()
	defer cancel()
	eps, _ := g.etcdEndpoints()
	st, err := loadTable(ctx, store, eps)
	if err != nil {
		return res, err
	}
	id := p.Region
	if id == 0 {
		id = st.Root.Region()
	}
	var entry *regiontable.Region
	for i := range st.Regions {
		if st.Regions[i].ID == id {
			entry = &st.Regions[i]
		}
	}
	if entry == nil {
		return res, fmt.Errorf("region %d is not in the region table", id)
	}
	var host *regiontable.Member
	for i := range st.Members {
		if st.Members[i].ID == entry.Host {
			host = &st.Members[i]
		}
	}
	if host == nil {
		return res, fmt.Errorf("region %d's host %s is not a live member", id, entry.Host)
	}
	res.Region, res.RegionSize, res.Host, res.HostRPC = id, entry.Size, host.ID, host.RPCAddr
	readers, err := p.openReaders(entry)
	defer func() {
		for _, r := range readers {
			_ = r.cl.Close()
		}
	}()
	if err != nil {
		return res, err
	}
	conn, err := g.dialServer(ctx, host.RPCAddr)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	res.ServerIdle = -1
	if p.ServerPID > 0 {
		c0, err0 := threadsCPU(p.ServerPID)
		start := time.Now()
		time.Sleep(p.Duration)
		c1, err1 := threadsCPU(p.ServerPID)
		if err0 != nil || err1 != nil {
			return res, fmt.Errorf("--server-pid %d: %w", p.ServerPID, errors.Join(err0, err1))
		}
		res.ServerIdle = time.Duration(float64(c1-c0) / time.Since(start).Seconds())
		p.idle = res.ServerIdle
	}
	for round := 1; round <= p.Repeat; round++ {
		for _, depth := range p.InFlight {
			for _, w := range p.Workloads {
				if w == transportRPC {
					res.Rows = append(res.Rows, p.measure(round, w, nil, conn, depth))
					continue
				}
				// Rotate the providers' order each round.
				for k := range readers {
					r := &readers[(k+round-1)%len(readers)]
					res.Rows = append(res.Rows, p.measure(round, w, r, conn, depth))
				}
			}
		}
	}
	return res, nil
}

// openReaders opens a client of each provider and finds the region's key
// for it.
func (p *transportParams) openReaders(e *regiontable.Region) ([]transportReader, error) {
	var out []transportReader
	for _, label := range p.Providers {
		name, lf, _ := strings.Cut(label, "/")
		node := p.FabricAddr
		if rdma.LibfabricName(lf) == "shm" {
			node = ""
		}
		cfg := rdma.ClientConfig{Provider: name, TCP: rdma.TCPClientOptions{Logger: quietLogger},
			Fabric: rdma.FabricClientOptions{Provider: lf, Node: node, Logger: quietLogger}}
		cl, err := rdma.NewClient(cfg)
		if err != nil {
			return out, fmt.Errorf("%s client: %w", label, err)
		}
		out = append(out, transportReader{name: label, cl: cl})
		found := false
		for _, raw := range e.ReadKey {
			var rk rdma.RemoteKey
			if json.Unmarshal(raw, &rk) != nil || rk.Provider != name {
				continue
			}
			if name == rdma.ProviderFabric && rdma.FabricKeyProvider(&rk) != rdma.LibfabricName(lf) {
				continue
			}
			out[len(out)-1].rk, found = rk, true
			break
		}
		if !found {
			return out, fmt.Errorf("region %d has no %s registration (its host registers %s)", e.ID, label, keyProviders(e))
		}
	}
	return out, nil
}

// keyProviders lists the providers region e has keys of.
func keyProviders(e *regiontable.Region) string {
	var names []string
	for _, raw := range e.ReadKey {
		var k rdma.RemoteKey
		if json.Unmarshal(raw, &k) == nil {
			if lf := rdma.FabricKeyProvider(&k); lf != "" {
				k.Provider += "/" + lf
			}
			names = append(names, k.Provider)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// measure runs one cell: depth workers for the warmup, then the measured
// window.
func (p *transportParams) measure(round int, workload string, r *transportReader, conn *wire.Conn, depth int) transportRow {
	row := transportRow{Round: round, Workload: workload, InFlight: depth, ServerCPUPerOp: -1}
	if r != nil {
		row.Provider = r.name
	}
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		wg        sync.WaitGroup
		mu        sync.Mutex
		hist      histogram
		ops       uint64
	)
	errs := make([]error, depth)
	errCount := make([]uint64, depth)
	body := make([]byte, p.RPCSize)
	for w := range depth {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(p.Seed, uint64(round)<<32|uint64(w)))
			dst := atomicmem.Alloc(p.ReadSize)
			var h histogram
			var n uint64
			slots := uint64(0)
			if r != nil {
				slots = (r.rk.Len - uint64(p.ReadSize)) / 8
			}
			for i := 0; !stop.Load(); i++ {
				read := workload == transportRead || workload == transportMix && (i+w)%2 == 0
				start := time.Now()
				var err error
				if read {
					err = r.cl.Read(context.Background(), &r.rk, rng.Uint64N(slots+1)*8, dst)
				} else {
					var f wire.Frame
					if f, err = conn.Call(context.Background(), wire.OpPing, body); err == nil {
						f.Release()
					}
				}
				d := time.Since(start)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					if errs[w] == nil {
						errs[w] = err
					}
					errCount[w]++
					continue
				}
				h.record(d)
				n++
			}
			mu.Lock()
			hist.merge(&h)
			ops += n
			mu.Unlock()
		})
	}
	time.Sleep(p.Warmup)
	cpu0, cerr := threadsCPU(p.ServerPID)
	self0, _ := selfCPU()
	start := time.Now()
	measuring.Store(true)
	time.Sleep(p.Duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	cpu1, cerr1 := threadsCPU(p.ServerPID)
	self1, _ := selfCPU()
	stop.Store(true)
	wg.Wait()
	row.Ops = ops
	row.OpsPerSec = float64(ops) / elapsed.Seconds()
	row.P50, row.P99 = hist.quantile(0.5), hist.quantile(0.99)
	if ops > 0 {
		if p.ServerPID > 0 && cerr == nil && cerr1 == nil {
			row.ServerCPUPerOp = (cpu1 - cpu0) / time.Duration(ops)
			busy := cpu1 - cpu0 - time.Duration(float64(p.idle)*elapsed.Seconds())
			row.ServerBusyPerOp = max(busy, 0) / time.Duration(ops)
		}
		row.ClientCPUPerOp = (self1 - self0) / time.Duration(ops)
	}
	for w := range depth {
		row.Errors += errCount[w]
		if row.FirstError == "" && errs[w] != nil {
			row.FirstError = errs[w].Error()
		}
	}
	return row
}

// transportTables prints every row, then the median over the rounds of
// each cell.
func transportTables(r transportResult) []*table {
	t := &table{
		title: fmt.Sprintf("bench transport: region %d (%s) of %s at %s; reads of %d bytes, RPCs of %d bytes; %v per cell after %v, %d round(s)",
			r.Region, fmtBytes(r.RegionSize), r.Host, r.HostRPC, r.Params.ReadSize, r.Params.RPCSize, r.Params.Duration, r.Params.Warmup, r.Params.Repeat),
		header: []string{"round", "workload", "provider", "in flight", "ops/s", "p50", "p99", "server CPU/op", "above idle", "client CPU/op", "errors"},
	}
	if r.ServerIdle >= 0 {
		t.notes = append(t.notes, fmt.Sprintf("server CPU idle: %v per second; \"above idle\" subtracts it", r.ServerIdle.Round(time.Microsecond)))
	}
	type cellKey struct {
		workload, provider string
		depth              int
	}
	var order []cellKey
	rates := map[cellKey][]float64{}
	var firstErrs []string
	for _, row := range r.Rows {
		cpu, busy := "-", "-"
		if row.ServerCPUPerOp >= 0 {
			cpu, busy = formatMicros(row.ServerCPUPerOp), formatMicros(row.ServerBusyPerOp)
		}
		prov := row.Provider
		if prov == "" {
			prov = "-"
		}
		t.add(fmt.Sprint(row.Round), row.Workload, prov, fmt.Sprint(row.InFlight), fmt.Sprintf("%.0f", row.OpsPerSec),
			formatMicros(row.P50), formatMicros(row.P99), cpu, busy, formatMicros(row.ClientCPUPerOp), fmt.Sprint(row.Errors))
		k := cellKey{row.Workload, row.Provider, row.InFlight}
		if _, ok := rates[k]; !ok {
			order = append(order, k)
		}
		rates[k] = append(rates[k], row.OpsPerSec)
		if row.FirstError != "" {
			firstErrs = append(firstErrs, fmt.Sprintf("round %d %s %s: %s", row.Round, row.Workload, prov, row.FirstError))
		}
	}
	for _, e := range firstErrs {
		t.notes = append(t.notes, "first error: "+e)
	}
	out := []*table{t}
	if r.Params.Repeat > 1 {
		m := &table{title: "median ops/s over the rounds", header: []string{"workload", "provider", "in flight", "ops/s"}}
		for _, k := range order {
			v := slices.Clone(rates[k])
			slices.Sort(v)
			prov := k.provider
			if prov == "" {
				prov = "-"
			}
			m.add(k.workload, prov, fmt.Sprint(k.depth), fmt.Sprintf("%.0f", v[len(v)/2]))
		}
		out = append(out, m)
	}
	return out
}

// formatMicros prints a duration in microseconds with two decimals.
func formatMicros(d time.Duration) string { return fmt.Sprintf("%.2fµs", float64(d)/1e3) }
