package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// repairCtx bounds the self-repair tests: adding a replica installs a
// snapshot, and under the race detector on a loaded machine a few moves
// take tens of seconds.
func repairCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitRegions polls the table until cond holds for its regions, failing
// the test at ctx's end with the last regions seen.
func waitRegions(t *testing.T, ctx context.Context, store regiontable.Store, what string, cond func([]regiontable.Region) bool) []regiontable.Region {
	t.Helper()
	var last []regiontable.Region
	for {
		rs, err := store.Regions(ctx)
		if err == nil {
			last = rs
			if cond(rs) {
				return rs
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached; regions: %s", what, placement(last))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fullyReplicatedWithout reports whether every region has want voters,
// no learners, and no replica on any of gone.
func fullyReplicatedWithout(want int, gone ...string) func([]regiontable.Region) bool {
	return func(rs []regiontable.Region) bool {
		for _, r := range rs {
			if len(r.Replicas) != want || len(r.Learners) > 0 {
				return false
			}
			for _, id := range gone {
				if holdsReplica(r, id) || r.Host == id {
					return false
				}
			}
		}
		return true
	}
}

// followingServer returns a server that holds a replica of a region it
// does not host and is not the coordinator: the one a test stops.
func followingServer(t *testing.T, srvs []*Server) *Server {
	t.Helper()
	for _, s := range srvs {
		if !s.IsCoordinator() && len(s.reps.followerList()) > 0 {
			return s
		}
	}
	t.Fatal("no server follows another's region")
	return nil
}

// restartOptions are s's options for starting it again after Close: its
// raft address (its groups' configurations name it), a fresh registry.
func restartOptions(s *Server) Options {
	opts := s.opts
	opts.RaftListen = s.mux.Addr().String()
	opts.Registry = nil
	return opts
}

func serverByID(srvs []*Server, id string) *Server {
	for _, s := range srvs {
		if s.opts.ServerID == id {
			return s
		}
	}
	return nil
}

// "when a server has been gone longer than --dead-after (default 30 s),
// each region with a replica there gets a new one on the live server with
// the fewest replicas (raft AddVoter, snapshot install, then RemoveServer
// of the dead one), and the region table follows. A server that returns
// after being replaced drops its stale replicas."
func TestDeadServerReplaced(t *testing.T) {
	srvs, store := startReplicated(t, 4, 3, func(i int, o *Options) {
		o.DeadAfter = 2 * time.Second
		o.BalanceInterval = -1
	})
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 400)

	// The dead server: one that holds a replica of a region it does not
	// host, and is not the coordinator.
	victim := followingServer(t, srvs)
	id := victim.opts.ServerID
	opts := restartOptions(victim)
	if err := victim.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rs := waitRegions(t, ctx, store, "replicas moved off "+id, fullyReplicatedWithout(3, id))
	t.Logf("%s's replicas replaced %v after it stopped (dead-after 2s): %s", id, time.Since(start).Round(time.Millisecond), placement(rs))
	// Listed by no region now, it is counted no more: its missing mark
	// goes.
	for {
		st, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := st.Missing[id]; !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s, replaced, is still marked missing", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * repairInterval) // and none is written again
	if st, err := store.Load(ctx); err != nil {
		t.Fatal(err)
	} else if d, ok := st.Missing[id]; ok {
		t.Fatalf("%s, replaced and its mark cleared, is marked missing again (%v)", id, d)
	}
	slices.Sort(keys)
	keys = append(keys, putRange(t, c, 400, 500)...)
	slices.Sort(keys)
	mustReadAll(t, "after the repair", map[string]*client.Client{"server": c}, keys)

	// It returns: its stale follower replicas go, with their logs.
	back := restartServer(t, opts)
	for _, r := range rs {
		for back.reps.follower(r.ID) != nil {
			if ctx.Err() != nil {
				t.Fatalf("%s still follows region %d, which it was removed from", id, r.ID)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if logged, err := back.wal.Regions(); err != nil {
		t.Fatal(err)
	} else {
		for _, r := range rs {
			if slices.Contains(logged, r.ID) && r.ID != back.reps.own.regionID && !holdsReplica(r, id) {
				t.Errorf("the log of %s still holds region %d, which it was removed from", id, r.ID)
			}
		}
	}
	// Its new region gains its replicas like any other.
	rs = waitRegions(t, ctx, store, "every region replicated after the return", fullyReplicatedWithout(3))
	t.Logf("after the return: %s", placement(rs))
	mustReadAll(t, "after the dead server returned", map[string]*client.Client{"server": c}, keys)
}

// "`cellctl move-replica`, `cellctl transfer-leader` ... for operators":
// the wire requests they send, answered by a region's host.
func TestMoveReplicaAndTransferLeader(t *testing.T) {
	srvs, store := startReplicated(t, 4, 3, func(i int, o *Options) { o.BalanceInterval = -1 })
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 300)
	slices.Sort(keys)

	r, err := store.Region(ctx, srvs[0].reps.own.regionID)
	if err != nil {
		t.Fatal(err)
	}
	var from, to string
	for _, s := range srvs {
		switch id := s.opts.ServerID; {
		case !holdsReplica(r, id):
			to = id
		case id != r.Host && from == "":
			from = id
		}
	}
	host := serverByID(srvs, r.Host)
	hc := dial(t, host)

	// Bad requests are refused, and change nothing.
	for _, bad := range []wire.MoveReplicaRequest{
		{Region: r.ID, From: from, To: from},
		{Region: r.ID, From: "no-such-server", To: to},
		{Region: r.ID, From: from, To: "no-such-server"},
	} {
		if _, err := call(t, hc, wire.OpMoveReplica, &bad, &wire.EmptyMessage{}); wire.StatusOf(err) != wire.StatusBadRequest {
			t.Errorf("move %+v: %v, want BadRequest", bad, err)
		}
	}
	if _, err := call(t, hc, wire.OpTransferLeader, &wire.TransferLeaderRequest{Region: r.ID, To: to}, &wire.EmptyMessage{}); wire.StatusOf(err) != wire.StatusBadRequest {
		t.Errorf("transfer to a non-replica: %v, want BadRequest", err)
	}
	if _, err := call(t, hc, wire.OpMoveReplica, &wire.MoveReplicaRequest{Region: 999, From: from, To: to}, &wire.EmptyMessage{}); wire.StatusOf(err) != wire.StatusUnknownRegion {
		t.Errorf("move in an unknown region: %v, want UnknownRegion", err)
	}

	// The move: asked until the table shows it done (as cellctl does),
	// of the host of the moment (a loaded machine may elect another).
	moved := func(rs []regiontable.Region) bool {
		for _, e := range rs {
			if e.ID == r.ID {
				return !holdsReplica(e, from) && slices.Contains(e.Replicas, to) && len(e.Replicas) == 3
			}
		}
		return false
	}
	askHostUntil(t, ctx, srvs, store, r.ID, wire.OpMoveReplica, &wire.MoveReplicaRequest{Region: r.ID, From: from, To: to}, moved)
	mustReadAll(t, "after the move", map[string]*client.Client{"server": c}, keys)

	// The transfer: to the replica just added.
	before := time.Now()
	askHostUntil(t, ctx, srvs, store, r.ID, wire.OpTransferLeader, &wire.TransferLeaderRequest{Region: r.ID, To: to}, func(rs []regiontable.Region) bool {
		for _, e := range rs {
			if e.ID == r.ID {
				return e.Host == to
			}
		}
		return false
	})
	t.Logf("leadership of region %d handed to %s in %v", r.ID, to, time.Since(before).Round(time.Millisecond))
	transfers := 0.0
	for _, s := range srvs {
		transfers += metricValue(gather(t, s), "cell_server_leader_transfers_total", nil)
	}
	if transfers < 1 {
		t.Errorf("leader transfers: %v, want at least 1", transfers)
	}
	keys = append(keys, putRange(t, c, 300, 400)...)
	slices.Sort(keys)
	mustReadAll(t, "after the transfer", map[string]*client.Client{"server": c}, keys)
}

// "`cellctl drain SERVER` (move everything off a server, for a planned
// stop)", and undone: the server gets replicas again.
func TestDrain(t *testing.T) {
	srvs, store := startReplicated(t, 4, 3, func(i int, o *Options) { o.BalanceInterval = -1 })
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 300)
	slices.Sort(keys)
	// Drain a server that hosts a region: its leadership goes too.
	d := srvs[1].opts.ServerID
	if err := store.SetDraining(ctx, d, true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitRegions(t, ctx, store, "drained "+d, fullyReplicatedWithout(3, d))
	t.Logf("%s drained in %v", d, time.Since(start).Round(time.Millisecond))
	if n := len(srvs[1].reps.servedList()); n != 0 {
		t.Errorf("the drained server serves %d regions", n)
	}
	keys = append(keys, putRange(t, c, 300, 400)...)
	slices.Sort(keys)
	mustReadAll(t, "after the drain", map[string]*client.Client{"server": c}, keys)
}

// "Leaders are spread: a server leading far more regions than the mean
// transfers some away (leadership transfer; the lease is dropped first)."
func TestLeadersBalanced(t *testing.T) {
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) { o.BalanceInterval = -1 })
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 200)
	slices.Sort(keys)
	// Gather every leadership on the first server.
	first := srvs[0].opts.ServerID
	for _, s := range srvs[1:] {
		for _, rep := range s.reps.servedList() {
			if err := s.keep.transferLeader(rep, first); err != nil {
				t.Fatalf("transfer region %d to %s: %v", rep.regionID, first, err)
			}
		}
	}
	waitRegions(t, ctx, store, "every region led by "+first, func(rs []regiontable.Region) bool {
		for _, r := range rs {
			if r.Host != first {
				return false
			}
		}
		return true
	})
	// The coordinator spreads them again.
	coord := coordinatorOf(t, srvs)
	coord.balanceLeadersUntil(ctx, t, store)
	mustReadAll(t, "after balancing", map[string]*client.Client{"server": c}, keys)
}

func coordinatorOf(t *testing.T, srvs []*Server) *Server {
	t.Helper()
	for _, s := range srvs {
		if s.IsCoordinator() {
			return s
		}
	}
	t.Fatal("no coordinator")
	return nil
}

// balanceLeadersUntil runs the coordinator's balancing step until no
// server leads more than one region more than another.
func (s *Server) balanceLeadersUntil(ctx context.Context, t *testing.T, store regiontable.Store) {
	t.Helper()
	for {
		rs, err := store.Regions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lead := map[string]int{}
		for _, m := range s.table.Load().members {
			lead[m.ID] = 0
		}
		for _, r := range rs {
			lead[r.Host]++
		}
		lo, hi := len(rs), 0
		for _, n := range lead {
			lo, hi = min(lo, n), max(hi, n)
		}
		if hi-lo <= 1 {
			t.Logf("leaders per server: %v", lead)
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("leaders not spread: %v", fmt.Sprint(lead))
		}
		s.coord.balanceLeaders(ctx, s.table.Load(), nil)
		time.Sleep(500 * time.Millisecond)
	}
}

// placement lists each region's host, voters and learners.
func placement(rs []regiontable.Region) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "[%d host %s voters %v learners %v] ", r.ID, r.Host, r.Replicas, r.Learners)
	}
	return b.String()
}

// askHostUntil sends req to the host of region id, as the table names it
// now, until done holds for the table's regions.
func askHostUntil(t *testing.T, ctx context.Context, srvs []*Server, store regiontable.Store, id uint32, op wire.Op, req wire.Message, done func([]regiontable.Region) bool) {
	t.Helper()
	for {
		rs, err := store.Regions(ctx)
		if err == nil && done(rs) {
			return
		}
		e, err := store.Region(ctx, id)
		if err == nil {
			if host := serverByID(srvs, e.Host); host != nil {
				_, err = call(t, dial(t, host), op, req, &wire.EmptyMessage{})
				if st := wire.StatusOf(err); err != nil && st != wire.StatusWrongServer && st != wire.StatusUnavailable {
					t.Fatalf("%v of region %d on %s: %v", op, id, e.Host, err)
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%v of region %d: not done: %s", op, id, placement(rs))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// A server that restarts is a member again before it replays its logs:
// however long the replay takes, it is not taken for dead and its
// replicas stay (a full-cluster restart would otherwise move the replicas
// of every server slower to start than --dead-after).
func TestSlowRestartNotReplaced(t *testing.T) {
	const deadAfter = 3 * time.Second
	srvs, store := startReplicated(t, 4, 3, func(i int, o *Options) {
		o.DeadAfter = deadAfter
		o.BalanceInterval = -1
	})
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 200)

	victim := followingServer(t, srvs)
	id := victim.opts.ServerID
	before := waitRegions(t, ctx, store, "fully replicated", fullyReplicatedWithout(3))
	opts := restartOptions(victim)
	replay := 3 * deadAfter
	opts.TestingKnobs.BeforeGroups = func() { time.Sleep(replay) }
	if err := victim.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	restartServer(t, opts)
	t.Logf("%s restarted in %v (a replay of %v stood for)", id, time.Since(start).Round(time.Millisecond), replay)
	after, err := store.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range before {
		if !holdsReplica(b, id) {
			continue
		}
		i := slices.IndexFunc(after, func(a regiontable.Region) bool { return a.ID == b.ID })
		if i < 0 || !holdsReplica(after[i], id) {
			t.Errorf("region %d: %s's replica was moved while it restarted: before %s, after %s", b.ID, id, placement(before), placement(after))
		}
	}
	slices.Sort(keys)
	mustReadAll(t, "after the restart", map[string]*client.Client{"server": c}, keys)
}

// A server whose own region's group elected another replica during its
// start does not wait for that replica to take the region over: the
// replica may be a server still starting, itself waiting for a region
// this one leads (a full-cluster restart deadlocked so: each server's
// start waited for a takeover only a started server does). After
// startLeaderWait it starts without serving the region.
func TestStartDoesNotWaitForAnotherLeadersTakeover(t *testing.T) {
	// The others stand for servers still starting: elected, they do not
	// take x's region over. Only that region, and only once the cluster
	// is up: an election while the three start (a heartbeat missed on a
	// loaded machine) must be taken over as usual, or the others' own
	// regions are never published whole.
	var refused atomic.Uint32
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
		o.BalanceInterval = -1
		if i > 0 {
			o.TestingKnobs.RefuseTakeover = func(region uint32) bool { return region == refused.Load() }
		}
	})
	ctx := repairCtx(t)
	x := srvs[0]
	region, id := x.RegionID(), x.opts.ServerID
	refused.Store(region)
	opts := restartOptions(x)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	// Another replica leads the region's group now.
	deadline := time.Now().Add(30 * time.Second)
	for serverByID(srvs[1:], leaderOf(srvs[1:], region)) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("region %d's group elected no leader among the others", region)
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	back := restartServer(t, opts)
	took := time.Since(start)
	t.Logf("%s started in %v (startLeaderWait %v) without its region %d's leadership", id, took.Round(time.Millisecond), back.startLeaderWait(), region)
	if back.reps.servedReplica(region) != nil {
		t.Fatalf("%s serves region %d, whose group another replica leads", id, region)
	}
	e, err := store.Region(ctx, region)
	if err != nil || e.Host != id {
		t.Fatalf("region %d's entry: %+v, %v (want it still naming %s: nobody took it over)", region, e, err, id)
	}
	// The leader that does not take the region over is not ready
	// (/readyz): it leads a region it does not serve.
	if leader := serverByID(srvs[1:], leaderOf(srvs[1:], region)); leader != nil {
		if why := leader.notReady(); !strings.Contains(why, fmt.Sprintf("region %d:", region)) {
			t.Errorf("readiness of %s, leading region %d without serving it: %q", leader.opts.ServerID, region, why)
		}
	}
}

// leaderOf returns the ID of the server among srvs whose replica of region
// leads its group, "" if none does.
func leaderOf(srvs []*Server, region uint32) string {
	for _, s := range srvs {
		if rep := s.reps.holding(region); rep != nil {
			if r := rep.raftGroup(); r != nil && r.State() == raft.Leader {
				return s.opts.ServerID
			}
		}
	}
	return ""
}
