package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// Failover (docs/design.md §9). A region is served by its host, the server its
// region table entry names; the host leads the region's raft group and
// holds its read lease (lease.go). When the group elects another leader
// (the host died, stalled or was cut off), that server takes the region
// over:
//
//  1. a barrier commits, so everything committed is applied here;
//  2. its read lease is established (serve), which no other server can
//     hold at the same time: the old host's lease ended before any
//     follower could vote for a new leader;
//  3. the region is registered for one-sided reads, leased;
//  4. its entry is published naming this server as host, with the next
//     epoch and the group's new term: the table refuses an entry with an
//     older term (regiontable.Region.Supersedes), so of two servers that
//     both believe they lead, the one elected later wins;
//  5. requests for the region are served, and the splits it had in
//     progress are resumed.
//
// Clients find the new host when their requests to the old one fail
// (lost connections, an Unavailable for a lapsed lease, WrongServer,
// StaleEpoch) and they reload the table. An old host that sees its region
// published by another server stops serving it (stopServing); one that
// restarts after its region was taken over holds a replica of it and
// serves it again only if it is elected again.

// leadUnserved acts on a group this server leads without serving its
// region: it takes the region over.
func (k *keeper) leadUnserved(rep *replica) {
	s := k.s
	if rep.transferring.Load() {
		return
	}
	if refuse := s.opts.TestingKnobs.RefuseTakeover; refuse != nil && refuse(rep.regionID) {
		return
	}
	k.takeOver(rep, s.table.Load().regions[rep.regionID])
}

// takeOver makes this server the host of rep's region, whose group it
// leads (the steps above). old is the entry it replaces.
func (k *keeper) takeOver(rep *replica, old regiontable.Region) {
	s := k.s
	start := time.Now()
	if err := rep.raft.Barrier(s.opts.ProposalTimeout).Error(); err != nil {
		s.log.Warn("server: cannot take the region over yet: barrier", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		return
	}
	ctx, cancel := context.WithTimeout(s.bgCtx, 10*time.Second)
	defer cancel()
	if err := s.hosting.serve(ctx, rep); err != nil {
		s.log.Warn("server: cannot take the region over", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		return
	}
	s.metrics.takeovers.Inc()
	s.log.Warn("server: took the region over (its group elected this server)", slog.Uint64("region", uint64(rep.regionID)),
		slog.String("old_host", old.Host), slog.Uint64("epoch", rep.epoch), slog.Uint64("term", rep.raft.CurrentTerm()),
		slog.Duration("took", time.Since(start)))
	s.splits.resumeSplits(rep)
	s.splitEvent()
}

// stopServing stops serving rep's region, which the table now gives to
// another host (entry e): requests for it are redirected from now on and
// one-sided reads of it refused.
func (k *keeper) stopServing(rep *replica, e regiontable.Region) {
	s := k.s
	if !s.hosting.unserve(rep) {
		return
	}
	s.log.Warn("server: the region table gives a region we served to another host; stopped serving it", slog.Uint64("region", uint64(rep.regionID)),
		slog.String("host", e.Host), slog.Uint64("epoch", e.Epoch), slog.Uint64("our_epoch", rep.epoch))
}

// noteRegionEntry reacts to a region entry from the table: a region this
// server serves that another host took stops being served; a region that
// lists this server as a replica gets a follower replica here.
func (k *keeper) noteRegionEntry(e regiontable.Region) {
	s := k.s
	if rep := s.reps.servedReplica(e.ID); rep != nil {
		if e.Host != s.opts.ServerID {
			k.stopServing(rep, e)
		}
		return
	}
	k.dropStaleFollower(e)
	k.noteRegion(e)
}

// loadRoot learns the root pointer from the table, for a server that does
// not serve its own region at start (ensureRoot's job otherwise).
func (s *Server) loadRoot(ctx context.Context) error {
	root, err := s.opts.Store.Root(ctx)
	if err != nil {
		return fmt.Errorf("server: read the root pointer: %w", err)
	}
	s.root.Store(uint64(root))
	return nil
}
