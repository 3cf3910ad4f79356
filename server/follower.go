package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// Follower replicas (docs/design.md §9: "a server hosts any number of replicas,
// leaders and followers"). With Options.Replicas above 1 the leader of a
// region adds that many minus one other servers to its raft group: each
// first as a nonvoter, which receives a snapshot and the log without
// counting towards the quorum, then, once it has applied everything the
// leader had committed when asked, as a voter. Adding a voter that has
// not caught up would stall every write until it had (a quorum of two
// needs both). The region table's entry lists the group's servers
// (Region.Replicas); a server that finds itself listed for a region it
// does not host opens a follower replica of it, an empty region that
// the group fills, and a restarted server reopens a follower for every
// region its log holds state for.
//
// A follower applies the same records as the leader in the same order, so
// its region is byte for byte the leader's at the same applied index
// (TestFollowersByteIdentical). It serves nothing: clients reach a region
// only through its host, and one-sided reads are registered only for the
// host's region.
//
// A follower that wins an election serves nothing until it takes the
// region over (failover.go).

// keeper tends the groups of the server's replicas, its own and its
// followers, as the region table and the options say they should be: it
// opens a follower for every region that lists this server and drops the
// ones that no longer do; on the leader of a served region it adds,
// promotes, moves and removes replicas (repair.go) and hands leaderships
// over; it takes over a region whose group elected this server
// (failover.go); and it snapshots a log grown past its bound. It reaches
// replicas through the server's registry.
//
// It has about 30 methods, one per step of those duties; its only state
// is the channel of leader observations, the rest lives in the replicas.
type keeper struct {
	s *Server
	// leaderChanges receives the groups' raft leader observations
	// (dropped when full): the replica loop takes a region its group
	// elected this server for over at once, not at its next tick.
	leaderChanges chan raft.Observation
}

// openLoggedFollowers opens a follower replica for every region other
// than the server's own that the log holds raft state for: the replicas
// this server held before it stopped.
func (k *keeper) openLoggedFollowers() error {
	s := k.s
	ids, err := s.wal.Regions()
	if err != nil {
		return fmt.Errorf("server: list the log's regions: %w", err)
	}
	for _, id := range ids {
		if id == s.reps.own.regionID {
			continue
		}
		if err := k.openFollower(id); err != nil {
			return err
		}
	}
	return nil
}

// openFollower makes an empty region file for region id and starts a raft
// group for it that waits for the region's leader (or restores from the
// log what it had). It does nothing when the replica is open already or
// the server is stopping.
func (k *keeper) openFollower(id uint32) error {
	s := k.s
	f := &s.reps.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.m[id] != nil || id == s.reps.own.regionID {
		return nil
	}
	rep := newReplica(s)
	if err := rep.openMachine(id); err != nil {
		return fmt.Errorf("server: follower of region %d: %w", id, err)
	}
	had, err := rep.startRaft(false)
	if err != nil {
		return errors.Join(err, rep.sm.Close())
	}
	if f.m == nil {
		f.m = make(map[uint32]*replica)
	}
	f.m[id] = rep
	s.log.Info("server: follower replica opened", slog.Uint64("region", uint64(id)), slog.Bool("had_state", had))
	return nil
}

// noteRegion opens a follower replica when the region table lists this
// server among the replicas of a region it does not host.
func (k *keeper) noteRegion(r regiontable.Region) {
	s := k.s
	if r.ID == s.reps.own.regionID || r.Host == s.opts.ServerID || !holdsReplica(r, s.opts.ServerID) {
		return
	}
	if err := k.openFollower(r.ID); err != nil {
		s.log.Error("server: open a follower replica", slog.Uint64("region", uint64(r.ID)), slog.Any("err", err))
	}
}

// closeFollowers stops every follower replica and removes its region file
// (the log holds it).
func (k *keeper) closeFollowers() error {
	s := k.s
	f := &s.reps.follow
	f.mu.Lock()
	f.closed = true
	reps := f.m
	f.m = nil
	f.mu.Unlock()
	var errs []error
	for _, rep := range reps {
		errs = append(errs, rep.stopRaft(), rep.sm.Close())
	}
	return errors.Join(errs...)
}

// replicaLoop tends the server's replicas every replicaInterval
// (tendReplica).
func (k *keeper) replicaLoop() {
	s := k.s
	t := time.NewTicker(replicaInterval)
	defer t.Stop()
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case <-k.leaderChanges:
			// A group elected a leader (this server, maybe): take what
			// it leads over now; the rest waits for the tick.
			k.takeOverElected()
			continue
		case <-t.C:
		}
		k.tendReplica(s.reps.own)
		for _, rep := range s.reps.followerList() {
			k.tendReplica(rep)
		}
	}
}

// takeOverElected takes over the regions whose groups elected this server
// and that it does not serve yet (tendReplica's failover step alone).
func (k *keeper) takeOverElected() {
	s := k.s
	for _, rep := range append([]*replica{s.reps.own}, s.reps.followerList()...) {
		r := rep.raftGroup()
		if r == nil || s.bgCtx.Err() != nil {
			return
		}
		if r.State() == raft.Leader && s.reps.servedReplica(rep.regionID) != rep {
			k.leadUnserved(rep)
		}
	}
}

// replicaInterval is how often replicaLoop looks at the groups.
const replicaInterval = 250 * time.Millisecond

// tendReplica keeps one replica's group as it should be: its log no
// longer than Options.SnapshotLogBytes past its last snapshot (every
// replica, leader or follower: each truncates its own log); a served
// region this server leads gets Options.Replicas replicas (replicate) and
// loses its orphan split targets (sweepTargets); a region whose group
// elected this server is taken over (failover.go).
func (k *keeper) tendReplica(rep *replica) {
	s := k.s
	r := rep.raftGroup()
	if r == nil || s.bgCtx.Err() != nil {
		return
	}
	k.snapshotIfLogLarge(rep, r)
	leader := r.State() == raft.Leader
	served := s.reps.servedReplica(rep.regionID) == rep
	switch {
	case served && leader:
		if s.opts.Replicas > 1 {
			if err := k.replicate(rep); err != nil && s.bgCtx.Err() == nil {
				s.log.Warn("server: replicating a region", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
			}
		}
		s.splits.sweepTargets(rep)
		k.startVersions(rep)
	case !served && leader:
		k.leadUnserved(rep)
	}
}

// pickReplicaHost chooses the server for a new replica of the group
// with configuration cfg (placeReplica).
func (k *keeper) pickReplicaHost(cfg raft.Configuration) (regiontable.Member, bool) {
	s := k.s
	v := s.table.Load()
	var r regiontable.Region
	for _, srv := range cfg.Servers {
		r.Replicas = append(r.Replicas, string(srv.ID))
	}
	id, ok := s.coord.placeReplica(v, s.coord.gone.dead(time.Now(), s.opts.DeadAfter), r)
	return v.members[id], ok
}

// learnerState asks server id how far its replica of rep's region has
// applied: whether it caught up with this leader's commit index, and
// whether it holds the replica at all (it may not: it failed to open it).
func (k *keeper) learnerState(rep *replica, id string) (caughtUp, holds bool, err error) {
	s := k.s
	m, ok := s.table.Load().members[id]
	if !ok {
		return false, true, nil // down: ask again later
	}
	commit := rep.raft.CommitIndex()
	var md wire.MetadataReply
	ctx, cancel := context.WithTimeout(s.bgCtx, 2*time.Second)
	defer cancel()
	if err := s.call(ctx, m.RPCAddr, wire.OpMetadata, &wire.MetadataRequest{OneRegion: true, Region: rep.regionID}, &md); err != nil {
		return false, true, fmt.Errorf("ask %s how far it applied: %w", id, err)
	}
	if len(md.Regions) != 1 || md.Regions[0].ID != rep.regionID {
		return false, false, nil
	}
	return md.Regions[0].Raft.Applied >= commit, true, nil
}

// publishReplicas writes rep's table entry with the group's current
// servers.
func (k *keeper) publishReplicas(rep *replica) error {
	f := rep.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	voters, learners := replicaIDs(f.Configuration())
	return k.putReplicas(rep, voters, learners)
}

// putReplicas writes rep's table entry with its voters and learners and
// the group's current term.
func (k *keeper) putReplicas(rep *replica, voters, learners []string) error {
	s := k.s
	ctx, cancel := context.WithTimeout(s.bgCtx, 5*time.Second)
	defer cancel()
	e, err := s.opts.Store.Region(ctx, rep.regionID)
	if err != nil {
		return fmt.Errorf("look up region %d: %w", rep.regionID, err)
	}
	if e.Host != s.opts.ServerID || e.Epoch != rep.epoch {
		return fmt.Errorf("region %d is %s's at epoch %d now: %w", rep.regionID, e.Host, e.Epoch, ErrRegionOwned)
	}
	slices.Sort(voters)
	slices.Sort(learners)
	e.Replicas, e.Learners = voters, learners
	e.Term = rep.raft.CurrentTerm()
	return s.opts.Store.PutRegion(ctx, e)
}

// replicaIDs are the IDs of cfg's voters and of its nonvoters.
func replicaIDs(cfg raft.Configuration) (voters, learners []string) {
	for _, srv := range cfg.Servers {
		if srv.Suffrage == raft.Voter {
			voters = append(voters, string(srv.ID))
		} else {
			learners = append(learners, string(srv.ID))
		}
	}
	return voters, learners
}

// holdsReplica reports whether the table entry e lists id as a voter or a
// learner.
func holdsReplica(e regiontable.Region, id string) bool {
	return slices.Contains(e.Replicas, id) || slices.Contains(e.Learners, id)
}

// followerMetadata describes a follower replica, for OpMetadata asking
// for its region: its raft state only (it serves nothing).
func (s *Server) followerMetadata(rep *replica) *wire.MetadataReply {
	if rep.sm.Closed() {
		return &wire.MetadataReply{Server: s.opts.ServerID, Root: blink.Ptr(s.root.Load())}
	}
	lay := rep.sm.Region().Layout() // one region: a snapshot may be replacing it
	return &wire.MetadataReply{
		Server:       s.opts.ServerID,
		NodeSize:     uint32(lay.NodeSize),
		MeganodeSize: lay.MeganodeSize,
		Root:         blink.Ptr(s.root.Load()),
		Regions: []wire.RegionInfo{{
			ID: rep.regionID, Size: lay.Size, Host: s.opts.HostID,
			RPCAddr: s.rpcAddr, Raft: rep.raftInfo(),
		}},
	}
}

// snapshotIfLogLarge snapshots rep's region, in the background, once the
// records applied since its last snapshot add up to
// Options.SnapshotLogBytes (raft's own trigger counts entries only,
// Options.SnapshotThreshold): the log is then truncated behind it, to
// Options.TrailingLogs entries. One such snapshot at a time per replica;
// one that cannot be taken now (a split in progress) is tried again at
// the next tick.
func (k *keeper) snapshotIfLogLarge(rep *replica, r *raft.Raft) {
	s := k.s
	if rep.logBytes.Load() < s.opts.SnapshotLogBytes || !rep.snapping.CompareAndSwap(false, true) {
		return
	}
	s.goBackground(func() {
		defer rep.snapping.Store(false)
		err := r.Snapshot().Error()
		switch {
		case err == nil:
			s.log.Info("server: region snapshot taken for the log's size", slog.Uint64("region", uint64(rep.regionID)),
				slog.Uint64("snapshot_log_bytes", s.opts.SnapshotLogBytes))
		case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown):
		case snapshotNotNow(err):
			s.log.Debug("server: a snapshot for the log's size waits", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		default:
			s.log.Warn("server: a snapshot for the log's size failed", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		}
	})
}

// snapshotNotNow reports a snapshot refused for now: a split in progress
// (rsm.ErrSnapshotLater, which raft passes on as text) or a configuration
// change not applied yet.
func snapshotNotNow(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, rsm.ErrSnapshotLater.Error()) || strings.Contains(msg, "cannot take snapshot now")
}
