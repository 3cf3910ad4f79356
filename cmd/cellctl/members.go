package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// memberJSON is one member in members -w json.
type memberJSON struct {
	ID       string `json:"id"`
	RPCAddr  string `json:"rpc_addr"`
	ReadAddr string `json:"read_addr"`
	HostID   string `json:"host_id"`
	Version  string `json:"version"`
	// Draining: marked by cellctl drain; its replicas are moving away.
	Draining bool `json:"draining,omitempty"`
	// Fabric lists its libfabric endpoints (--provider fabric).
	Fabric []fabricEndpoint `json:"fabric,omitempty"`
}

// regionJSON is one region in regions -w json.
type regionJSON struct {
	ID    uint32 `json:"id"`
	Kind  string `json:"kind"`
	Size  uint64 `json:"size"`
	Host  string `json:"host"`
	Epoch uint64 `json:"epoch"`
	// Term is the raft term in which Host leads the region's group;
	// Replicas the members holding a replica (its voters), Learners
	// those catching up before they vote.
	Term     uint64   `json:"term"`
	Replicas []string `json:"replicas"`
	Learners []string `json:"learners,omitempty"`
	// States is each replica's raft state, as its server reports it.
	States []replicaJSON `json:"replica_states,omitempty"`
	Path   string        `json:"path,omitempty"`
	// Live reports whether Host is a live member.
	Live bool `json:"live"`
	// DownReplicas are the replicas and learners on servers that are not
	// live members.
	DownReplicas []string `json:"down_replicas,omitempty"`
	// MissingFor is, for each down replica's server the coordinator has
	// marked missing, how long it had counted it gone (Go duration) when
	// it wrote the mark: its replicas are replaced once that reaches
	// --dead-after.
	MissingFor map[string]string `json:"missing_for,omitempty"`
}

func newMembersCommand(g *globals) *cobra.Command {
	var (
		wait    int
		waitFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the live servers of the region table",
		Long: `List the members of the region table in etcd: the servers whose
registration lease is alive, with their RPC and one-sided read addresses,
host identity (servers on one host share memory) and build version.

A server is a member from the moment it serves until it stops, or, if it
dies, until its lease lapses (--lease-ttl, 5 s). --wait N waits, for up
to --wait-timeout, until exactly N servers are members (servers just
started have registered, a dead one's lease has lapsed), and then lists
them; etcd not answering yet (a server that embeds it is starting) is
waited for too. It exits with status 1 if the members are not N by then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var (
				st  regiontable.State
				err error
			)
			if cmd.Flags().Changed("wait") {
				if wait < 0 || waitFor <= 0 {
					return fmt.Errorf("--wait %d --wait-timeout %v: want a count of 0 or more and a time above 0", wait, waitFor)
				}
				st, err = g.waitMembers(wait, waitFor)
			} else {
				ctx, cancel := g.commandContext()
				defer cancel()
				st, _, err = g.loadTable(ctx)
			}
			if err != nil {
				return err
			}
			ms := membersOutput(st.Members, st.Draining)
			return g.print(ms, func() []*table { return []*table{membersTable(ms)} })
		},
	}
	cmd.Flags().IntVar(&wait, "wait", 0, "wait until exactly this many servers are members, for up to --wait-timeout")
	cmd.Flags().DurationVar(&waitFor, "wait-timeout", time.Minute, "how long --wait waits")
	return cmd
}

// membersPause is the time between two looks at the members of --wait.
const membersPause = 200 * time.Millisecond

// waitMembers reads the region table until it has exactly n members, for
// up to timeout (each read within --command-timeout); errors reading it
// are waited through. It returns the table with n members, or an error
// saying what it last saw.
func (g *globals) waitMembers(n int, timeout time.Duration) (regiontable.State, error) {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := g.commandContext()
		st, _, err := g.loadTable(ctx)
		cancel()
		if err == nil && len(st.Members) == n {
			return st, nil
		}
		if !time.Now().Before(deadline) {
			if err != nil {
				return st, fmt.Errorf("members --wait %d: after %v: %w", n, timeout, err)
			}
			ids := make([]string, len(st.Members))
			for i, m := range st.Members {
				ids[i] = m.ID
			}
			return st, fmt.Errorf("members --wait %d: %s after %v (%s)", n, plural(len(ids), "member"), timeout, dash(strings.Join(ids, ", ")))
		}
		time.Sleep(min(membersPause, time.Until(deadline)))
	}
}

func membersOutput(members []regiontable.Member, draining []string) []memberJSON {
	out := []memberJSON{}
	for _, m := range members {
		out = append(out, memberJSON{ID: m.ID, RPCAddr: m.RPCAddr, ReadAddr: m.ReadAddr, HostID: m.HostID, Version: m.Version,
			Draining: slices.Contains(draining, m.ID), Fabric: fabricEndpoints(m)})
	}
	return out
}

func membersTable(ms []memberJSON) *table {
	t := &table{left: true, header: []string{"MEMBER", "RPC ADDRESS", "READ ADDRESS", "HOST", "VERSION", "DRAINING"}}
	for _, m := range ms {
		drain := "no"
		if m.Draining {
			drain = "yes"
		}
		t.add(m.ID, m.RPCAddr, m.ReadAddr, dash(m.HostID), dash(m.Version), drain)
	}
	if len(ms) == 0 {
		t.notes = append(t.notes, "(no live member)")
	}
	for _, m := range ms {
		for _, e := range m.Fabric {
			t.notes = append(t.notes, fmt.Sprintf("fabric: %s reads over %s at %s", m.ID, e.Provider, e.Addr))
		}
	}
	return t
}

func newRegionsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "regions",
		Short: "List the region table's regions and whether their hosts are live",
		Long: `List the regions of the region table in etcd: ID, kind, size, the
member hosting it, its epoch (which grows with every start of its host),
and whether that host is a live member (LIVE no: its data is unreachable
until the host comes back); then every replica's raft state as its server
reports it: role, term, last applied log index and the committed entries
it has not applied yet (LAG; "?" until a restarted replica has heard
from its leader).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.commandContext()
			defer cancel()
			st, _, err := g.loadTable(ctx)
			if err != nil {
				return err
			}
			rs := regionsOutput(st)
			g.askReplicas(ctx, st, rs)
			return g.print(rs, func() []*table { return []*table{regionsTable(rs), replicasTable(rs)} })
		},
	}
}

func regionsOutput(st regiontable.State) []regionJSON {
	live := map[string]bool{}
	for _, m := range st.Members {
		live[m.ID] = true
	}
	out := []regionJSON{}
	for _, r := range st.Regions {
		rj := regionJSON{ID: r.ID, Kind: string(r.Kind), Size: r.Size, Host: r.Host, Epoch: r.Epoch, Term: r.Term,
			Replicas: append([]string{}, r.Replicas...), Learners: r.Learners, Path: r.Path, Live: live[r.Host]}
		for _, id := range append(slices.Clone(r.Replicas), r.Learners...) {
			if !live[id] {
				rj.DownReplicas = append(rj.DownReplicas, id)
				if d, ok := st.Missing[id]; ok {
					if rj.MissingFor == nil {
						rj.MissingFor = make(map[string]string)
					}
					rj.MissingFor[id] = d.Round(time.Second).String()
				}
			}
		}
		out = append(out, rj)
	}
	return out
}

func regionsTable(rs []regionJSON) *table {
	t := &table{header: []string{"REGION", "KIND", "SIZE", "LEADER", "TERM", "EPOCH", "REPLICAS", "LIVE"}}
	dead, down := 0, 0
	missing := make(map[string]string)
	for _, r := range rs {
		maps.Copy(missing, r.MissingFor)
		live := "yes"
		if !r.Live {
			live, dead = "no", dead+1
		}
		reps := strings.Join(markDown(r.Replicas, r.DownReplicas), ",")
		if len(r.Learners) > 0 {
			reps += " +" + strings.Join(markDown(r.Learners, r.DownReplicas), ",+") // catching up
		}
		if len(r.DownReplicas) > 0 {
			down++
		}
		t.add(fmt.Sprint(r.ID), r.Kind, fmtBytes(r.Size), r.Host, fmt.Sprint(r.Term), fmt.Sprint(r.Epoch), dash(reps), live)
	}
	switch {
	case len(rs) == 0:
		t.notes = append(t.notes, "(no region)")
	case dead > 0:
		t.notes = append(t.notes, fmt.Sprintf("%d of %s %s hosted by no live member.", dead, plural(len(rs), "region"), map[bool]string{true: "is", false: "are"}[dead == 1]))
	}
	if down > 0 {
		t.notes = append(t.notes, fmt.Sprintf("%s replicas on servers that are not live members (marked !): they are replaced after the servers' --dead-after.", regionsHave(down)))
	}
	for _, id := range slices.Sorted(maps.Keys(missing)) {
		t.notes = append(t.notes, fmt.Sprintf("%s: missing for %s by the coordinator's count.", id, missing[id]))
	}
	return t
}

// dash stands in for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// replicaJSON is one replica's raft state in regions -w json.
type replicaJSON struct {
	Server  string `json:"server"`
	Role    string `json:"role"`
	Term    uint64 `json:"term"`
	Applied uint64 `json:"applied"`
	Commit  uint64 `json:"commit"`
	Error   string `json:"error,omitempty"`
}

// askReplicas asks every replica's server for its raft state of the
// region (OpMetadata for one region, which a follower answers too).
func (g *globals) askReplicas(ctx context.Context, st regiontable.State, rs []regionJSON) {
	addr := map[string]string{}
	for _, m := range st.Members {
		addr[m.ID] = m.RPCAddr
	}
	for i := range rs {
		r := &rs[i]
		for _, id := range append(append([]string{}, r.Replicas...), r.Learners...) {
			rj := replicaJSON{Server: id}
			a, ok := addr[id]
			if !ok {
				rj.Error = "not a live member"
				r.States = append(r.States, rj)
				continue
			}
			info, err := g.regionRaft(ctx, a, r.ID)
			if err != nil {
				rj.Error = oneLine(err.Error())
			} else {
				rj.Role, rj.Term, rj.Applied, rj.Commit = info.Role.String(), info.Term, info.Applied, info.Commit
			}
			r.States = append(r.States, rj)
		}
	}
}

// regionRaft asks the server at addr for its replica of region id.
func (g *globals) regionRaft(ctx context.Context, addr string, id uint32) (wire.RaftInfo, error) {
	var rep wire.MetadataReply
	if err := g.callServer(ctx, addr, wire.OpMetadata, &wire.MetadataRequest{OneRegion: true, Region: id}, &rep); err != nil {
		return wire.RaftInfo{}, err
	}
	if len(rep.Regions) != 1 || rep.Regions[0].ID != id {
		return wire.RaftInfo{}, fmt.Errorf("%s described %d regions", addr, len(rep.Regions))
	}
	return rep.Regions[0].Raft, nil
}

// replicasTable lists every replica of every region.
func replicasTable(rs []regionJSON) *table {
	t := &table{header: []string{"REGION", "REPLICA", "ROLE", "TERM", "APPLIED", "LAG"}}
	for _, r := range rs {
		for _, st := range r.States {
			if st.Error != "" {
				t.add(fmt.Sprint(r.ID), st.Server, "-", "-", "-", "-")
				t.notes = append(t.notes, fmt.Sprintf("region %d on %s: %s", r.ID, st.Server, st.Error))
				continue
			}
			t.add(fmt.Sprint(r.ID), st.Server, st.Role, fmt.Sprint(st.Term), fmt.Sprint(st.Applied), fmtLag(st.Applied, st.Commit))
		}
	}
	t.notes = append(t.notes, "LAG: entries the replica knows committed and has not applied yet; ?: not known yet (it has not heard from its leader since it started).")
	return t
}

// fmtLag is a replica's LAG cell: the committed entries it has not
// applied, or "?" when it cannot know them yet. A replica learns the
// commit index from its leader: after a start, until the leader's first
// call, its commit index is 0, or below the index it restored from its
// snapshot, and a lag of 0 there would claim it caught up.
func fmtLag(applied, commit uint64) string {
	if commit == 0 || commit < applied {
		return "?"
	}
	return fmt.Sprint(commit - applied)
}

// markDown suffixes "!" to the IDs in ids that are in down.
func markDown(ids, down []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id
		if slices.Contains(down, id) {
			out[i] += "!"
		}
	}
	return out
}
