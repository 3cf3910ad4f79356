package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// checkResult is the JSON output of check.
type checkResult struct {
	OK         bool     `json:"ok"`
	Servers    int      `json:"servers"`
	Meganodes  int      `json:"meganodes"`
	Levels     int      `json:"levels"`
	Violations []string `json:"violations"`
	// Replicated counts the regions with more than one replica;
	// ReplicasCompared those whose replicas were compared at one applied
	// index (and found equal unless a violation says otherwise);
	// NotCompared says why the others were not (a replica's server is
	// down or restarting, a replica is catching up).
	Replicated       int      `json:"replicated_regions"`
	ReplicasCompared int      `json:"replicas_compared"`
	NotCompared      []string `json:"not_compared,omitempty"`
}

// summary is check's line for a result without violations: "ok: 3
// servers, 14 meganodes, 2 levels, replicas of 3 regions equal".
func (r checkResult) summary() string {
	line := fmt.Sprintf("ok: %s, %s, %s", plural(r.Servers, "server"), plural(r.Meganodes, "meganode"), plural(r.Levels, "level"))
	switch n := r.Replicated; {
	case n == 0:
		return line + ", no region replicated"
	case r.ReplicasCompared == n:
		return line + fmt.Sprintf(", replicas of %s equal", plural(n, "region"))
	}
	return line + fmt.Sprintf(", replicas of %d of %s equal; %d not compared: a replica is down, restarting or catching up (--wait waits for them)",
		r.ReplicasCompared, plural(r.Replicated, "region"), r.Replicated-r.ReplicasCompared)
}

// whole reports whether the check found the cluster whole: no violation,
// and the replicas of every replicated region compared.
func (r checkResult) whole() bool {
	return r.OK && r.ReplicasCompared == r.Replicated
}

// confirmPause is the time between the snapshots that confirm cluster
// violations.
const confirmPause = 250 * time.Millisecond

func newCheckCommand(g *globals) *cobra.Command {
	var (
		limit    uint32
		attempts int
		wait     bool
		waitFor  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the invariants of every server and the links between meganodes",
		Long: `Check the cluster's tree of meganodes.

On every live server, the server's own check (wire OpCheck): each
meganode's local B-link tree (keys sorted and inside their nodes' bounds,
right links, levels, reachability, free nodes, record CRCs), the links
between neighbouring meganodes and the parents' entries, as far as they are
on that server. A server checks between two of its meganode splits, and
may wait for one to end.

Across servers, on the region table and every server's metadata (the rules
are written in clustercheck.go): at every level the meganodes tile the key
space from -inf to +inf without gap or overlap (new meganodes of splits in
progress set apart, and tolerated where they fill a gap); each meganode's
right link points into the meganode whose min is its max, and is nil
exactly at +inf; the top level is one meganode, the region table's root;
every meganode's region is in the region table, hosted by the live member
that reported it. A split in progress looks like a violation for an
instant, so a violation found by these checks is reported only if the next
--attempts-1 snapshots show it again.

Then the replicas of every region with more than one: each server holding
one hashes its region image at its applied index (wire OpReplicaHash,
under the replica's apply lock: writes to that region pause meanwhile),
and replicas at one index must be byte-identical. While writes go on the
indexes differ; they are asked again for two seconds, and a region whose
replicas never meet is noted, not reported. Nor is a replica on a server
that is not a live member (down, or restarting and not registered yet):
the line says how many regions' replicas were not compared, and a note
says why for each.

Prints each violation on a line and exits with status 1 if there is any,
else "ok: 3 servers, 14 meganodes, 2 levels, replicas of 3 regions equal".

--wait checks again, every second for up to --wait-timeout, until the
cluster is whole: no violation, and the replicas of every region
compared equal (a restarted server registered and caught up, a new
replica filled). It then prints the last check's result, and exits with
status 1 if the cluster was not whole by then. Each check has its own
--command-timeout.
Checking a large region takes time: raise --command-timeout if needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if attempts < 1 {
				return fmt.Errorf("--attempts %d: want at least 1", attempts)
			}
			if !wait {
				waitFor = 0
			} else if waitFor <= 0 {
				return fmt.Errorf("--wait-timeout %v: want more than 0", waitFor)
			}
			res, err := checkUntilWhole(g, limit, attempts, waitFor)
			if err != nil {
				return err
			}
			line := res.summary()
			for _, n := range res.NotCompared {
				line += "\nnote: " + n
			}
			if !res.OK {
				line = strings.Join(res.Violations, "\n")
			}
			lines := &table{left: true}
			for _, l := range strings.Split(line, "\n") {
				lines.add(l)
			}
			if err := g.print(res, func() []*table { return []*table{lines} }); err != nil {
				return err
			}
			if !res.OK {
				return fmt.Errorf("%s", plural(len(res.Violations), "violation"))
			}
			if wait && !res.whole() {
				return fmt.Errorf("the replicas of %s not compared after --wait-timeout %v", plural(res.Replicated-res.ReplicasCompared, "region"), waitFor)
			}
			return nil
		},
	}
	cmd.Flags().Uint32Var(&limit, "limit", 100, "most violations to list per server (0: as many as fit in a reply)")
	cmd.Flags().IntVar(&attempts, "attempts", 3, "snapshots of the cluster in which a cluster violation must show to be reported")
	cmd.Flags().BoolVar(&wait, "wait", false, "check again until the cluster is whole (no violation, every region's replicas compared equal), for up to --wait-timeout; exit 1 if it is not by then")
	cmd.Flags().DurationVar(&waitFor, "wait-timeout", time.Minute, "how long --wait waits")
	return cmd
}

// checkPause is the time between the checks of --wait.
const checkPause = time.Second

// checkUntilWhole runs the check, and with wait > 0 runs it again every
// checkPause until the cluster is whole or wait has passed; it returns
// the last result. Each check runs within --command-timeout.
func checkUntilWhole(g *globals, limit uint32, attempts int, wait time.Duration) (checkResult, error) {
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := g.commandContext()
		res, err := runCheck(ctx, g, limit, attempts)
		cancel()
		if wait == 0 || (err == nil && res.whole()) || !time.Now().Before(deadline) {
			return res, err
		}
		time.Sleep(min(checkPause, time.Until(deadline)))
	}
}

// runCheck runs the servers' checks and the cluster checks.
func runCheck(ctx context.Context, g *globals, limit uint32, attempts int) (checkResult, error) {
	cl, err := g.collectCluster(ctx)
	if err != nil {
		return checkResult{}, err
	}
	ms := cl.meganodes()
	res := checkResult{Servers: len(cl.servers), Meganodes: len(ms), Levels: levels(ms), Violations: []string{}}

	// The servers' own checks, in parallel, listed in member order.
	perServer := make([][]string, len(cl.servers))
	cl.each(func(i int, m regiontable.Member) {
		if err := cl.servers[i].err; err != nil {
			perServer[i] = []string{fmt.Sprintf("server %s did not answer: %s", m.ID, oneLine(err.Error()))}
			return
		}
		perServer[i] = g.serverCheck(ctx, m, limit)
	})
	for _, vs := range perServer {
		res.Violations = append(res.Violations, vs...)
	}

	// The cluster checks, confirmed by later snapshots.
	vs := checkCluster(cl.view())
	for i := 1; i < attempts && len(vs) > 0; i++ {
		select {
		case <-time.After(confirmPause):
		case <-ctx.Done():
			return checkResult{}, ctx.Err()
		}
		next, err := g.collectCluster(ctx)
		if err != nil {
			return checkResult{}, err
		}
		vs = confirm(vs, checkCluster(next.view()))
	}
	for _, v := range vs {
		res.Violations = append(res.Violations, "cluster: "+v)
	}
	reload := func(ctx context.Context) (regiontable.State, error) {
		st, _, err := g.loadTable(ctx)
		return st, err
	}
	for _, r := range cl.table.Regions {
		if len(r.Replicas)+len(r.Learners) > 1 {
			res.Replicated++
		}
		compared, bad, why := compareReplicas(ctx, cl.table.Members, r, g.replicaHash, reload)
		if compared {
			res.ReplicasCompared++
		}
		res.Violations = append(res.Violations, bad...)
		if why != "" {
			res.NotCompared = append(res.NotCompared, why)
		}
	}
	res.OK = len(res.Violations) == 0
	return res, nil
}

// Replicas are compared at one applied index; while writes go on the
// replicas' indexes differ, so the hashes are asked again, this many times.
const (
	replicaHashTries = 20
	replicaHashPause = 100 * time.Millisecond
)

// compareReplicas compares the replicas of region r: each server holding
// one hashes its region image at its applied index (OpReplicaHash), and
// replicas at the same index must hash the same (apply is deterministic).
// It reports whether they were compared, the violations, and why they
// were not compared (a replica's server is down, or their indexes never
// met). The table may change while it asks (a replica moved, a learner
// added): a server that says it holds no replica is asked again, and the
// region's entry read again (reload) before that is a violation.
func compareReplicas(ctx context.Context, members []regiontable.Member, r regiontable.Region, hash hashFunc, reload func(context.Context) (regiontable.State, error)) (bool, []string, string) {
	var last []wire.ReplicaHashReply
	for try := 0; try < replicaHashTries; try++ {
		if try > 0 {
			select {
			case <-time.After(replicaHashPause):
			case <-ctx.Done():
				return false, nil, fmt.Sprintf("region %d: replicas not compared: %v", r.ID, ctx.Err())
			}
		}
		ids := append(append([]string{}, r.Replicas...), r.Learners...)
		if len(ids) < 2 {
			return false, nil, ""
		}
		addr := map[string]string{}
		for _, m := range members {
			addr[m.ID] = m.RPCAddr
		}
		for _, id := range ids {
			if _, ok := addr[id]; !ok {
				return false, nil, fmt.Sprintf("region %d: replica on %s not compared (not a live member: down, or restarting)", r.ID, id)
			}
		}
		var opening string
		last, opening = last[:0], ""
		for _, id := range ids {
			h, err := hash(ctx, addr[id], r.ID)
			if err != nil && wire.StatusOf(err) == wire.StatusUnknownRegion {
				// A server listed a moment ago opens its replica once it
				// sees the table say so, and drops one the table no
				// longer lists: ask again, with the table of now.
				opening = id
				break
			}
			if err != nil {
				return false, []string{fmt.Sprintf("region %d: replica on %s: %s", r.ID, id, oneLine(err.Error()))}, ""
			}
			last = append(last, h)
		}
		if opening != "" {
			if st, err := reload(ctx); err == nil {
				members = st.Members
				if e, ok := findRegion(st, r.ID); ok {
					r = e
				}
			}
			if try < replicaHashTries-1 {
				continue
			}
			if !holdsReplica(r, opening) {
				return false, nil, fmt.Sprintf("region %d: replica on %s not compared (moved while checked)", r.ID, opening)
			}
			if slices.Contains(r.Learners, opening) {
				return false, nil, fmt.Sprintf("region %d: replica on %s not compared (a learner that has not opened it yet)", r.ID, opening)
			}
			return false, []string{fmt.Sprintf("region %d: replica on %s: the server holds no replica of it", r.ID, opening)}, ""
		}
		same := true
		for _, h := range last[1:] {
			same = same && h.Applied == last[0].Applied
		}
		if !same {
			if try == replicaHashTries-1 {
				idx := make([]string, len(last))
				for i, h := range last {
					idx[i] = fmt.Sprintf("%s at %d", ids[i], h.Applied)
				}
				return false, nil, fmt.Sprintf("region %d: replicas not compared, their applied indexes kept moving (%s): writes going on, or a replica catching up", r.ID, strings.Join(idx, ", "))
			}
			continue
		}
		var bad []string
		for i, h := range last[1:] {
			if h.Hash != last[0].Hash {
				bad = append(bad, fmt.Sprintf("region %d: the replica on %s differs from the one on %s at applied index %d (%d and %d pages)",
					r.ID, ids[i+1], ids[0], h.Applied, h.Pages, last[0].Pages))
			}
		}
		return true, bad, ""
	}
	return false, nil, fmt.Sprintf("region %d: replicas not compared", r.ID)
}

// holdsReplica reports whether e lists server id as a voter or a learner.
func holdsReplica(e regiontable.Region, id string) bool {
	return slices.Contains(e.Replicas, id) || slices.Contains(e.Learners, id)
}

// hashFunc asks the server at addr for the hash of its replica of region
// id (replicaHash; a fake in tests).
type hashFunc func(ctx context.Context, addr string, id uint32) (wire.ReplicaHashReply, error)

// replicaHash asks the server at addr for the hash of its replica of
// region id.
func (g *globals) replicaHash(ctx context.Context, addr string, id uint32) (wire.ReplicaHashReply, error) {
	var rep wire.ReplicaHashReply
	err := g.callServer(ctx, addr, wire.OpReplicaHash, &wire.ReplicaHashRequest{Region: id}, &rep)
	return rep, err
}

// serverCheck runs OpCheck on member m and returns its violations, each
// prefixed with the server, or the error as one.
func (g *globals) serverCheck(ctx context.Context, m regiontable.Member, limit uint32) []string {
	prefix := "server " + m.ID + ": "
	c, err := g.dialServer(ctx, m.RPCAddr)
	if err != nil {
		return []string{prefix + oneLine(err.Error())}
	}
	defer c.Close()
	f, err := c.CallMessage(ctx, wire.OpCheck, &wire.CheckRequest{Limit: limit})
	if err != nil {
		return []string{prefix + "check: " + oneLine(err.Error())}
	}
	defer f.Release()
	var rep wire.CheckReply
	if err := rep.Decode(f.Body); err != nil {
		return []string{prefix + "check: " + oneLine(err.Error())}
	}
	var out []string
	for _, v := range rep.Violations {
		out = append(out, prefix+v)
	}
	if more := int(rep.Count) - len(rep.Violations); more > 0 {
		out = append(out, fmt.Sprintf("%s%s more not listed (--limit)", prefix, plural(more, "violation")))
	}
	return out
}

// confirm returns the violations of first that later shows again, in
// first's order; nil if none.
func confirm(first, later []string) []string {
	seen := make(map[string]bool, len(later))
	for _, v := range later {
		seen[v] = true
	}
	var out []string
	for _, v := range first {
		if seen[v] {
			out = append(out, v)
		}
	}
	return out
}
