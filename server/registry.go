package server

import (
	"slices"
	"sync"
	"sync/atomic"
)

// registry is every replica the server holds, by role: its own region's
// (made at Start, region.go), the followers of other servers' regions
// (follower.go), and, among them, the replicas whose regions it serves
// (serve.go: those whose groups it leads and whose table entries name it).
// A path that acts on a replica names it through the registry; nothing
// reaches a replica through the Server itself.
type registry struct {
	// own is the replica of the region this server made (its data
	// directory's region). Set by New, its region by Start; then
	// read-only.
	own *replica

	// served is the served replicas, sorted by region ID. It is
	// immutable once published: the read path loads it without a lock.
	served   atomic.Pointer[servedSet]
	servedMu sync.Mutex // serialises changes to served

	// follow is the follower replicas, by region ID.
	follow followerSet
}

// servedSet is the served replicas, sorted by region ID.
type servedSet struct {
	reps []*replica
}

// followerSet is the follower replicas, by region ID.
type followerSet struct {
	mu     sync.Mutex
	m      map[uint32]*replica
	closed bool
}

// servedReplica returns the served replica of region id, nil when this
// server does not serve it.
func (g *registry) servedReplica(id uint32) *replica {
	if set := g.served.Load(); set != nil {
		for _, rep := range set.reps {
			if rep.regionID == id {
				return rep
			}
		}
	}
	return nil
}

// servedList returns the served replicas, by region ID.
func (g *registry) servedList() []*replica {
	if set := g.served.Load(); set != nil {
		return set.reps
	}
	return nil
}

// setServed adds rep to the served replicas or removes it.
func (g *registry) setServed(rep *replica, add bool) {
	g.servedMu.Lock()
	defer g.servedMu.Unlock()
	var reps []*replica
	if set := g.served.Load(); set != nil {
		reps = slices.Clone(set.reps)
	}
	reps = slices.DeleteFunc(reps, func(r *replica) bool { return r == rep })
	if add {
		reps = append(reps, rep)
		slices.SortFunc(reps, func(a, b *replica) int { return int(a.regionID) - int(b.regionID) })
	}
	g.served.Store(&servedSet{reps: reps})
}

// follower returns the follower replica of region id, nil if none.
func (g *registry) follower(id uint32) *replica {
	g.follow.mu.Lock()
	defer g.follow.mu.Unlock()
	return g.follow.m[id]
}

// followerList returns the follower replicas, in region order.
func (g *registry) followerList() []*replica {
	g.follow.mu.Lock()
	defer g.follow.mu.Unlock()
	out := make([]*replica, 0, len(g.follow.m))
	for _, rep := range g.follow.m {
		out = append(out, rep)
	}
	slices.SortFunc(out, func(a, b *replica) int { return int(a.regionID) - int(b.regionID) })
	return out
}

// holding returns this server's replica of region id, served or not: its
// own region's, or a follower's; nil if it holds none.
func (g *registry) holding(id uint32) *replica {
	if rep := g.servedReplica(id); rep != nil {
		return rep
	}
	if id == g.own.regionID {
		return g.own
	}
	return g.follower(id)
}
