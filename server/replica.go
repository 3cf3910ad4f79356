package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
)

// replica is one region this server holds (docs/design.md §9: "a server hosts any
// number of replicas, leaders and followers"): the region's file of
// meganodes, its meganode table, the apply path that alone writes them,
// the replicated state beside the image (fsm.go), and the raft group that
// orders its records (group.go). Everything a replica holds is rebuilt
// from its snapshot and log.
//
// Today a server holds exactly one replica, the one it leads, and embeds
// it (Server.replica): the process-level parts (listeners, workers, the
// region table, peers, the split driver) are Server's. A replica reaches
// them only through srv, for its options, logger, metrics and data
// directory.
//
// Locking notes: replica.applyMu < replica.megaMu < meganode.Region.mu <
// meganode.Extents.mu < a blink tree's writer lock.
type replica struct {
	srv *Server

	// Set when the region is made or restored (under applyMu), read by
	// the server's readers once it serves.
	region   *meganode.Region
	regionID uint32
	nodeSize int
	maxKey   int

	megas  atomic.Pointer[meganodeTable]
	megaMu sync.Mutex // serialises changes to megas and meganode slots

	// applyMu serialises every write to the region (apply.go).
	applyMu sync.Mutex
	applied atomic.Uint64 // the last applied log index, for readers
	repl    replState     // guarded by applyMu (fsm.go)
	// targets are the remote split targets in the region (remote.go),
	// kept by apply. Guarded by applyMu.
	targets map[blink.Ptr]*targetState
	ended   []endedTarget // the last targets that ended (remote.go)
	// targetSeen is when this server, leading the region, first saw
	// each target frozen (sweepTargets). Used by the replica loop only.
	targetSeen map[blink.Ptr]time.Time

	// Set when the server starts serving the region (it leads it), then
	// read-only until it stops serving it (serve.go).
	epoch uint64 // the region's epoch in the table
	// shown is the region and epoch as the metrics collector reads them,
	// at any time (region and epoch are not, outside the apply lock and
	// serving).
	shown struct {
		region atomic.Pointer[meganode.Region]
		epoch  atomic.Uint64
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
	// dropped: the replica was dropped (repair.go) and its region
	// closed. Guarded by applyMu.
	dropped bool
}

// raftGroup returns the replica's raft group, nil before it started.
func (rep *replica) raftGroup() *raft.Raft { return rep.group.Load() }

// newReplica returns an empty replica of srv.
func newReplica(srv *Server) *replica {
	rep := &replica{srv: srv, learnerMissing: make(map[string]time.Time)}
	rep.megas.Store(&meganodeTable{})
	return rep
}
