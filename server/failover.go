package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/regiontable"
)

// Failover (DESIGN §9). A region is served by its host, the server its
// region table entry names; the host leads the region's raft group. When
// the group elects another leader, that server either hands leadership
// back (the host is live: it was only slow, or it is restarting) or, when
// the host's member entry is gone from the table (its lease expired: the
// host is down), takes the region over:
//
//  1. a barrier commits, so everything committed is applied here;
//  2. the region is registered for one-sided reads;
//  3. its entry is published naming this server as host, with the next
//     epoch and the group's new term: the table refuses an entry with an
//     older term (regiontable.Region.Supersedes), so of two servers that
//     both believe they lead, the one elected later wins;
//  4. requests for the region are served, and the splits it had in
//     progress are resumed.
//
// Clients find the new host when their requests to the old one fail
// (lost connections, WrongServer, StaleEpoch) and they reload the table.
// A host that sees its region published by another server stops serving
// it (stopServing); one that restarts after its region was taken over
// holds a replica of it and serves it again only if it is elected and the
// new host is down in turn.
//
// Not yet: read leases. Until a host stops serving, it answers reads from
// its own copy; after it lost leadership (a partition), a read can be
// stale for as long as it takes to learn of the new host from the table.

// leadUnserved acts on a group this server leads without serving its
// region: hand leadership back to a live host, or take the region over.
func (s *Server) leadUnserved(rep *replica) {
	v := s.table.Load()
	e, known := v.regions[rep.regionID]
	if known && e.Host != s.opts.ServerID {
		if _, live := v.members[e.Host]; live {
			s.returnLeadership(rep, e.Host)
			return
		}
	}
	s.takeOver(rep, e)
}

// returnLeadership hands the leadership of rep's group to host, when
// host's replica is a voter.
func (s *Server) returnLeadership(rep *replica, host string) {
	r := rep.raft
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) != host || srv.Suffrage != raft.Voter {
			continue
		}
		if err := r.LeadershipTransferToServer(srv.ID, srv.Address).Error(); err != nil {
			s.log.Debug("server: leadership not handed back to the region's host yet", slog.Uint64("region", uint64(rep.regionID)), slog.String("host", host), slog.Any("err", err))
			return
		}
		s.log.Info("server: leadership handed back to the region's host", slog.Uint64("region", uint64(rep.regionID)), slog.String("host", host))
		return
	}
}

// takeOver makes this server the host of rep's region, whose group it
// leads (the steps above). old is the entry it replaces.
func (s *Server) takeOver(rep *replica, old regiontable.Region) {
	start := time.Now()
	if err := rep.raft.Barrier(s.opts.ProposalTimeout).Error(); err != nil {
		s.log.Warn("server: cannot take the region over yet: barrier", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		return
	}
	ctx, cancel := context.WithTimeout(s.bgCtx, 10*time.Second)
	defer cancel()
	if err := s.serve(ctx, rep); err != nil {
		s.log.Warn("server: cannot take the region over", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		return
	}
	s.metrics.takeovers.Inc()
	s.log.Warn("server: took the region over (its host is down)", slog.Uint64("region", uint64(rep.regionID)),
		slog.String("old_host", old.Host), slog.Uint64("epoch", rep.epoch), slog.Uint64("term", rep.raft.CurrentTerm()),
		slog.Duration("took", time.Since(start)))
	s.resumeSplits(rep)
	s.splitEvent()
}

// stopServing stops serving rep's region, which the table now gives to
// another host (entry e): requests for it are redirected from now on and
// one-sided reads of it refused.
func (s *Server) stopServing(rep *replica, e regiontable.Region) {
	if s.servedReplica(rep.regionID) != rep {
		return
	}
	s.setServed(rep, false)
	s.deregisterReads(rep)
	s.log.Warn("server: the region table gives a region we served to another host; stopped serving it", slog.Uint64("region", uint64(rep.regionID)),
		slog.String("host", e.Host), slog.Uint64("epoch", e.Epoch), slog.Uint64("our_epoch", rep.epoch))
}

// noteRegionEntry reacts to a region entry from the table: a region this
// server serves that another host took stops being served; a region that
// lists this server as a replica gets a follower replica here.
func (s *Server) noteRegionEntry(e regiontable.Region) {
	if rep := s.servedReplica(e.ID); rep != nil {
		if e.Host != s.opts.ServerID {
			s.stopServing(rep, e)
		}
		return
	}
	s.noteRegion(e)
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
