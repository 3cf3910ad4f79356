package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// Self-repair (docs/design.md §9). Three things keep the replicas of the cluster
// where they should be:
//
//   - A replica move (OpMoveReplica, from an operator or the coordinator)
//     is carried out by the region's host, one step per replicaLoop tick:
//     the new server joins the group as a nonvoter, which receives a
//     snapshot and the log; once caught up it becomes a voter; then the
//     old replica is removed (raft RemoveServer). If the old replica is
//     the host's own, the host first hands its leadership to another
//     replica, and the asker asks the new host again. The region table
//     entry follows every change.
//   - The coordinator (coordinator.go) replaces the replicas of servers
//     missing from the members for longer than Options.DeadAfter, and of
//     servers marked draining (cellctl drain), by asking each region's
//     host for a move onto the live server holding the fewest replicas;
//     it asks again every repairInterval until the table shows the move
//     done. It also spreads leaderships: a server leading far more regions
//     than the mean hands one to a replica on the server leading the
//     fewest, every Options.BalanceInterval.
//   - A server that finds itself holding a follower replica of a region
//     whose table entry no longer lists it (it was replaced while it was
//     down) drops the replica and its log.
//
// A leadership transfer (OpTransferLeader, balancing, a draining host)
// drops the region's read lease and stops serving it before it hands the
// leadership over: the target is elected at once, without waiting out
// the old leader's lease, so the old leader must already have stopped
// answering.

// repairInterval is how often the coordinator looks for replicas to move.
const repairInterval = time.Second

// maxConcurrentMoves bounds the regions the coordinator has adding a
// replica at once: each addition streams a region image.
const maxConcurrentMoves = 2

// learnerGiveUp is how long a nonvoter's server may go without opening
// its replica before the leader removes it and places it elsewhere.
const learnerGiveUp = time.Minute

// failedPlacementMemory is how long a server that failed to open a
// replica is passed over by placement.
const failedPlacementMemory = 2 * time.Minute

// noteFailedPlacement remembers that server id failed to open a replica.
func (co *coordinator) noteFailedPlacement(id string) {
	co.failedPlace.Lock()
	defer co.failedPlace.Unlock()
	if co.failedPlace.at == nil {
		co.failedPlace.at = make(map[string]time.Time)
	}
	co.failedPlace.at[id] = time.Now()
}

// placementFailedRecently reports whether server id failed to open a
// replica within failedPlacementMemory.
func (co *coordinator) placementFailedRecently(id string) bool {
	co.failedPlace.Lock()
	defer co.failedPlace.Unlock()
	t, ok := co.failedPlace.at[id]
	return ok && time.Since(t) < failedPlacementMemory
}

// replicaMove is a move of rep's replica on server from to server to.
type replicaMove struct {
	from, to string
}

// goneServers tracks since when each server was missing from the members,
// as this server saw it (followTable), or as the table's missing marks
// say, whichever is earlier. The coordinator marks how long it has
// counted each (recordMissing), so a server that starts, or becomes the
// coordinator, goes on from that count rather than from its own start.
// A mark holds a duration, not a time: no two servers' clocks are
// compared, and while no coordinator runs (a full-cluster restart)
// nobody counts.
type goneServers struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// note records the members and regions of v at now: a server a region
// lists that is not a member is gone since now, or since now less its
// missing mark, unless it was already gone earlier; a member, or a server
// no region lists (its replicas were all replaced), is not counted.
func (g *goneServers) note(v *tableView, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	since := make(map[string]time.Time)
	for id := range listedServers(v) {
		if _, ok := v.members[id]; ok {
			continue
		}
		at := now.Add(-v.missing[id])
		if old, seen := g.since[id]; seen && old.Before(at) {
			at = old
		}
		since[id] = at
	}
	g.since = since
}

// listedServers returns the set of servers a region of v lists (host,
// voter or learner).
func listedServers(v *tableView) map[string]bool {
	ids := make(map[string]bool)
	for _, r := range v.regions {
		for _, list := range [][]string{r.Replicas, r.Learners, {r.Host}} {
			for _, id := range list {
				if id != "" {
					ids[id] = true
				}
			}
		}
	}
	return ids
}

// missingMarkEvery is how far a server's count may run ahead of its
// missing mark before the coordinator writes the mark again: a
// coordinator elected after this one loses at most this much of it.
const missingMarkEvery = 5 * time.Second

// marks returns what the table's missing marks lack against this count
// at now: the servers counted as gone that v marks not at all or at
// least every short, with how long each has been gone; and the
// marked servers v no longer counts (members again, or listed by no
// region: their replicas were all replaced).
func (g *goneServers) marks(v *tableView, now time.Time, every time.Duration) (add map[string]time.Duration, clear []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	add = make(map[string]time.Duration)
	for id, t := range g.since {
		if _, member := v.members[id]; member {
			continue
		}
		d := max(now.Sub(t), 0)
		if stored, marked := v.missing[id]; !marked || d-stored >= every {
			add[id] = d
		}
	}
	listed := listedServers(v)
	for id := range v.missing {
		if _, member := v.members[id]; member || !listed[id] {
			clear = append(clear, id)
		}
	}
	slices.Sort(clear)
	return add, clear
}

// dead returns the servers gone for at least after at now.
func (g *goneServers) dead(now time.Time, after time.Duration) map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]bool)
	for id, t := range g.since {
		if now.Sub(t) >= after {
			out[id] = true
		}
	}
	return out
}

// --- the host's side: moves and transfers -------------------------------

// requestMove records a move of rep's replica, asked by OpMoveReplica.
// REQUIRES: this server serves rep's region.
func (k *keeper) requestMove(rep *replica, req *wire.MoveReplicaRequest) error {
	s := k.s
	v := s.table.Load()
	if req.From == req.To {
		return wireErrorf(wire.StatusBadRequest, "move replica: from and to are both %q", req.From)
	}
	cfg, err := groupConfig(rep)
	if err != nil {
		return err
	}
	_, fromIn := suffrage(cfg, req.From)
	sf, toIn := suffrage(cfg, req.To)
	toVoter := toIn && sf == raft.Voter
	if !fromIn {
		if toVoter {
			return nil // done already
		}
		return wireErrorf(wire.StatusBadRequest, "move replica: region %d has no replica on %q", rep.regionID, req.From)
	}
	if cur := rep.move.Load(); cur != nil && cur.from == req.From && cur.to != req.To {
		// Under way: keep its target while it is a live member, also
		// before the group lists it (its nonvoter is being added). An
		// asker that chose another target (the coordinator places again
		// on every ask, and the table lists the first as a learner by
		// then) would otherwise leave the group one replica too many.
		if _, live := v.members[cur.to]; live && !v.draining[cur.to] {
			return nil
		}
	}
	if _, live := v.members[req.To]; !live {
		return wireErrorf(wire.StatusBadRequest, "move replica: %q is not a live member", req.To)
	}
	if v.draining[req.To] {
		return wireErrorf(wire.StatusBadRequest, "move replica: %q is draining", req.To)
	}
	rep.move.Store(&replicaMove{from: req.From, to: req.To})
	s.log.Info("server: replica move requested", slog.Uint64("region", uint64(rep.regionID)), slog.String("from", req.From), slog.String("to", req.To))
	return nil
}

// groupConfig returns rep's group's latest configuration.
func groupConfig(rep *replica) (raft.Configuration, error) {
	f := rep.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, err
	}
	return f.Configuration(), nil
}

func inConfig(cfg raft.Configuration, id string) bool {
	return slices.ContainsFunc(cfg.Servers, func(srv raft.Server) bool { return string(srv.ID) == id })
}

func suffrage(cfg raft.Configuration, id string) (raft.ServerSuffrage, bool) {
	for _, srv := range cfg.Servers {
		if string(srv.ID) == id {
			return srv.Suffrage, true
		}
	}
	return 0, false
}

// replicate takes one step towards the group rep's region should have,
// which this server leads: a caught-up nonvoter is promoted; a requested
// move adds its target or removes its source; a group with more voters
// than Options.Replicas loses a dead or draining one; a group with fewer
// servers gains a nonvoter on the live server holding the fewest
// replicas. The region table's entry is published with the new
// configuration after every change, and before a nonvoter is added (so
// that the new member opens its replica).
func (k *keeper) replicate(rep *replica) error {
	s := k.s
	cfg, err := groupConfig(rep)
	if err != nil {
		return err
	}
	if done, err := k.promoteCaughtUp(rep, cfg); done || err != nil {
		return err
	}
	if mv := rep.move.Load(); mv != nil {
		return k.stepMove(rep, cfg, mv)
	}
	if done, err := k.trimVoter(rep, cfg); done || err != nil {
		return err
	}
	if len(cfg.Servers) >= s.opts.Replicas {
		return nil
	}
	m, ok := k.pickReplicaHost(cfg)
	if !ok {
		return nil // too few live servers: try again later
	}
	return k.addNonvoter(rep, cfg, m)
}

// promoteCaughtUp makes the first nonvoter that has caught up a voter. It
// reports whether it found a nonvoter (caught up or not): a group adds
// one server at a time. A nonvoter on a dead or draining server is
// removed instead.
func (k *keeper) promoteCaughtUp(rep *replica, cfg raft.Configuration) (bool, error) {
	s := k.s
	v := s.table.Load()
	dead := s.coord.gone.dead(time.Now(), s.opts.DeadAfter)
	for _, srv := range cfg.Servers {
		if srv.Suffrage != raft.Nonvoter {
			continue
		}
		id := string(srv.ID)
		if dead[id] || v.draining[id] {
			return true, k.removeServer(rep, id, "the nonvoter's server is dead or draining")
		}
		ok, holds, err := k.learnerState(rep, id)
		if err != nil {
			return true, err
		}
		if !holds {
			// Listed, yet its server did not open the replica (out of
			// memory for the region file, say): after a while, give it up
			// and place the replica elsewhere.
			first, seen := rep.learnerMissing[id]
			if !seen {
				rep.learnerMissing[id] = time.Now()
				return true, nil
			}
			if time.Since(first) < learnerGiveUp {
				return true, nil
			}
			delete(rep.learnerMissing, id)
			s.coord.noteFailedPlacement(id)
			return true, k.removeServer(rep, id, "its server never opened the replica")
		}
		delete(rep.learnerMissing, id)
		if !ok {
			return true, nil
		}
		if err := rep.raft.AddVoter(srv.ID, srv.Address, 0, s.opts.ProposalTimeout).Error(); err != nil {
			return true, fmt.Errorf("promote %s: %w", srv.ID, err)
		}
		s.log.Info("server: follower caught up; now a voter", slog.Uint64("region", uint64(rep.regionID)), slog.String("server", id))
		return true, k.publishReplicas(rep)
	}
	return false, nil
}

// stepMove takes one step of move mv (the type's doc).
func (k *keeper) stepMove(rep *replica, cfg raft.Configuration, mv *replicaMove) error {
	s := k.s
	if !inConfig(cfg, mv.from) {
		rep.move.CompareAndSwap(mv, nil)
		return nil
	}
	sf, in := suffrage(cfg, mv.to)
	switch {
	case !in:
		m, live := s.table.Load().members[mv.to]
		if !live || m.RaftAddr == "" {
			rep.move.CompareAndSwap(mv, nil) // the target went; the asker picks another
			return fmt.Errorf("move target %s is not a live member", mv.to)
		}
		return k.addNonvoter(rep, cfg, m)
	case sf != raft.Voter:
		return nil // promoteCaughtUp's
	case mv.from == s.opts.ServerID:
		// The target votes: hand the leadership over, then the new host
		// removes this replica when asked again. The move is kept until
		// the transfer succeeds: one that failed (timed out) is tried
		// again at the next tick, towards the same target.
		if err := k.transferLeader(rep, mv.to); err != nil {
			return err
		}
		rep.move.CompareAndSwap(mv, nil)
		return nil
	default:
		if err := k.removeServer(rep, mv.from, "moved to "+mv.to); err != nil {
			return err
		}
		rep.move.CompareAndSwap(mv, nil)
		return nil
	}
}

// trimVoter removes one voter from a group with more than
// Options.Replicas, never this server: a dead one, else one not a live
// member, else a draining one, else the one on the server holding the
// most (placeReplica's measure, so the group keeps the replicas placement
// would have chosen). It reports whether it removed one.
//
// A group gets an extra voter when a replacement finished on a host that
// did not know of the move before it (the leadership changed during it,
// or a move was asked again with another target): nothing else would
// ever remove it.
func (k *keeper) trimVoter(rep *replica, cfg raft.Configuration) (bool, error) {
	s := k.s
	voters, _ := replicaIDs(cfg)
	if len(voters) <= s.opts.Replicas {
		return false, nil
	}
	id, why := k.extraVoter(s.table.Load(), s.coord.gone.dead(time.Now(), s.opts.DeadAfter), voters)
	if id == "" {
		return false, nil
	}
	return true, k.removeServer(rep, id, "the group has more voters than --replicas; "+why)
}

// extraVoter chooses the voter trimVoter removes, and says why.
func (k *keeper) extraVoter(v *tableView, dead map[string]bool, voters []string) (string, string) {
	s := k.s
	candidates := slices.DeleteFunc(slices.Clone(voters), func(id string) bool { return id == s.opts.ServerID })
	for _, pass := range []struct {
		why string
		is  func(string) bool
	}{
		{"its server is dead", func(id string) bool { return dead[id] }},
		{"its server is not a member", func(id string) bool { _, live := v.members[id]; return !live }},
		{"its server is draining", func(id string) bool { return v.draining[id] }},
	} {
		for _, id := range candidates {
			if pass.is(id) {
				return id, pass.why
			}
		}
	}
	if len(candidates) == 0 {
		return "", ""
	}
	load := replicaLoad(v, s.coord.regionsInUse(v))
	most := candidates[0]
	for _, id := range candidates[1:] {
		if load[most].less(load[id]) {
			most = id
		}
	}
	return most, "its server holds the most"
}

// addNonvoter publishes m as a learner of rep's region and adds it to the
// group as a nonvoter.
func (k *keeper) addNonvoter(rep *replica, cfg raft.Configuration, m regiontable.Member) error {
	s := k.s
	voters, learners := replicaIDs(cfg)
	if err := k.putReplicas(rep, voters, append(learners, m.ID)); err != nil {
		return err
	}
	if f := s.opts.TestingKnobs.BeforeAddNonvoter; f != nil {
		f(rep.regionID, m.ID)
	}
	if err := rep.raft.AddNonvoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, s.opts.ProposalTimeout).Error(); err != nil {
		return fmt.Errorf("add %s: %w", m.ID, err)
	}
	s.log.Info("server: follower added; it catches up before it votes", slog.Uint64("region", uint64(rep.regionID)), slog.String("server", m.ID))
	return nil
}

// removeServer removes server id from rep's group and publishes the new
// configuration.
func (k *keeper) removeServer(rep *replica, id, why string) error {
	s := k.s
	if err := rep.raft.RemoveServer(raft.ServerID(id), 0, s.opts.ProposalTimeout).Error(); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	s.metrics.replicasRemoved.Inc()
	s.log.Info("server: replica removed from the group", slog.Uint64("region", uint64(rep.regionID)), slog.String("server", id), slog.String("why", why))
	return k.publishReplicas(rep)
}

// errTransferring refuses a transfer while another one runs; the asker
// retries.
var errTransferring = &wire.StatusError{Status: wire.StatusUnavailable, Message: "a leadership transfer of the region is under way"}

// transferLeader hands the leadership of rep's group to the voter on
// server to, or, if to is empty, to a live voter that is not draining.
// It stops serving the region first (dropping its read lease: the target
// is elected without waiting the lease out); if the transfer fails, this
// server is still the leader and serves the region again.
func (k *keeper) transferLeader(rep *replica, to string) error {
	s := k.s
	if !rep.transferring.CompareAndSwap(false, true) {
		return errTransferring
	}
	defer rep.transferring.Store(false)
	cfg, err := groupConfig(rep)
	if err != nil {
		return err
	}
	v := s.table.Load()
	if to == "" {
		for _, id := range voterIDs(cfg) {
			if _, live := v.members[id]; live && id != s.opts.ServerID && !v.draining[id] {
				to = id
				break
			}
		}
		if to == "" {
			return wireErrorf(wire.StatusUnavailable, "transfer leader: region %d has no other live voter", rep.regionID)
		}
	}
	if to == s.opts.ServerID {
		return nil
	}
	if sf, in := suffrage(cfg, to); !in || sf != raft.Voter {
		return wireErrorf(wire.StatusBadRequest, "transfer leader: %q is not a voter of region %d", to, rep.regionID)
	}
	m, live := v.members[to]
	if !live {
		return wireErrorf(wire.StatusBadRequest, "transfer leader: %q is not a live member", to)
	}
	if err := k.transferTargetReady(rep, m); err != nil {
		return err
	}
	start := time.Now()
	s.hosting.unserve(rep)
	for attempt := 1; ; attempt++ {
		err = k.transferAttempt(rep, attempt, to, m.RaftAddr)
		if err == nil || attempt == transferAttempts || !transferTimedOut(err) || rep.raft.State() != raft.Leader {
			break
		}
		if rerr := k.transferTargetReady(rep, m); rerr != nil {
			err = errors.Join(err, rerr)
			break
		}
		s.log.Info("server: leadership transfer timed out; trying again", slog.Uint64("region", uint64(rep.regionID)), slog.String("to", to), slog.Int("attempt", attempt))
	}
	if err != nil {
		s.log.Warn("server: leadership transfer failed; serving the region again", slog.Uint64("region", uint64(rep.regionID)), slog.String("to", to), slog.Any("err", err))
		return wireErrorf(wire.StatusUnavailable, "transfer leader of region %d to %s: %v", rep.regionID, to, err)
	}
	s.metrics.leaderTransfers.Inc()
	s.log.Info("server: handed the region's leadership over", slog.Uint64("region", uint64(rep.regionID)), slog.String("to", to), slog.Duration("took", time.Since(start)))
	return nil
}

// transferAttempts bounds the tries of one leadership transfer. raft gives
// a transfer one election timeout to catch the target up and have it
// elected; under load (a leader appending thousands of records a second,
// over one AppendEntries in flight) that can run out while the target is
// still catching up, and the next try starts from where it got.
const transferAttempts = 3

// transferCatchUp is how far behind the leader's commit index a target
// may have applied and still be handed the leadership: raft catches it up
// first, within the transfer's election timeout.
const transferCatchUp = 256

// transferReadyTimeout bounds the question transferTargetReady asks.
const transferReadyTimeout = time.Second

// transferTargetReady asks the target member m how far its replica of
// rep's region has applied, and refuses the transfer (Unavailable) unless
// it answers within transferReadyTimeout, holding the replica, no more
// than transferCatchUp entries behind this leader's commit index.
//
// raft's transfer cannot be cancelled: while it runs the leader refuses
// every write, and a target that stopped answering (killed, paused, cut
// off, yet still a member until its lease lapses) holds it there until
// raft's RPC to it times out, seconds with the region unwritable. A
// target that answers now is very likely to take the transfer.
func (k *keeper) transferTargetReady(rep *replica, m regiontable.Member) error {
	s := k.s
	commit := rep.raft.CommitIndex()
	var md wire.MetadataReply
	ctx, cancel := context.WithTimeout(s.bgCtx, transferReadyTimeout)
	defer cancel()
	if err := s.call(ctx, m.RPCAddr, wire.OpMetadata, &wire.MetadataRequest{OneRegion: true, Region: rep.regionID}, &md); err != nil {
		return wireErrorf(wire.StatusUnavailable, "transfer leader of region %d: %s does not answer: %v", rep.regionID, m.ID, err)
	}
	if len(md.Regions) != 1 || md.Regions[0].ID != rep.regionID {
		return wireErrorf(wire.StatusUnavailable, "transfer leader of region %d: %s holds no replica of it", rep.regionID, m.ID)
	}
	if applied := md.Regions[0].Raft.Applied; applied+transferCatchUp < commit {
		return wireErrorf(wire.StatusUnavailable, "transfer leader of region %d: %s has applied %d of %d", rep.regionID, m.ID, applied, commit)
	}
	return nil
}

// transferAttempt asks raft once to hand rep's group to server to.
func (k *keeper) transferAttempt(rep *replica, attempt int, to, addr string) error {
	s := k.s
	if f := s.opts.TestingKnobs.TransferFault; f != nil {
		if err := f(rep.regionID, attempt); err != nil {
			return err
		}
	}
	return rep.raft.LeadershipTransferToServer(raft.ServerID(to), raft.ServerAddress(addr)).Error()
}

// transferTimedOut reports whether err is raft's "the transfer ran out of
// time" (it has no error value for it): the leader still leads, and the
// target may be elected at the next try.
func transferTimedOut(err error) bool {
	return err != nil && strings.Contains(err.Error(), "leadership transfer timeout")
}

func voterIDs(cfg raft.Configuration) []string {
	voters, _ := replicaIDs(cfg)
	return voters
}

// --- the coordinator's side ---------------------------------------------

// repairLoop replaces dead and draining servers' replicas and spreads
// leaderships until ctx ends (the coordinator's term).
func (co *coordinator) repairLoop(ctx context.Context) {
	s := co.s
	t := time.NewTicker(repairInterval)
	defer t.Stop()
	lastBalance := time.Now()
	asked := make(map[uint32]string) // the last move asked per region, logged once
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v := s.table.Load()
		if v == nil {
			continue
		}
		now := time.Now()
		co.recordMissing(ctx, v, now)
		dead := co.gone.dead(now, s.opts.DeadAfter)
		co.repairRegions(ctx, v, dead, asked)
		if s.opts.BalanceInterval > 0 && now.Sub(lastBalance) >= s.opts.BalanceInterval {
			lastBalance = now
			co.balanceLeaders(ctx, v, dead)
		}
	}
}

// recordMissing brings the table's missing marks in step with the
// coordinator's count of gone servers (goneServers.marks): a coordinator
// elected after this one, or a server started later, then goes on from
// that count. A mark is written only while its server is not a member
// (one compare in the store), and a member's registration clears its
// own.
func (co *coordinator) recordMissing(ctx context.Context, v *tableView, now time.Time) {
	s := co.s
	every := missingMarkEvery
	if s.opts.TestingKnobs.MissingMarkEvery > 0 {
		every = s.opts.TestingKnobs.MissingMarkEvery
	}
	add, clear := co.gone.marks(v, now, every)
	for _, id := range slices.Sorted(maps.Keys(add)) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := s.opts.Store.MarkMissing(cctx, id, add[id])
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("server: coordinator: mark a server missing", slog.String("server", id), slog.Any("err", err))
		case ok:
			s.log.Debug("server: coordinator: marked a server missing", slog.String("server", id), slog.Duration("for", add[id]))
		}
	}
	for _, id := range clear {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.opts.Store.ClearMissing(cctx, id)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("server: coordinator: clear a missing mark", slog.String("server", id), slog.Any("err", err))
		}
	}
}

// leaving reports whether server id's replicas are to move away.
func leaving(v *tableView, dead map[string]bool, id string) bool {
	return dead[id] || v.draining[id]
}

// repairRegions asks the host of every region with a replica on a dead
// or draining server to move it (or, if the host itself is draining, to
// hand its leadership over first).
func (co *coordinator) repairRegions(ctx context.Context, v *tableView, dead map[string]bool, asked map[uint32]string) {
	moving := 0
	for _, r := range v.regions {
		if len(r.Learners) > 0 {
			moving++
		}
	}
	for _, r := range sortedRegions(v) {
		host, live := v.members[r.Host]
		if !live {
			continue // failover first
		}
		var from string
		for _, id := range append(slices.Clone(r.Replicas), r.Learners...) {
			if leaving(v, dead, id) {
				from = id
				break
			}
		}
		if from == "" {
			delete(asked, r.ID)
			continue
		}
		if from == r.Host {
			co.askAdmin(ctx, host, wire.OpTransferLeader, &wire.TransferLeaderRequest{Region: r.ID}, r.ID, asked, "hand over: host draining")
			continue
		}
		if len(r.Learners) == 0 {
			if moving >= maxConcurrentMoves {
				continue
			}
			moving++
		}
		to, ok := co.moveTarget(v, dead, r)
		if !ok {
			continue
		}
		co.askAdmin(ctx, host, wire.OpMoveReplica, &wire.MoveReplicaRequest{Region: r.ID, From: from, To: to}, r.ID, asked, "move "+from+" -> "+to)
	}
}

// moveTarget chooses the server that takes the place of r's leaving
// replica: the replacement already under way (a learner on a server that
// stays), or, when the region already has Options.Replicas servers that
// stay, one of them (the host then only removes the leaving one); else a
// new server (placeReplica). Asked again every repairInterval, it names
// the same server each time while the move runs.
func (co *coordinator) moveTarget(v *tableView, dead map[string]bool, r regiontable.Region) (string, bool) {
	s := co.s
	stay := func(id string) bool {
		_, live := v.members[id]
		return live && !leaving(v, dead, id)
	}
	for _, id := range slices.Sorted(slices.Values(r.Learners)) {
		if stay(id) {
			return id, true
		}
	}
	var staying []string
	for _, id := range r.Replicas {
		if stay(id) && id != r.Host {
			staying = append(staying, id)
		}
	}
	if len(staying)+1 >= s.opts.Replicas && len(staying) > 0 {
		slices.Sort(staying)
		return staying[0], true
	}
	return co.placeReplica(v, dead, r)
}

// askAdmin sends an operator request to a region's host, logging it the
// first time it is asked.
func (co *coordinator) askAdmin(ctx context.Context, host regiontable.Member, op wire.Op, req wire.Message, id uint32, asked map[uint32]string, what string) {
	s := co.s
	if asked[id] != what {
		asked[id] = what
		s.log.Warn("server: coordinator: repairing a region", slog.Uint64("region", uint64(id)), slog.String("host", host.ID), slog.String("action", what))
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.call(cctx, host.RPCAddr, op, req, nil); err != nil && ctx.Err() == nil {
		s.log.Debug("server: coordinator: ask a host", slog.Uint64("region", uint64(id)), slog.String("host", host.ID), slog.Any("err", err))
	}
}

// placeReplica chooses the server for a new replica of r: a live member,
// not draining, not dead, holding none of r yet, with the fewest bytes
// in use in its replicas (placement.go), then the fewest replicas (ties:
// the lowest ID).
//
// A server that recently failed to open a replica is chosen only when no
// other one can be.
func (co *coordinator) placeReplica(v *tableView, dead map[string]bool, r regiontable.Region) (string, bool) {
	load := replicaLoad(v, co.regionsInUse(v))
	best, bestFailed := "", false
	for _, id := range sortedMembers(v) {
		if leaving(v, dead, id) || holdsReplica(r, id) || v.members[id].RaftAddr == "" {
			continue
		}
		failed := co.placementFailedRecently(id)
		if best == "" || bestFailed && !failed || failed == bestFailed && load[id].less(load[best]) {
			best, bestFailed = id, failed
		}
	}
	return best, best != ""
}

// serverLoad is what a server holds, by the region table: the bytes in
// use and the count of its replicas.
type serverLoad struct {
	bytes    uint64
	replicas int
}

func (a serverLoad) less(b serverLoad) bool {
	if a.bytes != b.bytes {
		return a.bytes < b.bytes
	}
	return a.replicas < b.replicas
}

// replicaLoad sums each server's replicas, voters and learners: their
// bytes in use (used, by region; a region missing there counts its whole
// size) and their count.
func replicaLoad(v *tableView, used map[uint32]uint64) map[string]serverLoad {
	load := make(map[string]serverLoad)
	for _, r := range v.regions {
		bytes, ok := used[r.ID]
		if !ok {
			bytes = r.Size
		}
		for _, id := range append(slices.Clone(r.Replicas), r.Learners...) {
			l := load[id]
			l.bytes += bytes
			l.replicas++
			load[id] = l
		}
	}
	return load
}

// balanceLeaders moves one leadership from the server leading the most
// regions to the server leading the fewest, when the first leads more
// than the mean (rounded up) and two more than the second.
func (co *coordinator) balanceLeaders(ctx context.Context, v *tableView, dead map[string]bool) {
	s := co.s
	lead := make(map[string]int)
	var ids []string
	for _, id := range sortedMembers(v) {
		if !leaving(v, dead, id) && v.members[id].RaftAddr != "" {
			ids = append(ids, id)
			lead[id] = 0
		}
	}
	if len(ids) < 2 {
		return
	}
	hosted := 0
	for _, r := range v.regions {
		if _, ok := lead[r.Host]; ok {
			lead[r.Host]++
			hosted++
		}
	}
	most, fewest := ids[0], ids[0]
	for _, id := range ids {
		if lead[id] > lead[most] {
			most = id
		}
		if lead[id] < lead[fewest] {
			fewest = id
		}
	}
	mean := (hosted + len(ids) - 1) / len(ids)
	if lead[most] <= mean || lead[most]-lead[fewest] < 2 {
		return
	}
	for _, r := range sortedRegions(v) {
		if r.Host != most || !slices.Contains(r.Replicas, fewest) || len(r.Learners) > 0 {
			continue
		}
		s.log.Info("server: coordinator: spreading leaders", slog.Uint64("region", uint64(r.ID)), slog.String("from", most),
			slog.String("to", fewest), slog.Int("from_leads", lead[most]), slog.Int("to_leads", lead[fewest]))
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.call(cctx, v.members[most].RPCAddr, wire.OpTransferLeader, &wire.TransferLeaderRequest{Region: r.ID, To: fewest}, nil)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("server: coordinator: leadership transfer", slog.Uint64("region", uint64(r.ID)), slog.Any("err", err))
		}
		return
	}
}

func sortedRegions(v *tableView) []regiontable.Region {
	out := make([]regiontable.Region, 0, len(v.regions))
	for _, r := range v.regions {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func sortedMembers(v *tableView) []string {
	out := make([]string, 0, len(v.members))
	for id := range v.members {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// --- a returning server's side ------------------------------------------

// dropStaleFollower drops this server's follower replica of region e when
// e no longer lists this server (it was replaced while it was down): the
// group, the region file and the region's log and snapshots.
func (k *keeper) dropStaleFollower(e regiontable.Region) {
	s := k.s
	if e.Host == s.opts.ServerID || holdsReplica(e, s.opts.ServerID) || len(e.Replicas) == 0 {
		return
	}
	f := &s.reps.follow
	f.mu.Lock()
	rep := f.m[e.ID]
	if rep == nil || f.closed {
		f.mu.Unlock()
		return
	}
	delete(f.m, e.ID)
	f.mu.Unlock()
	err := rep.stopRaft()
	err = errors.Join(err, rep.sm.Close()) // requests that found the replica before fail
	err = errors.Join(err, s.wal.DropRegion(e.ID), s.snaps.DropRegion(e.ID))
	s.log.Warn("server: dropped a stale replica: the region's group no longer holds this server", slog.Uint64("region", uint64(e.ID)),
		slog.Any("replicas", e.Replicas), slog.Any("err", err))
}

// --- the wire ---------------------------------------------------------------

// serveAdmin answers one OpMoveReplica or OpTransferLeader request, beside
// the tree workers. A request for a region this server does not serve is
// redirected to its host. REQUIRES: c.inflight counts the request;
// serveAdmin releases it and the frame.
func (c *conn) serveAdmin(f wire.Frame, arrived time.Time) {
	s := c.s
	defer c.done()
	defer f.Release()
	h := &f.Header
	err := func() error {
		switch h.Op {
		case wire.OpMoveReplica:
			var req wire.MoveReplicaRequest
			if err := req.Decode(f.Body); err != nil {
				return err
			}
			rep := s.reps.servedReplica(req.Region)
			if rep == nil {
				return s.redirect(req.Region, "move replica")
			}
			return s.keep.requestMove(rep, &req)
		default:
			var req wire.TransferLeaderRequest
			if err := req.Decode(f.Body); err != nil {
				return err
			}
			rep := s.reps.servedReplica(req.Region)
			if rep == nil {
				return s.redirect(req.Region, "transfer leader")
			}
			return s.keep.transferLeader(rep, req.To)
		}
	}()
	s.rpc.respond(c, h, &wire.EmptyMessage{}, err, 0, time.Since(arrived))
}
