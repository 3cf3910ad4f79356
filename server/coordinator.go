package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// The coordinator (docs/design.md §8): every server campaigns in the region
// table's election (regiontable.Store.Campaign) for as long as it runs;
// the elected one does the cluster-wide duties, and when it loses the
// election (its session lease expired, or it closed and resigned) the next
// campaigner takes over and the loser campaigns again.
//
// Its duties: it follows the table and reports each region whose host is
// not a live member (logged once when it goes, once when it comes back;
// the count in cell_regions_unavailable), and it repairs (repair.go):
// replicas of dead or draining servers moved, leaderships spread.

// regionDownGrace is how long a region's host must be missing from the
// members before the coordinator reports the region unavailable: a
// starting server publishes its region a moment before it registers.
const regionDownGrace = time.Second

// coordinator is the server's part in the coordinator election and, while
// it is elected, the coordinator's duties: it reports unavailable regions,
// replaces the replicas of dead and draining servers (repair.go), places
// new replicas (placement.go) and spreads leaderships. Every server keeps
// the count of missing servers (gone), elected or not, so that a newly
// elected coordinator goes on from it. It reaches replicas through the
// server's registry and the region table.
type coordinator struct {
	s       *Server
	leading atomic.Bool // elected and not yet lost or resigned
	gone    goneServers // since when servers are missing (repair.go)
	use     regionUse   // the regions' bytes in use, for placement (placement.go)
	// failedPlace is when servers last failed to open a replica placed
	// on them (repair.go).
	failedPlace struct {
		sync.Mutex
		at map[string]time.Time
	}
}

// IsCoordinator reports whether this server is the cluster's coordinator
// now. A server that lost etcd learns it lost the role when its session's
// lease runs out (regiontable's doc, "Coordinator election").
func (s *Server) IsCoordinator() bool { return s.coord.leading.Load() }

// coordinate campaigns until the server stops, and coordinates whenever it
// is elected.
func (co *coordinator) coordinate() {
	s := co.s
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for s.bgCtx.Err() == nil {
		l, err := s.opts.Store.Campaign(s.bgCtx, s.opts.ServerID)
		if err != nil {
			if s.bgCtx.Err() != nil {
				return
			}
			s.log.Warn("server: campaign for coordinator; retrying", slog.Any("err", err), slog.Duration("backoff", backoff))
			select {
			case <-time.After(backoff):
			case <-s.bgCtx.Done():
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		co.lead(l)
		if s.bgCtx.Err() != nil {
			// Closing: hand the role over at once rather than after the
			// lease's TTL.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := l.Resign(ctx); err != nil {
				s.log.Warn("server: resign as coordinator", slog.Any("err", err))
			}
			cancel()
			s.log.Info("server: resigned as coordinator", slog.String("server", s.opts.ServerID))
			return
		}
		s.log.Warn("server: no longer coordinator; campaigning again", slog.String("server", s.opts.ServerID), slog.Any("err", l.Err()))
		co.withdraw(l)
	}
}

// withdraw resigns a lost leadership, retrying until it worked or the
// server stops: an etcd that restarted restores the lost campaign's key,
// which would keep every campaign (ours too) waiting for another TTL.
func (co *coordinator) withdraw(l regiontable.Leadership) {
	s := co.s
	for s.bgCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(s.bgCtx, 5*time.Second)
		err := l.Resign(ctx)
		cancel()
		if err == nil {
			return
		}
		s.log.Warn("server: withdraw the lost coordinator campaign; retrying", slog.Any("err", err))
		select {
		case <-time.After(time.Second):
		case <-s.bgCtx.Done():
		}
	}
}

// lead does the coordinator's duties until the leadership ends or the
// server stops.
func (co *coordinator) lead(l regiontable.Leadership) {
	s := co.s
	s.coord.leading.Store(true)
	s.metrics.coordinator.Set(1)
	s.log.Info("server: elected coordinator", slog.String("server", s.opts.ServerID))
	defer func() {
		s.coord.leading.Store(false)
		s.metrics.coordinator.Set(0)
		s.metrics.regionsUnavailable.Set(0)
	}()
	ctx, cancel := context.WithCancel(s.bgCtx)
	defer cancel()
	go func() {
		select {
		case <-l.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	var repair sync.WaitGroup
	repair.Go(func() { co.repairLoop(ctx) })
	co.watchAvailability(ctx)
	cancel()
	repair.Wait()
}

// watchAvailability follows the region table until ctx ends, reporting
// regions without a live host; it reloads after a failed watch.
func (co *coordinator) watchAvailability(ctx context.Context) {
	s := co.s
	av := availability{s: s, missing: make(map[uint32]time.Time), reported: make(map[uint32]bool)}
	backoff := 100 * time.Millisecond
	check := time.NewTimer(time.Hour)
	defer check.Stop()
	for ctx.Err() == nil {
		st, err := s.opts.Store.Load(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("server: coordinator: load the region table", slog.Any("err", err))
			}
		} else {
			backoff = 100 * time.Millisecond
			v := newTableView(st)
			check.Reset(av.update(v, time.Now()))
			ch := s.opts.Store.Watch(ctx, st.Revision)
		watch:
			for {
				select {
				case ev, ok := <-ch:
					if !ok {
						break watch
					}
					if ev.Err != nil {
						s.log.Warn("server: coordinator: region table watch ended; reloading", slog.Any("err", ev.Err))
						break watch
					}
					v = v.with(ev)
				case <-check.C:
				}
				check.Reset(av.update(v, time.Now()))
			}
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// availability tracks the regions whose host is not a live member.
type availability struct {
	s        *Server
	missing  map[uint32]time.Time // region → when its host was first seen missing
	reported map[uint32]bool      // regions logged as unavailable
}

// update compares the table view v with what was reported, logs the
// regions that went (missing for regionDownGrace) or came back, exports
// their count, and returns when to look again for regions still within
// their grace (an hour when none is).
func (a *availability) update(v *tableView, now time.Time) time.Duration {
	next := time.Hour
	down := 0
	ids := make([]uint32, 0, len(v.regions))
	for id := range v.regions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := v.regions[id]
		if _, live := v.members[r.Host]; live {
			delete(a.missing, id)
			if a.reported[id] {
				delete(a.reported, id)
				a.s.log.Info("server: coordinator: region available again", slog.Uint64("region", uint64(id)), slog.String("host", r.Host), slog.Uint64("epoch", r.Epoch))
			}
			continue
		}
		since, ok := a.missing[id]
		if !ok {
			since = now
			a.missing[id] = now
		}
		if wait := since.Add(regionDownGrace).Sub(now); wait > 0 {
			next = min(next, wait)
			continue
		}
		down++
		if !a.reported[id] {
			a.reported[id] = true
			a.s.log.Warn("server: coordinator: region unavailable: its host is not a live member", slog.Uint64("region", uint64(id)),
				slog.String("host", r.Host), slog.Uint64("epoch", r.Epoch), slog.Duration("missing_for", now.Sub(since).Round(time.Millisecond)))
		}
	}
	for id := range a.missing {
		if _, ok := v.regions[id]; !ok {
			delete(a.missing, id)
			delete(a.reported, id)
		}
	}
	a.s.metrics.regionsUnavailable.Set(float64(down))
	return next
}
