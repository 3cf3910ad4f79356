package server

import (
	"log/slog"
	"math"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/internal/monotime"
	"github.com/cellstore/cell/wire"
)

// Read leases (docs/design.md §9: "Only a region's leader serves it, RPC and
// one-sided, and only while it holds a read lease"). A served region's
// lease is renewed every leaseRenewal by raft's VerifyLeader, which
// succeeds once a majority of the group answered a heartbeat sent after
// it began: the lease then lasts leaseDuration from that beginning. A
// follower that answered does not vote for another candidate until it
// has heard nothing for a heartbeat timeout (raft's leader stickiness and
// pre-vote), so no other leader can be elected before the lease ends as
// long as the lease is shorter than that timeout; it is 3/4 of it, the
// rest being margin for clock rate differences. A restarted server has
// forgotten whom it heard from, so it waits one lease duration before its
// groups start (start.go's waitOutLeases).
//
// The lease gates everything a served region answers: RPC requests are
// refused Unavailable without it (startAt), and one-sided reads are
// fenced by the providers themselves (rdma SetLease: the tcp responder
// and shm readers judge the deadline after every copy), so a paused
// (SIGSTOP) or deposed leader's memory is not read after its lease, even
// if its process does nothing. A region whose group has this server as
// its only voter needs no lease: no one else can lead it.

// noLease marks a lease that never ends (a sole voter's); expiredLease is
// a deadline long past.
const (
	noLease      = math.MaxInt64
	expiredLease = 1
)

// leaseDuration is how long a renewal's lease lasts.
func (h *hosting) leaseDuration() time.Duration {
	s := h.s
	return s.opts.RaftHeartbeatTimeout * 3 / 4
}

// leaseRenewal is how often a lease is renewed.
func (h *hosting) leaseRenewal() time.Duration { return h.leaseDuration() / 4 }

// leased reports whether the replica holds its read lease now.
func (rep *replica) leased() bool {
	lu := rep.leaseUntil.Load()
	return lu == noLease || monotime.Now() <= lu || rep.srv.opts.TestingKnobs.IgnoreLease
}

// errNoLease is the refusal of a request for a served region whose lease
// lapsed: the client retries (the lease is renewed, or the region gets a
// new host).
func errNoLease(id uint32) error {
	return &wire.StatusError{Status: wire.StatusUnavailable, Region: id, Message: "the region's read lease lapsed: its leadership is being confirmed or moving"}
}

// renewLease renews rep's lease once and hands it to the one-sided
// providers. It reports whether the server leads rep's group.
func (h *hosting) renewLease(rep *replica) bool {
	s := h.s
	start := monotime.Now()
	until := int64(noLease)
	if !h.soleVoter(rep) {
		if err := rep.raft.VerifyLeader().Error(); err != nil {
			if rep.leaseUntil.Load() != 0 {
				s.metrics.leaseLapses.Inc()
				s.log.Warn("server: a region's read lease lapsed", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
			}
			rep.leaseUntil.Store(0)
			// Fence the providers too: they may hold "no lease" from
			// when this server was the group's only voter.
			h.applyLease(rep, expiredLease)
			return false
		}
		until = start + int64(h.leaseDuration())
	}
	rep.leaseUntil.Store(until)
	h.applyLease(rep, until)
	s.metrics.leaseRenewals.Inc()
	return true
}

// applyLease gives rep's one-sided registrations the lease until.
func (h *hosting) applyLease(rep *replica, until int64) {
	s := h.s
	if until == noLease || s.opts.TestingKnobs.IgnoreLease {
		until = 0 // the providers' "no lease"
	}
	rep.readMu.Lock()
	defer rep.readMu.Unlock()
	for _, rk := range rep.readKeys {
		if err := h.provider(rk).SetLease(rk.Key, until); err != nil {
			s.log.Warn("server: lease of a one-sided registration", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		}
	}
}

// soleVoter reports whether this server is the only voter of rep's group.
func (h *hosting) soleVoter(rep *replica) bool {
	s := h.s
	f := rep.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters := 0
	me := false
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			voters++
			me = me || string(srv.ID) == s.opts.ServerID
		}
	}
	return voters == 1 && me
}

// keepLease renews rep's lease until stop closes or the server stops.
func (h *hosting) keepLease(rep *replica, stop <-chan struct{}) {
	s := h.s
	t := time.NewTicker(h.leaseRenewal())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.bgCtx.Done():
			return
		case <-t.C:
		}
		h.renewLease(rep)
	}
}

// waitOutLeases waits, when this server may share groups with others, for
// one lease duration since it was made: it may have acknowledged a
// leader's heartbeat just before it stopped, and it forgot it; voting
// sooner could elect another leader while that lease holds.
func (h *hosting) waitOutLeases(logged int) {
	s := h.s
	if s.opts.Replicas <= 1 && logged <= 1 {
		return
	}
	if d := h.leaseDuration() - time.Since(s.created); d > 0 {
		time.Sleep(d)
	}
}
