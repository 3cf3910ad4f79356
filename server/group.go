package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/internal/raftmux"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wal"
	"github.com/cellstore/cell/wire"
)

// The region is a raft group (docs/design.md §9). This step of the replication
// work runs every group with one voter, this server (the single-node
// store's replication factor 1): a write is acknowledged once its record
// is synced to the server's log (package wal) and applied, and a restart
// rebuilds the region from its last snapshot and the log. The group's
// transport is raft's network transport over the server's one raft
// listener (internal/raftmux, Options.RaftListen), which multiplexes the
// groups of all the server's regions by region ID; the server's raft
// address is the listener's, published with its member entry.
//
// Startup (startGroup): an empty region file is made (region.go); raft
// restores the newest snapshot into it (fsm.Restore) when there is one; a
// directory without raft state bootstraps a one-voter configuration; the
// server waits until it leads and a barrier committed, so every record
// committed before the restart is applied before anything is served
// (docs/design.md §9: "a restarted replica serves only once it has applied
// everything committed").

// openLog opens the server's log and snapshot stores in the data
// directory.
func (s *Server) openLog() error {
	db, err := wal.Open(wal.Options{FS: s.opts.TestingKnobs.WALFS, Dir: s.dir.path(walDir), Logger: s.log, OnFail: s.logFailed})
	if err != nil {
		return fmt.Errorf("server: open the log: %w", err)
	}
	snaps, err := wal.OpenSnapshots(wal.SnapshotOptions{Dir: s.dir.path(snapshotsDir), Retain: 2, Logger: s.log})
	if err != nil {
		_ = db.Close()
		return fmt.Errorf("server: open the snapshot store: %w", err)
	}
	s.wal, s.snaps = db, snaps
	return nil
}

// raftConfig is the group's raft configuration from Options.
func (s *Server) raftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(s.opts.ServerID)
	c.HeartbeatTimeout = s.opts.RaftHeartbeatTimeout
	c.ElectionTimeout = s.opts.RaftHeartbeatTimeout
	c.LeaderLeaseTimeout = s.leaderLeaseTimeout()
	c.CommitTimeout = 5 * time.Millisecond
	c.BatchApplyCh = true
	c.MaxAppendEntries = 256
	c.SnapshotThreshold = s.opts.SnapshotThreshold
	c.SnapshotInterval = s.opts.SnapshotInterval
	c.TrailingLogs = s.opts.TrailingLogs
	c.NoLegacyTelemetry = true
	c.Logger = newRaftLogger(s.log)
	return c
}

// startGroup starts the region's raft group and returns once this server
// leads it and has applied everything committed (a barrier), or, with
// lead false, once the region table names another server as the region's
// host (it took the region over while this one was down: this server
// holds a replica, failover.go).
func (s *Server) startGroup(ctx context.Context) (lead bool, err error) {
	own := s.reps.own
	start := time.Now()
	had, err := own.startRaft(true)
	if err != nil {
		return false, err
	}
	s.electSoleVoterSoon()
	lead, err = s.awaitLeadership(ctx)
	s.restoreTimeouts()
	if err != nil || !lead {
		return false, err
	}
	s.log.Info("server: region's raft group leads and has applied everything committed", slog.Uint64("region", uint64(own.regionID)),
		slog.Bool("restart", had), slog.Uint64("applied", own.sm.Applied()), slog.Duration("took", time.Since(start)))
	if !s.regionFormatted() {
		rec := rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindRegion, Value: rsm.AppendRegionBody(nil, rsm.LayoutOf(own.sm.Region()))})
		if _, err := own.propose(rec); err != nil {
			return false, fmt.Errorf("server: the region record: %w", err)
		}
	}
	return true, nil
}

// startRaft starts the replica's raft group over the server's log,
// snapshot store and raft listener, and reports whether the log held
// state for it. bootstrap: a group without state is bootstrapped with
// this server as its only voter (the region's first start); without it
// the replica waits, with no configuration, for a leader to replicate to
// it (a follower added by the region's leader, follower.go).
func (rep *replica) startRaft(bootstrap bool) (bool, error) {
	s, id := rep.srv, rep.regionID
	conf := s.raftConfig()
	logs, stable, snaps := s.wal.Log(id), s.wal.Stable(id), s.snaps.Region(id)
	layer, err := s.mux.Group(id)
	if err != nil {
		return false, fmt.Errorf("server: region %d's raft traffic: %w", id, err)
	}
	trans := newRaftTransport(layer, conf.Logger, memberRaftAddrs{s})
	had, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		_ = trans.Close()
		return false, fmt.Errorf("server: read region %d's raft state: %w", id, err)
	}
	if !had && bootstrap {
		cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: conf.LocalID, Address: trans.LocalAddr()}}}
		if err := raft.BootstrapCluster(conf, logs, stable, snaps, trans, cfg); err != nil {
			_ = trans.Close()
			return false, fmt.Errorf("server: bootstrap region %d's raft group: %w", id, err)
		}
	}
	r, err := raft.NewRaft(conf, (*fsm)(rep), logs, stable, snaps, trans)
	if err != nil {
		_ = trans.Close()
		return false, fmt.Errorf("server: start region %d's raft group: %w", id, err)
	}
	r.RegisterObserver(raft.NewObserver(s.keep.leaderChanges, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	rep.trans = trans
	rep.raft = r
	rep.group.Store(r)
	return had, nil
}

// newRaftTransport is a region group's raft transport over its stream of
// the server's raft listener.
//
// Replication is never pipelined (MaxRPCsInFlight 1: every AppendEntries
// waits for its answer before the next is sent). hashicorp/raft v1.8.0's
// pipeline can deadlock: when its decoder stops on a follower's refusal
// or a newer term, the sender may still pick a trigger and park for good
// handing one more request to the decoder, which parks handing back its
// previous answer; the pipeline is closed only once the sender returns.
// The follower then gets heartbeats and no entries (it never calls an
// election), and the group's Shutdown waits forever: a drill's SIGTERM
// ended in SIGQUIT with exactly that in the goroutine dump. The library
// documents pipelining as of little benefit with batching, which raft
// does (MaxAppendEntries per request).
func newRaftTransport(layer raft.StreamLayer, logger hclog.Logger, addrs raft.ServerAddressProvider) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 3, Timeout: 10 * time.Second, Logger: logger,
		ServerAddressProvider: addrs, MaxRPCsInFlight: 1,
	})
}

// memberRaftAddrs finds a group member's raft address by its server ID in
// the region table's members, so that a server that restarted on another
// address is still reached; raft falls back to the address in the group's
// configuration when the member is not in the table (yet).
type memberRaftAddrs struct{ s *Server }

func (a memberRaftAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if m, ok := a.s.table.Load().members[string(id)]; ok && m.RaftAddr != "" {
		return raft.ServerAddress(m.RaftAddr), nil
	}
	return "", fmt.Errorf("server: no member %s in the region table", id)
}

// leaderLeaseTimeout is how long a leader goes on leading without hearing
// from a quorum before it steps down (raft's LeaderLeaseTimeout): half the
// heartbeat timeout, as raft's defaults have it. Reads do not depend on it
// (they are fenced by the read lease, lease.go); it only ends a cut-off
// leader's writes sooner. It was 100 ms, and on a loaded host (three
// servers and etcd on one core in docs/bench-history.md §11) followers' answers
// came later than that now and then: leaders stepped down under load, and
// the writes they were committing failed with an unknown outcome.
func (s *Server) leaderLeaseTimeout() time.Duration { return s.opts.RaftHeartbeatTimeout / 2 }

// minSoleVoterTimeout bounds from below the heartbeat and election timeout
// of a group whose only voter is this server, until it leads.
const minSoleVoterTimeout = 100 * time.Millisecond

// soleVoterTimeout is the heartbeat and election timeout of a group whose
// only voter is this server, until it leads: nobody else can lead it, so
// waiting a full timeout after a restart would only delay serving. raft
// requires it to be at least the leader lease timeout.
func (s *Server) soleVoterTimeout() time.Duration {
	return max(minSoleVoterTimeout, s.leaderLeaseTimeout())
}

// electSoleVoterSoon shortens the group's timeouts when this server is its
// only voter, so that it elects itself within soleVoterTimeout instead of
// Options.RaftHeartbeatTimeout (restoreTimeouts puts them back).
func (s *Server) electSoleVoterSoon() {
	own := s.reps.own
	if v := s.voters(); len(v) != 1 || v[0] != s.opts.ServerID {
		return
	}
	rc := own.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = s.soleVoterTimeout(), s.soleVoterTimeout()
	if err := own.raft.ReloadConfig(rc); err != nil {
		s.log.Warn("server: keeping the raft timeouts", slog.Any("err", err))
	}
}

// restoreTimeouts sets the group's timeouts to Options.RaftHeartbeatTimeout.
func (s *Server) restoreTimeouts() {
	own := s.reps.own
	rc := own.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = s.opts.RaftHeartbeatTimeout, s.opts.RaftHeartbeatTimeout
	if err := own.raft.ReloadConfig(rc); err != nil {
		s.log.Warn("server: raft timeouts not restored", slog.Any("err", err))
	}
}

// voters returns the IDs of the group's voters, sorted.
func (s *Server) voters() []string {
	f := s.reps.own.raft.GetConfiguration()
	if f.Error() != nil {
		return []string{s.opts.ServerID}
	}
	var ids []string
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			ids = append(ids, string(srv.ID))
		}
	}
	slices.Sort(ids)
	return ids
}

// raftInfo is the group's state as Metadata reports it.
func (rep *replica) raftInfo() wire.RaftInfo {
	r := rep.raft
	if r == nil {
		return wire.RaftInfo{}
	}
	role := wire.RoleNone
	switch r.State() {
	case raft.Follower:
		role = wire.RoleFollower
	case raft.Candidate:
		role = wire.RoleCandidate
	case raft.Leader:
		role = wire.RoleLeader
	case raft.Shutdown:
		role = wire.RoleShutdown
	}
	return wire.RaftInfo{Role: role, Term: r.CurrentTerm(), LastIndex: r.LastIndex(), Commit: r.CommitIndex(), Applied: r.AppliedIndex()}
}

// regionFormatted reports whether the region record was applied.
func (s *Server) regionFormatted() bool { return s.reps.own.sm.Formatted() }

// awaitLeadership waits until this server leads the group, then commits a
// barrier: everything committed is applied when it returns true. It
// returns false when the region table names another host for the region
// (looked up every 250 ms while waiting): the region was taken over; and,
// for a group with followers, after startLeaderWait without leading it:
// its leader, maybe a server still starting, takes it over.
func (s *Server) awaitLeadership(ctx context.Context) (bool, error) {
	own := s.reps.own
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var looked time.Time
	start := time.Now()
	for own.raft.State() != raft.Leader {
		if time.Since(looked) >= 250*time.Millisecond {
			looked = time.Now()
			if e, err := s.opts.Store.Region(ctx, own.regionID); err == nil && e.Host != s.opts.ServerID {
				s.log.Info("server: the region is hosted by another server now; this server holds a replica of it",
					slog.Uint64("region", uint64(own.regionID)), slog.String("host", e.Host), slog.Uint64("epoch", e.Epoch))
				return false, nil
			}
		}
		if s.opts.Replicas > 1 && time.Since(start) >= s.startLeaderWait() {
			// Another replica was elected (or none yet) and has not taken
			// the region over: it may be a server still starting, itself
			// waiting for a region this server was elected for, which
			// this server takes over only once it runs (replicaLoop).
			// Start without serving the region; whoever leads its group
			// takes it over.
			s.log.Warn("server: its region's group elected no leader here; starting without serving it (its leader takes it over)",
				slog.Uint64("region", uint64(own.regionID)), slog.String("leader", string(own.raft.Leader())), slog.Duration("waited", time.Since(start)))
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("server: region %d's raft group elected no leader: %w", own.regionID, ctx.Err())
		case <-t.C:
		}
	}
	if err := own.raft.Barrier(s.opts.ProposalTimeout).Error(); err != nil {
		return false, fmt.Errorf("server: region %d's barrier: %w", own.regionID, err)
	}
	return true, nil
}

// startLeaderWait is how long Start waits to lead its own region's group
// (with followers) before it starts without serving it: ten heartbeat
// timeouts, time for elections, and for a running leader to take the
// region over.
func (s *Server) startLeaderWait() time.Duration {
	return 10 * s.opts.RaftHeartbeatTimeout
}

// logFailed stops the server when the log latched a failed write or sync
// (docs/design.md §9: "after the first failed fsync, fail every later write until
// restart"): the raft group is shut down at once (from then on no write is
// acknowledged, and raft would panic when it next fails to persist a term
// or vote), and Serve returns the error (cellserver exits with it). A
// restart reopens the log and finds exactly what was acknowledged. The
// log calls it once, on a goroutine of its own.
func (s *Server) logFailed(err error) {
	own := s.reps.own
	s.log.Error("server: the log failed a write or sync; stopping (restart the server: it recovers everything acknowledged)", slog.Any("err", err))
	if r := own.raftGroup(); r != nil {
		own.props.stop(s.opts.ProposalTimeout)
		_ = r.Shutdown().Error()
	}
	s.failed(fmt.Errorf("server: %w", err))
}

// stopGroup stops the region's group (stopRaft) once no proposal is in
// flight.
func (s *Server) stopGroup() error {
	own := s.reps.own
	if own.raft == nil {
		return nil
	}
	own.props.stop(s.opts.ProposalTimeout)
	return own.stopRaft()
}

// stopRaft snapshots the region when the log grew since the last snapshot
// (the next start replays less) and shuts the group down.
func (rep *replica) stopRaft() error {
	if rep.raft == nil {
		return nil
	}
	if !rep.srv.opts.TestingKnobs.NoSnapshotOnClose {
		if err := rep.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			// raft refuses while only configuration entries follow the
			// last command (replicas added, nothing written since):
			// expected, and the log it leaves is short.
			level := slog.LevelWarn
			if strings.Contains(err.Error(), "cannot take snapshot now") {
				level = slog.LevelInfo
			}
			rep.srv.log.Log(context.Background(), level, "server: no snapshot at shutdown; the next start replays the log", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		}
	}
	err := rep.raft.Shutdown().Error()
	return errors.Join(err, rep.trans.Close())
}

// openRaftListener binds the server's raft listener (Options.RaftListen).
func (s *Server) openRaftListener() error {
	adv := ""
	if host, port, err := net.SplitHostPort(s.opts.RaftListen); err == nil && port != "0" {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			adv = advertise(s.opts.RaftListen)
		}
	}
	mo := raftmux.Options{Logger: s.log, AdvertiseAddr: adv, Faults: s.opts.TestingKnobs.RaftFaults, Network: s.opts.TestingKnobs.RaftNetwork}
	if s.opts.RaftTLS != nil {
		mo.ServerTLS, mo.ClientTLS = s.opts.RaftTLS, s.opts.PeerTLS
	}
	m, err := raftmux.Listen(s.opts.RaftListen, mo)
	if err != nil {
		return fmt.Errorf("server: listen for raft on %s: %w", s.opts.RaftListen, err)
	}
	s.mux = m
	return nil
}

// closeLog closes the log and snapshot stores.
func (s *Server) closeLog() error {
	if s.wal == nil {
		return nil
	}
	return s.wal.Close()
}

// proposalError says what a raft error means to the writer of a record:
// an outcome the server knows (the record was not appended: the caller may
// try again), or an unknown one (the record may commit yet).
func proposalError(err error) error {
	switch {
	case errors.Is(err, wal.ErrSyncFailed):
		// The record may be in the log's page cache, unsynced: it may
		// or may not be there after a restart.
		return wireErrorf(wire.StatusOutcomeUnknown, "the log failed to sync; the write may or may not survive: %v", err)
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Never entered the log: a definite failure the client retries.
		// A leader handing its group to another replica (cellctl
		// transfer-leader, balancing, draining) refuses new entries
		// before appending them.
		return wireErrorf(wire.StatusUnavailable, "region not writable here now: %v", err)
	}
	// raft.ErrLeadershipLost, ErrRaftShutdown, ErrAbortedByRestore and
	// anything else after the record entered the log: it may commit yet.
	return wireErrorf(wire.StatusOutcomeUnknown, "the write may or may not be applied: %v", err)
}

// raftLogger forwards hashicorp/raft's logs to the server's slog logger.
type raftLogWriter struct{ log *slog.Logger }

func newRaftLogger(log *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            "raft",
		Level:           hclog.Info,
		Output:          &raftLogWriter{log: log},
		DisableTime:     true,
		IncludeLocation: false,
	})
}

// Write takes one hclog line ("[WARN]  raft: message: k=v") and logs it
// at its level.
func (w *raftLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(bytes.TrimRight(p, "\n")))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[ERROR]": slog.LevelError, "[WARN]": slog.LevelWarn, "[DEBUG]": slog.LevelDebug, "[TRACE]": slog.LevelDebug} {
		if strings.HasPrefix(line, prefix) {
			level = l
			break
		}
	}
	if i := strings.Index(line, "]"); i >= 0 && strings.HasPrefix(line, "[") {
		line = strings.TrimSpace(line[i+1:])
	}
	w.log.Log(context.Background(), raftLogLevel(level, line), line)
	return len(p), nil
}

var _ io.Writer = (*raftLogWriter)(nil)
