package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// statusResult is the JSON output of status.
type statusResult struct {
	Root string `json:"root"`
	// RootServer is the member hosting the root's region ("" if none).
	RootServer string `json:"root_server"`
	// Levels is the number of levels of the tree of meganodes, Meganodes
	// how many the servers that answered hold.
	Levels    int            `json:"levels"`
	Meganodes int            `json:"meganodes"`
	Servers   []serverStatus `json:"servers"`
}

// serverStatus describes one member of the region table and what its
// Metadata reply (and, with --metrics, its metrics) says.
type serverStatus struct {
	ID       string `json:"id"`
	RPCAddr  string `json:"rpc_addr"`
	ReadAddr string `json:"read_addr"`
	Version  string `json:"version"`
	HostID   string `json:"host_id"`
	// Fabric lists the server's libfabric endpoints (--provider fabric).
	Fabric []fabricEndpoint `json:"fabric,omitempty"`
	// Error is why the server could not be asked; the rest is then empty.
	Error string `json:"error,omitempty"`

	Ping         time.Duration    `json:"ping_ns"`
	NodeSize     uint32           `json:"node_size"`
	MeganodeSize uint64           `json:"meganode_size"`
	Regions      []regionStatus   `json:"regions"`
	Meganodes    []meganodeStatus `json:"meganodes"`
	// UsedNodes and Capacity sum the meganodes' nodes; Fill is their ratio.
	UsedNodes uint64  `json:"used_nodes"`
	Capacity  uint64  `json:"capacity"`
	Fill      float64 `json:"fill"`
	// Height is the tallest meganode's local height.
	Height int         `json:"height"`
	Hints  hintsStatus `json:"hints"`
	// Metrics is set with --metrics, for the server whose region matches.
	Metrics *serverMetrics `json:"metrics,omitempty"`
}

// regionStatus is wire.RegionInfo with snake_case JSON names.
type regionStatus struct {
	ID        uint32     `json:"id"`
	Epoch     uint64     `json:"epoch"`
	Size      uint64     `json:"size"` // bytes
	RemoteKey uint64     `json:"remote_key"`
	Host      string     `json:"host"`
	RPCAddr   string     `json:"rpc_addr"`
	ReadAddr  string     `json:"read_addr"`
	Path      string     `json:"path"`
	Raft      raftStatus `json:"raft"`
}

// raftStatus is wire.RaftInfo with snake_case JSON names.
type raftStatus struct {
	Role      wire.RaftRole `json:"role"` // its name: leader, follower...
	Term      uint64        `json:"term"`
	LastIndex uint64        `json:"last_index"`
	Commit    uint64        `json:"commit"`
	Applied   uint64        `json:"applied"`
}

// hintsStatus is wire.SelectorHints with snake_case JSON names.
type hintsStatus struct {
	Workers      uint16 `json:"workers"`
	Queued       uint32 `json:"queued"`
	QueueNanos   uint32 `json:"queue_ns"`
	ServiceNanos uint32 `json:"service_ns"`
}

type meganodeStatus struct {
	Ptr      string  `json:"ptr"`
	Level    uint16  `json:"level"`
	Height   uint16  `json:"height"`
	Min      string  `json:"min"` // "-inf" for the open end
	Max      string  `json:"max"` // "+inf"
	Used     uint32  `json:"used_nodes"`
	Capacity uint32  `json:"capacity"`
	Fill     float64 `json:"fill"`
}

func newStatusCommand(g *globals) *cobra.Command {
	var metricsAddrs []string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Describe the cluster: root, levels, and every server's region, meganodes, fill, selector hints",
		Long: `Describe the cluster: the root meganode and the server hosting it, the
number of levels of the tree of meganodes, and one row per live member of
the region table from its metadata: its region (ID, epoch, size), how many
meganodes it holds and their fill (nodes in use of capacity), the tallest
local height, the selector hints it reports (workers, requests queued,
recent mean queueing and service times), and a measured ping. Operation
counters are not part of the metadata: name the servers' metrics listeners
with --metrics (cellserver --metrics-listen) to add them. "cellctl
meganodes" lists the meganodes themselves. Servers that do not answer are
listed with the error, and status then exits with status 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.commandContext()
			defer cancel()
			res, failed, err := collectStatus(ctx, g, metricsAddrs)
			if err != nil {
				return err
			}
			if err := g.print(res, func() []*table { return statusTables(res) }); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d servers did not answer", failed, len(res.Servers))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&metricsAddrs, "metrics", nil, "metrics listeners of the servers (host:port, comma-separated), for operation counters")
	return cmd
}

// collectStatus asks each member for its metadata.
func collectStatus(ctx context.Context, g *globals, metricsAddrs []string) (statusResult, int, error) {
	eps, err := g.etcdEndpoints()
	if err != nil {
		return statusResult{}, 0, err
	}
	store, err := g.openTable()
	if err != nil {
		return statusResult{}, 0, err
	}
	defer store.Close()
	st, err := loadTable(ctx, store, eps)
	if err != nil {
		return statusResult{}, 0, err
	}
	if len(st.Members) == 0 {
		return statusResult{}, 0, fmt.Errorf("no live server in the region table at %s", strings.Join(eps, ","))
	}
	var scraped []*serverMetrics
	for _, a := range metricsAddrs {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		m, err := scrapeMetrics(ctx, a)
		if err != nil {
			return statusResult{}, 0, err
		}
		scraped = append(scraped, m)
	}
	res := statusResult{Root: st.Root.String()}
	for _, r := range st.Regions {
		if !st.Root.IsNil() && r.ID == st.Root.Region() {
			res.RootServer = r.Host
		}
	}
	failed := 0
	for _, m := range st.Members {
		s := g.serverStatusOf(ctx, m)
		if s.Error != "" {
			failed++
		}
		res.Meganodes += len(s.Meganodes)
		for _, mn := range s.Meganodes {
			res.Levels = max(res.Levels, int(mn.Level)+1)
		}
		for _, sm := range scraped {
			for _, r := range s.Regions {
				if r.ID == sm.Region {
					s.Metrics = sm
				}
			}
		}
		res.Servers = append(res.Servers, s)
	}
	return res, failed, nil
}

func (g *globals) serverStatusOf(ctx context.Context, m regiontable.Member) serverStatus {
	s := serverStatus{ID: m.ID, RPCAddr: m.RPCAddr, ReadAddr: m.ReadAddr, Version: m.Version, HostID: m.HostID, Fabric: fabricEndpoints(m)}
	c, err := g.dialServer(ctx, m.RPCAddr)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	defer c.Close()
	start := time.Now()
	f, err := c.Call(ctx, wire.OpPing, nil)
	if err != nil {
		s.Error = fmt.Sprintf("ping %s: %v", m.RPCAddr, err)
		return s
	}
	s.Ping = time.Since(start)
	f.Release()
	md, err := metadata(ctx, c, true)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	fillStatus(&s, md)
	return s
}

// fillStatus copies a metadata reply into s.
func fillStatus(s *serverStatus, md *wire.MetadataReply) {
	s.NodeSize, s.MeganodeSize = md.NodeSize, md.MeganodeSize
	s.Hints = hintsStatus(md.Hints)
	for _, r := range md.Regions {
		s.Regions = append(s.Regions, regionStatus{ID: r.ID, Epoch: r.Epoch, Size: r.Size, RemoteKey: r.RemoteKey,
			Host: r.Host, RPCAddr: r.RPCAddr, ReadAddr: r.ReadAddr, Path: r.Path, Raft: raftStatus(r.Raft)})
	}
	for _, mn := range md.Meganodes {
		s.Meganodes = append(s.Meganodes, meganodeStatusOf(mn))
		s.UsedNodes += uint64(mn.UsedNodes)
		s.Capacity += uint64(mn.Capacity)
		s.Height = max(s.Height, int(mn.Height))
	}
	sort.Slice(s.Meganodes, func(i, j int) bool {
		a, b := s.Meganodes[i], s.Meganodes[j]
		if a.Level != b.Level {
			return a.Level > b.Level
		}
		return a.Ptr < b.Ptr
	})
	if s.Capacity > 0 {
		s.Fill = float64(s.UsedNodes) / float64(s.Capacity)
	}
}

// meganodeStatusOf describes one meganode of a metadata reply.
func meganodeStatusOf(mn wire.MeganodeStats) meganodeStatus {
	ms := meganodeStatus{
		Ptr: mn.Ptr.String(), Level: mn.Level, Height: mn.Height,
		Min: boundText(mn.Range.Min, mn.Range.MinInf, "-inf"), Max: boundText(mn.Range.Max, mn.Range.MaxInf, "+inf"),
		Used: mn.UsedNodes, Capacity: mn.Capacity,
	}
	if mn.Capacity > 0 {
		ms.Fill = float64(mn.UsedNodes) / float64(mn.Capacity)
	}
	return ms
}

func boundText(k []byte, inf bool, infName string) string {
	if inf {
		return infName
	}
	return byteArg{}.cell(k)
}

// regionCells are the REGION to LAG cells of one served region.
func regionCells(r regionStatus) []string {
	role, term, applied, lag := "-", "-", "-", "-"
	if r.Raft.Role != wire.RoleNone {
		role, term, applied = r.Raft.Role.String(), fmt.Sprint(r.Raft.Term), fmt.Sprint(r.Raft.Applied)
		lag = fmtLag(r.Raft.Applied, r.Raft.Commit)
	}
	return []string{fmt.Sprint(r.ID), fmt.Sprint(r.Epoch), fmtBytes(r.Size), role, term, applied, lag}
}

func statusTables(res statusResult) []*table {
	root := res.Root
	if res.RootServer != "" {
		root += " on " + res.RootServer
	}
	t := &table{
		title:  fmt.Sprintf("Servers (root meganode %s, %s, %s)", root, plural(res.Levels, "level"), plural(res.Meganodes, "meganode")),
		header: []string{"SERVER", "ADDRESS", "REGION", "EPOCH", "SIZE", "RAFT", "TERM", "APPLIED", "LAG", "MEGANODES", "FILL", "HEIGHT", "WORKERS", "QUEUED", "QUEUE", "SERVICE", "PING"},
	}
	var errs []string
	for _, s := range res.Servers {
		if s.Error != "" {
			t.add(s.ID, s.RPCAddr, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-")
			errs = append(errs, s.ID+": "+oneLine(s.Error))
			continue
		}
		first := []string{"-", "-", "-", "-", "-", "-", "-"}
		if len(s.Regions) > 0 {
			first = regionCells(s.Regions[0])
		}
		t.add(append(append([]string{s.ID, s.RPCAddr}, first...), fmt.Sprint(len(s.Meganodes)),
			fmt.Sprintf("%.1f%%", 100*s.Fill), fmt.Sprint(s.Height), fmt.Sprint(s.Hints.Workers), fmt.Sprint(s.Hints.Queued),
			fmtLatency(time.Duration(s.Hints.QueueNanos)), fmtLatency(time.Duration(s.Hints.ServiceNanos)), fmtLatency(s.Ping))...)
		// Further regions the server serves: a row each, under its own.
		for _, r := range s.Regions[min(1, len(s.Regions)):] {
			t.add(append(append([]string{"", ""}, regionCells(r)...), "", "", "", "", "", "", "", "")...)
		}
	}
	for _, e := range errs {
		t.notes = append(t.notes, "error: "+e)
	}
	t.notes = append(t.notes, fabricNotes(res.Servers)...)
	if len(errs) == 0 {
		t.notes = append(t.notes, "REGION: each region the server serves, a row each; RAFT, TERM, APPLIED: the server's role in the region's raft group, its term, its last applied log index; LAG: committed entries not yet applied (?: not known yet, the replica has not heard from its leader since it started).",
			"QUEUE and SERVICE: the server's recent mean queueing time and search-hop service time (selector hints).",
			`"cellctl meganodes" lists the meganodes.`)
	}
	tables := []*table{t}

	if ops := opsTable(res); ops != nil {
		tables = append(tables, ops)
	}
	return tables
}

// opsTable lists the operation counters of the servers scraped with
// --metrics, or is nil.
func opsTable(res statusResult) *table {
	var names []string
	seen := map[string]bool{}
	for _, s := range res.Servers {
		if s.Metrics == nil {
			continue
		}
		for op := range s.Metrics.Ops {
			if !seen[op] {
				seen[op] = true
				names = append(names, op)
			}
		}
	}
	if len(seen) == 0 {
		return nil
	}
	sort.Strings(names)
	t := &table{title: "Operations answered (from --metrics)", header: []string{"SERVER"}}
	for _, n := range names {
		t.header = append(t.header, strings.ToUpper(n))
	}
	t.header = append(t.header, "ERRORS", "ONE-SIDED")
	for _, s := range res.Servers {
		if s.Metrics == nil {
			continue
		}
		row := []string{s.ID}
		for _, n := range names {
			row = append(row, fmt.Sprint(s.Metrics.Ops[n]))
		}
		row = append(row, fmt.Sprint(s.Metrics.Errors), fmt.Sprint(s.Metrics.OneSided))
		t.add(row...)
	}
	t.notes = []string{"Counts since the server started; ERRORS are replies with a status other than OK or NotFound."}
	return t
}

// fmtBytes formats a size with a binary unit.
func fmtBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	for i, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		d := uint64(unit) << (10 * i)
		if n < d*unit || i == 3 {
			if n%d == 0 {
				return fmt.Sprintf("%d%s", n/d, u)
			}
			return fmt.Sprintf("%.1f%s", float64(n)/float64(d), u)
		}
	}
	return fmt.Sprint(n)
}
