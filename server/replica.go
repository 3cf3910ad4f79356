package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/server/rsm"
)

// replica is one region this server holds (docs/design.md §9: "a server hosts any
// number of replicas, leaders and followers"): the region's replicated
// state machine (sm: the region file, its meganodes, the state beside the
// image and the apply path that alone writes them, package rsm), the raft
// group that orders its records (group.go), and what the server keeps of
// it while it serves it (serve.go, lease.go) or tends its group
// (repair.go). Everything sm holds is rebuilt from the snapshot and log.
//
// A server holds its own region's replica (Server.reps.own) and followers
// of others' (follower.go). A replica reaches the server only through
// srv, for its options, logger, metrics and data directory.
type replica struct {
	srv *Server

	// regionID is the region's ID, and sm its state machine: set when
	// the region's file is made (region.go, follower.go), fixed for the
	// replica's life.
	regionID uint32
	sm       *rsm.Machine

	// targetSeen is when this server, leading the region, first saw
	// each remote split target frozen (sweepTargets). Used by the
	// replica loop only.
	targetSeen map[blink.Ptr]time.Time

	// Set when the server starts serving the region (it leads it), then
	// read-only until it stops serving it (serve.go).
	epoch uint64 // the region's epoch in the table
	// shown is the epoch as the metrics collector reads it, at any time
	// (epoch is not, outside serving).
	shown struct {
		epoch atomic.Uint64
	}
	readKeys []rdma.RemoteKey // its one-sided read registrations; guarded by readMu
	// readMu guards readKeys: the lease loop reads them while the
	// replica stops being served (a transfer, a takeover elsewhere).
	readMu sync.Mutex
	// leaseUntil is the read lease (lease.go): a monotime reading,
	// noLease, or 0 (none).
	leaseUntil atomic.Int64
	// leaseStop ends the lease loop of the current serving (serve.go).
	// Guarded by Server.servedMu.
	leaseStop chan struct{}
	// wasServed: the region was served once, so requests may still
	// read it: a region replaced by a snapshot is retired, not unmapped.
	wasServed atomic.Bool

	raft  *raft.Raft             // the region's group, once started (group.go)
	trans *raft.NetworkTransport // its transport over the server's raft listener
	// group is raft, for goroutines that may run before it is set
	// (the log's failure callback).
	group atomic.Pointer[raft.Raft]
	props proposals // propose.go

	// move is the replica move under way (repair.go), nil if none.
	move atomic.Pointer[replicaMove]
	// versioning is set while a version record of the replica's region
	// is proposed and not yet settled (versions.go).
	versioning atomic.Bool
	// transferring is set while the replica hands its group's
	// leadership over (repair.go).
	transferring atomic.Bool
	// logBytes is the size of the records applied since the region's
	// last snapshot (taken or restored); snapping is set while a
	// snapshot that logBytes asked for runs (snapshot.go).
	logBytes atomic.Uint64
	snapping atomic.Bool
	// learnerMissing is when this leader first found each nonvoter's
	// server holding no replica (repair.go). Used by the replica loop
	// only.
	learnerMissing map[string]time.Time
}

// raftGroup returns the replica's raft group, nil before it started.
func (rep *replica) raftGroup() *raft.Raft { return rep.group.Load() }

// newReplica returns an empty replica of srv.
func newReplica(srv *Server) *replica {
	return &replica{srv: srv, learnerMissing: make(map[string]time.Time)}
}
