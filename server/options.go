package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/buildinfo"
	"github.com/cellstore/cell/internal/raftmux"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// Options configure a Server. The zero value of every field means its
// default, written on the field; DataDir and Store have none.
type Options struct {
	// DataDir holds the server's state: the LOCK file, region.json (which
	// region this directory holds and where its file is), the log and the
	// snapshots, and the region files themselves unless they live in
	// ShmDir or a hugetlbfs mount (Hugepages). Region files are named
	// after DataDir's absolute path ("cell-<hash>-<region>"), wherever
	// they are; Wipe removes them with the directory. Created if missing.
	// Required.
	DataDir string
	// SnapshotDir, when set, holds the regions' raft snapshots instead of
	// DataDir/snapshots (a disk of their own, so that writing a snapshot
	// does not share the log's): they go in a directory of it named after
	// DataDir's absolute path ("cell-<hash>-snapshots"), and
	// DataDir/snapshots becomes a symbolic link to that directory, so
	// that later starts (with the same SnapshotDir or none) and Wipe find
	// them. A start whose SnapshotDir names another place than the link,
	// or a link whose directory is missing (an unmounted disk), fails
	// with ErrSnapshotDir: the log was truncated after those snapshots.
	// Default: DataDir/snapshots.
	SnapshotDir string
	// Listen is the RPC address (wire protocol). Default 127.0.0.1:7070;
	// port 0 picks a free port (Server.Addr reports it).
	Listen string
	// AdvertiseAddr is the RPC address published in the region table.
	// Default: the bound listener's address, with a wildcard host
	// (0.0.0.0, ::) replaced by the host name.
	AdvertiseAddr string
	// TLS, if set, is the server configuration of the RPC port
	// (tlsconf.Source.ServerConfig): every connection is TLS, its
	// handshake done by the connection's goroutine within FrameTimeout.
	// A plain TCP connection is answered with a refusal frame
	// (StatusPermissionDenied) and closed. Nil: plain TCP, for a trusted
	// network. Requires PeerTLS.
	TLS *tls.Config
	// ClientCertAuth says that TLS requires and verifies client
	// certificates (tlsconf.Files.ClientCertAuth; implied when TLS's own
	// ClientAuth is tls.RequireAndVerifyClientCert). Each op is then
	// authorized by the role of the peer's certificate (tlsconf.RoleOf):
	// server-to-server ops need RoleServer, admin ops RoleAdmin or
	// RoleServer, and a lower role is answered StatusPermissionDenied.
	// Without it every connection may send every op. Requires TLS.
	ClientCertAuth bool
	// PeerTLS is the client configuration this server dials other
	// servers' RPC ports with (remote splits, operator requests of the
	// coordinator; tlsconf.Source.ClientConfig of the peer files): it
	// verifies their certificates and presents this server's, which needs
	// the cell-server role where they require client certificates, and
	// a CA their TLS trusts. Nil: plain TCP.
	PeerTLS *tls.Config
	// RaftTLS, if set, is the server configuration of the raft port
	// (tlsconf.Source.ServerConfig of the peer files, client certificates
	// required): raft's connections are TLS both ways, dialled with
	// PeerTLS, and both ends must hold the cell-server role
	// (raftmux.Options.ServerTLS). The one-sided read port serves TLS
	// with TLS's configuration. Requires PeerTLS.
	RaftTLS *tls.Config
	// RDMAListen is the address of the tcp one-sided read responder.
	// Default 127.0.0.1:7071.
	RDMAListen string
	// Fabric lists libfabric endpoints (cellserver --provider fabric, one
	// per --fabric-provider): every served region is also registered with
	// each (the rdma package's fabric provider); the endpoints' providers
	// and addresses are published with the member entry, each region's
	// keys with its entry, and a new registration (a region served again,
	// a restart) rotates them. Needs a build with -tags libfabric. A
	// Node defaults to RDMAListen's host for the tcp provider; a Logger
	// to Logger.
	Fabric []rdma.FabricOptions
	// RaftListen is the address of the server's raft listener, shared by
	// the raft groups of all its regions (internal/raftmux). Default
	// 127.0.0.1:7073; port 0 picks a free port. A wildcard host is
	// advertised as the host name.
	RaftListen string
	// MetricsListen is the address of the HTTP server of /metrics
	// (Prometheus) and /debug/pprof/. Empty: no such server (cellserver's
	// flag defaults to DefaultMetricsListen).
	MetricsListen string
	// Cores is the number of worker goroutines doing tree work: the
	// paper's server cores, the server's explicit CPU budget. Default 1.
	Cores int
	// QueueDepth bounds the requests waiting for a worker; beyond it a
	// request is answered StatusOverloaded at once. Default 1024.
	QueueDepth int
	// RegionSize is the size of a new region in bytes. Default 1 GiB. A
	// region that is reopened keeps the sizes it was created with.
	RegionSize uint64
	// MeganodeSize is the size of a meganode. Default 64 MiB.
	MeganodeSize uint64
	// NodeSize is the B-link node size, a power of two in [512, 8192].
	// Default 1024 (keys up to 128 bytes).
	NodeSize int
	// BuddyExtents makes new regions with the extent allocator of
	// region format 2, power-of-two buddy blocks only, instead of
	// size-class slabs for small records (meganode.Options.SizeClasses,
	// region format 3: about a third less extent memory on the paper's
	// workload). For clusters that still run servers predating size
	// classes, which refuse the region record and images of a region with
	// them. Default false. A region keeps the allocator its log's region
	// record names, whatever this option: regions made before size
	// classes keep buddy blocks only.
	BuddyExtents bool
	// Hugepages selects the region's backing (meganode.HugepageMode):
	// auto (default: hugetlbfs, else ShmDir, else DataDir), on, off
	// (a plain file in DataDir).
	Hugepages meganode.HugepageMode
	// ShmDir is the tmpfs for shm-backed regions and for the shm
	// provider's registration table. Default "/dev/shm".
	ShmDir string
	// ShmGroup, if positive, is the group ID given the region files and
	// the shm registration table (mode 0640 instead of 0600), so that
	// clients running as other users of that group can read one-sided
	// over shared memory. The server must be a member of the group (or
	// root). Default 0: the server's user only.
	ShmGroup int
	// Prefault commits each region file's memory when it is made
	// (meganode.Options.Prefault): a host short of memory fails the start
	// rather than a later write with SIGBUS. Default false: a region takes
	// memory as it is used.
	Prefault bool
	// Store is the region table. Required; the caller closes it after
	// the server.
	Store regiontable.Store
	// ServerID names the server in the region table: 1..128 bytes of
	// [A-Za-z0-9._-]. It is recorded in DataDir, which then only starts
	// with the same ID. Default DefaultServerID(Listen).
	ServerID string
	// HostID identifies this machine to same-host shm readers. Default
	// rdma.HostID().
	HostID string
	// Version is the build version published with the member. Default
	// the binary's build (buildinfo.Version: the module version or VCS
	// revision when the build recorded one, else "dev").
	Version string
	// RegisterWait bounds how long Start waits for a member entry with
	// the same ID to go (a crashed predecessor's, until its lease
	// expires). Default 15 s.
	RegisterWait time.Duration
	// MaxFrameSize bounds wire frames in both directions. Default
	// wire.DefaultMaxFrameSize (4 MiB + 32).
	MaxFrameSize int
	// WriteTimeout bounds each write of replies to a connection; a client
	// that stops reading for longer loses its connection. Default 10 s.
	WriteTimeout time.Duration
	// MaxRangePairs bounds the pairs of one Range reply (a request's Limit
	// is capped to it; 0 there means this). Default 4096. A reply cut
	// short says where to resume, and the client pages on.
	MaxRangePairs int
	// MaxRangeBytes bounds the bytes of pairs in one Range reply (keys,
	// values and their length prefixes); a reply always carries at least
	// one pair, so a single pair larger than this still goes. Default
	// 1 MiB. The frame size bounds it too.
	MaxRangeBytes int
	// IdleTimeout closes a client connection on which no request started
	// for this long. Default 5 min; negative: never.
	IdleTimeout time.Duration
	// FrameTimeout closes a client connection on which a request started
	// and did not arrive whole within this (a stalled or slowloris
	// client). Default 10 s; negative: never.
	FrameTimeout time.Duration
	// MaxConnections bounds the client connections open at once; the
	// server refuses more (a refusal frame, then close). Default 4096.
	// The tcp responder of one-sided reads applies it to its own
	// connections, counted apart (closed at once, unread).
	MaxConnections int
	// MaxConnectionsPerHost bounds the client connections open at once
	// from one IP address, on each port as MaxConnections. Default 1024.
	MaxConnectionsPerHost int
	// MaxInflightPerConn bounds the requests of one connection read and
	// not answered yet; the server reads no more from it until one is
	// answered (backpressure: the client's requests wait in the socket).
	// Default 1024.
	MaxInflightPerConn int
	// SplitFill is the fraction of a meganode's nodes in use from which the
	// server splits it (paper §2.2: "A meganode should be split before it
	// becomes too full, otherwise concurrent updates to X_left may fail if
	// we run out of space"), in (0, 1]. Default 0.75. A meganode that
	// reaches blink's fill threshold (0.9) first refuses new keys until a
	// split made room; those writes wait for it.
	SplitFill float64
	// DisableSplits turns meganode splits off: a full meganode answers
	// writes of new keys StatusUnavailable. For tests and benchmarks of a
	// single meganode.
	DisableSplits bool
	// SplitPlacement chooses where a split puts the new meganode (remote.go):
	// PlaceAuto (default, the paper's rule), PlaceLocal or PlaceRemote.
	SplitPlacement Placement
	// SplitRemoteBelow is PlaceAuto's "few local meganodes": a server
	// holding fewer meganodes places new ones remotely. Default 4.
	SplitRemoteBelow int
	// SplitCopyBatch is how many leaves one copy step of a split moves
	// (one apply record, holding the meganode's writer lock and the apply
	// lock meanwhile). Default 16 (about 2 ms with 1 KiB nodes).
	SplitCopyBatch int
	// SplitFreeBatch is how many nodes one free step of a split
	// invalidates. Default 256.
	SplitFreeBatch int
	// MaxSplitWait bounds how long a write waits (parked, not holding a
	// worker) for a meganode split that froze its key or must make room
	// for it; it is then answered NeedsRetry, which clients retry. A
	// request's deadline ends the wait earlier (Expired). Default 10 s.
	MaxSplitWait time.Duration
	// Replicas is the replication factor: the leader of the server's
	// region keeps this many servers (itself included) in the region's
	// raft group, adding followers on the live servers holding the fewest
	// replicas (follower.go). A write is acknowledged once a majority of
	// them logged it. Default 1.
	Replicas int
	// RaftHeartbeatTimeout is the region groups' heartbeat and election
	// timeout: a follower that hears nothing from its leader for this
	// long (randomised up to twice) starts an election. Default 500 ms.
	RaftHeartbeatTimeout time.Duration
	// ProposalTimeout bounds how long a record waits to enter the group's
	// proposal queue (raft.Apply's timeout); a record that never entered
	// it is refused, a definite error. Default 10 s.
	ProposalTimeout time.Duration
	// SnapshotThreshold is how many log entries past the last snapshot
	// make the group snapshot the region (raft's SnapshotThreshold); the
	// log is then truncated to TrailingLogs. Default 65536.
	SnapshotThreshold uint64
	// SnapshotLogBytes makes the group snapshot the region also when the
	// records it applied since its last snapshot add up to this many
	// bytes, whatever their count: with large values SnapshotThreshold
	// entries would grow the log (its disk, what a restart replays, and
	// the compaction its truncation costs) by gigabytes. A snapshot writes
	// the whole region image, so the default is the default region size:
	// 1 GiB. Checked every replicaInterval.
	SnapshotLogBytes uint64
	// SnapshotInterval is how often the group checks SnapshotThreshold
	// (raft waits between one and two intervals). Default 10 s: the log a
	// restart replays is at most SnapshotThreshold entries plus what the
	// group takes in two intervals; a check costs nothing, and snapshots
	// are as frequent as the threshold makes them whatever the interval.
	SnapshotInterval time.Duration
	// OrphanTargetAge is how long a remote split's target may stay frozen
	// before the region's leader asks whether its source still splits
	// into it, and drops it if not (an orphan blocks the region's
	// snapshots). Default 1 min.
	OrphanTargetAge time.Duration
	// DeadAfter is how long a server must be missing from the members
	// before the coordinator replaces its replicas on live servers
	// (repair.go). Default 30 s.
	DeadAfter time.Duration
	// BalanceInterval is how often the coordinator looks for a server
	// leading far more regions than the mean and moves one leadership
	// away (repair.go). Negative: never. Default 10 s.
	BalanceInterval time.Duration
	// TrailingLogs is how many entries stay in the log after a snapshot,
	// for followers that lag. Default 10240.
	TrailingLogs uint64
	// Registry receives the server's metrics (NewMetrics) and is what
	// MetricsListen serves. Default: a new registry with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// TestingKnobs are hooks for tests; zero in production.
	TestingKnobs TestingKnobs
}

// TestingKnobs are test hooks. Each is nil in production.
type TestingKnobs struct {
	// BeforeHandle fires in a worker for each request it takes from the
	// queue, after the request's queueing time was measured and before
	// it is handled. Tests block in it to fill the queue.
	BeforeHandle func(op wire.Op)
	// OnApply fires in apply, under the apply lock, after each record was
	// applied, with its log index, the record (valid only during the
	// call) and the error the apply returned. Tests record the log with
	// it.
	OnApply func(index uint64, rec []byte, err error)
	// AckBeforeCommit breaks durability on purpose: a write from a client
	// is answered OK at once, and its record proposed 100 ms later (a
	// kill in between loses it). The durability tests run with it to show that
	// they catch a lost acknowledged write (cellserver reads it from
	// CELL_TESTING_ACK_BEFORE_COMMIT=1).
	AckBeforeCommit bool
	// WALFS, when set, is the filesystem of the log (tests inject I/O
	// errors with pebble's errorfs).
	WALFS vfs.FS
	// BeforeGroups fires in Start after the server joined the members and
	// before its raft groups start (where a restart replays its logs).
	// Tests block in it to stand for a long replay.
	BeforeGroups func()
	// NoSnapshotOnClose: Close does not snapshot the region, so the next
	// start replays the log as after a crash.
	NoSnapshotOnClose bool
	// RaftFaults, when set, injects faults into the raft traffic this
	// server dials (raftmux.FaultNet: partitions, delays, drops).
	RaftFaults raftmux.Faults
	// RaftNetwork, when set, carries the raft listener and its dials
	// instead of TCP: unit tests of replicas and groups share a
	// raftmux.MemNetwork and open no socket for raft.
	RaftNetwork raftmux.Network
	// NoVersions: the server behaves as one from before versions
	// (docs/transactions.md §2.6): its member entry lists no features
	// and it never proposes the version record, so regions it leads
	// stay without versions (the upgrade tests).
	NoVersions bool
	// SplitNoFloor breaks versions on purpose: a remote split's commit
	// does not carry the source's version clock, so the target's clock
	// is not raised above the versions that moved in
	// (docs/transactions.md §2.3). TestVersionsAcrossRemoteSplits runs
	// with it to show that it catches a version that goes back.
	SplitNoFloor bool
	// RefuseTakeover, when set, makes a replica elected leader of a
	// region it does not serve leave it alone (the old host keeps its
	// table entry) for the regions it reports true for, so tests see what
	// an isolated host does on its own. A test names its region once the
	// cluster is up, so that elections while it starts are taken over as
	// usual; one that refuses every takeover from the start returns true.
	RefuseTakeover func(region uint32) bool
	// MissingMarkEvery, when set, replaces missingMarkEvery: how far the
	// coordinator's count of a missing server may run ahead of the
	// table's mark of it.
	MissingMarkEvery time.Duration
	// IgnoreLease breaks fencing on purpose: the server's regions are
	// served as if their read lease never ended. The partition tests run
	// with it to show that they catch a stale host.
	IgnoreLease bool
	// OnSnapshot fires in fsm.Snapshot under the apply lock, once the
	// region's capture started: tests take the image the snapshot must
	// hold with it.
	OnSnapshot func(region *meganode.Region)
	// TransferFault, when set, is asked before each try of a leadership
	// transfer (attempt counts from 1); an error it returns stands for
	// raft's answer to that try, which is then not made.
	TransferFault func(region uint32, attempt int) error
	// BeforeAddNonvoter fires on a region's leader before it adds server
	// as a nonvoter of the region's group (after the region table lists
	// it as a learner). Tests block in it to stand for a slow
	// configuration change.
	BeforeAddNonvoter func(region uint32, server string)
	// BeforeRestoreImage fires in fsm.Restore under the apply lock, just
	// before the image is read into a new region file: tests look at the
	// region files there are then.
	BeforeRestoreImage func(region uint32)
}

// MaxReplicas bounds Options.Replicas.
const MaxReplicas = 7

// Defaults.
const (
	DefaultListen           = "127.0.0.1:7070"
	DefaultRDMAListen       = "127.0.0.1:7071"
	DefaultMetricsListen    = "127.0.0.1:7072"
	DefaultRaftListen       = "127.0.0.1:7073"
	DefaultQueueDepth       = 1024
	DefaultShmDir           = "/dev/shm"
	DefaultRegisterWait     = 15 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultMaxRangePairs    = 4096
	DefaultMaxRangeBytes    = 1 << 20
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultFrameTimeout     = 10 * time.Second
	DefaultMaxConnections   = 4096
	DefaultMaxConnsPerHost  = 1024
	DefaultMaxInflight      = 1024
	DefaultSplitFill        = 0.75
	DefaultSplitRemoteBelow = 4
	DefaultSplitCopyBatch   = 16
	DefaultSplitFreeBatch   = 256
	DefaultMaxSplitWait     = 10 * time.Second

	DefaultRaftHeartbeatTimeout = 500 * time.Millisecond
	// DefaultDeadAfter is Options.DeadAfter's default.
	DefaultDeadAfter = 30 * time.Second
	// DefaultOrphanTargetAge is Options.OrphanTargetAge's default.
	DefaultOrphanTargetAge = time.Minute
	// DefaultBalanceInterval is Options.BalanceInterval's default.
	DefaultBalanceInterval   = 10 * time.Second
	DefaultProposalTimeout   = 10 * time.Second
	DefaultSnapshotThreshold = 65536
	DefaultSnapshotLogBytes  = 1 << 30
	DefaultSnapshotInterval  = 10 * time.Second
	DefaultTrailingLogs      = 10240
)

// EnsureDefaults fills zero fields with their defaults. HostID stays empty
// when rdma.HostID fails (Validate reports it). cellserver's flags
// (cmd/cellserver/options.go) default to the same values, which its
// TestOptionDefaults checks: a default changed here is changed there.
func (o *Options) EnsureDefaults() {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.RDMAListen == "" {
		o.RDMAListen = DefaultRDMAListen
	}
	if o.RaftListen == "" {
		o.RaftListen = DefaultRaftListen
	}
	if o.Cores == 0 {
		o.Cores = 1
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.RegionSize == 0 {
		o.RegionSize = meganode.DefaultRegionSize
	}
	if o.MeganodeSize == 0 {
		o.MeganodeSize = meganode.DefaultMeganodeSize
	}
	if o.NodeSize == 0 {
		o.NodeSize = blink.DefaultNodeSize
	}
	if o.ShmDir == "" {
		o.ShmDir = DefaultShmDir
	}
	for i := range o.Fabric {
		f := &o.Fabric[i]
		if f.Provider == "tcp" && f.Node == "" {
			if host, _, err := net.SplitHostPort(o.RDMAListen); err == nil && host != "" && !net.ParseIP(host).IsUnspecified() {
				f.Node = host
			}
		}
	}
	if o.ServerID == "" {
		o.ServerID = DefaultServerID(o.Listen)
	}
	if o.HostID == "" {
		o.HostID, _ = rdma.HostID()
	}
	if o.Version == "" {
		o.Version = buildinfo.Version("")
	}
	if o.RegisterWait == 0 {
		o.RegisterWait = DefaultRegisterWait
	}
	if o.MaxFrameSize == 0 {
		o.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxRangePairs == 0 {
		o.MaxRangePairs = DefaultMaxRangePairs
	}
	if o.MaxRangeBytes == 0 {
		o.MaxRangeBytes = DefaultMaxRangeBytes
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.FrameTimeout == 0 {
		o.FrameTimeout = DefaultFrameTimeout
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxConnectionsPerHost == 0 {
		o.MaxConnectionsPerHost = DefaultMaxConnsPerHost
	}
	if o.MaxInflightPerConn == 0 {
		o.MaxInflightPerConn = DefaultMaxInflight
	}
	if o.SplitFill == 0 {
		o.SplitFill = DefaultSplitFill
	}
	if o.SplitPlacement == "" {
		o.SplitPlacement = PlaceAuto
	}
	if o.SplitRemoteBelow == 0 {
		o.SplitRemoteBelow = DefaultSplitRemoteBelow
	}
	if o.SplitCopyBatch == 0 {
		o.SplitCopyBatch = DefaultSplitCopyBatch
	}
	if o.SplitFreeBatch == 0 {
		o.SplitFreeBatch = DefaultSplitFreeBatch
	}
	if o.MaxSplitWait == 0 {
		o.MaxSplitWait = DefaultMaxSplitWait
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.RaftHeartbeatTimeout == 0 {
		o.RaftHeartbeatTimeout = DefaultRaftHeartbeatTimeout
	}
	if o.ProposalTimeout == 0 {
		o.ProposalTimeout = DefaultProposalTimeout
	}
	if o.SnapshotThreshold == 0 {
		o.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if o.SnapshotInterval == 0 {
		o.SnapshotInterval = DefaultSnapshotInterval
	}
	if o.SnapshotLogBytes == 0 {
		o.SnapshotLogBytes = DefaultSnapshotLogBytes
	}
	if o.OrphanTargetAge == 0 {
		o.OrphanTargetAge = DefaultOrphanTargetAge
	}
	if o.DeadAfter == 0 {
		o.DeadAfter = DefaultDeadAfter
	}
	if o.BalanceInterval == 0 {
		o.BalanceInterval = DefaultBalanceInterval
	}
	if o.TrailingLogs == 0 {
		o.TrailingLogs = DefaultTrailingLogs
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options are usable. Errors wrap
// ErrInvalidOptions.
func (o *Options) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("server: "+format+": %w", append(args, ErrInvalidOptions)...)
	}
	switch {
	case o.DataDir == "":
		return bad("no data directory")
	case o.Store == nil:
		return bad("no region table store")
	case o.Replicas < 1 || o.Replicas > MaxReplicas:
		return bad("replicas %d not in [1, %d]", o.Replicas, MaxReplicas)
	case o.Cores < 1 || o.Cores > 1024:
		return bad("cores %d not in [1, 1024]", o.Cores)
	case o.QueueDepth < 1:
		return bad("queue depth %d < 1", o.QueueDepth)
	case o.NodeSize < blink.MinNodeSize || o.NodeSize > blink.MaxNodeSize || o.NodeSize&(o.NodeSize-1) != 0:
		return bad("node size %d is not a power of two in [%d, %d]", o.NodeSize, blink.MinNodeSize, blink.MaxNodeSize)
	case o.MeganodeSize%uint64(o.NodeSize) != 0 || o.MeganodeSize/uint64(o.NodeSize) < 8:
		return bad("meganode size %d is not a multiple of the node size %d holding at least 8 nodes", o.MeganodeSize, o.NodeSize)
	case o.RegionSize > meganode.MaxRegionSize:
		return bad("region size %d > %d", o.RegionSize, uint64(meganode.MaxRegionSize))
	case o.Hugepages > meganode.HugepagesOff:
		return bad("hugepage mode %v", o.Hugepages)
	case o.HostID == "":
		return bad("no host identity (rdma.HostID failed; set HostID)")
	case o.RegisterWait < 0 || o.WriteTimeout < 0:
		return bad("negative timeout")
	case o.MaxFrameSize < 64<<10 || int64(o.MaxFrameSize) > 1<<32-1:
		return bad("max frame size %d not in [64 KiB, 4 GiB)", o.MaxFrameSize)
	case o.MaxRangePairs < 1:
		return bad("max range pairs %d < 1", o.MaxRangePairs)
	case o.MaxRangeBytes < 1:
		return bad("max range bytes %d < 1", o.MaxRangeBytes)
	case o.MaxConnections < 1 || o.MaxConnectionsPerHost < 1:
		return bad("connection limits %d and %d per host must be at least 1", o.MaxConnections, o.MaxConnectionsPerHost)
	case o.MaxInflightPerConn < 1:
		return bad("max in-flight per connection %d < 1", o.MaxInflightPerConn)
	case o.ShmGroup < 0:
		return bad("shm group %d < 0", o.ShmGroup)
	case len(o.Fabric) > 0 && !rdma.FabricBuilt:
		return bad("fabric providers %v: this build has no libfabric provider (build with -tags libfabric)", o.Fabric)
	case o.SplitFill <= 0 || o.SplitFill > 1:
		return bad("split fill %v not in (0, 1]", o.SplitFill)
	case o.SplitPlacement != PlaceAuto && o.SplitPlacement != PlaceLocal && o.SplitPlacement != PlaceRemote:
		return bad("split placement %q (auto, local or remote)", o.SplitPlacement)
	case o.SplitRemoteBelow < 0:
		return bad("split remote-below %d < 0", o.SplitRemoteBelow)
	case o.SplitCopyBatch < 1 || o.SplitFreeBatch < 1:
		return bad("split batches %d and %d must be at least 1", o.SplitCopyBatch, o.SplitFreeBatch)
	case o.DeadAfter < 0:
		return bad("dead-after %v < 0", o.DeadAfter)
	case o.MaxSplitWait < 0:
		return bad("negative split wait")
	case o.RaftHeartbeatTimeout < 20*time.Millisecond:
		return bad("raft heartbeat timeout %v < 20ms", o.RaftHeartbeatTimeout)
	case o.ProposalTimeout < 0 || o.SnapshotInterval < 0:
		return bad("negative proposal timeout or snapshot interval")
	case o.ClientCertAuth && o.TLS == nil:
		return bad("client certificate authentication without TLS")
	case o.TLS != nil && o.PeerTLS == nil:
		return bad("TLS on the RPC port without PeerTLS: the server could not call the other servers' ports")
	case o.RaftTLS != nil && o.PeerTLS == nil:
		return bad("TLS on the raft port without PeerTLS: the server could not dial the other servers' raft ports")
	case o.RaftTLS != nil && o.RaftTLS.ClientAuth != tls.RequireAndVerifyClientCert && o.RaftTLS.GetConfigForClient == nil:
		return bad("TLS on the raft port must require client certificates (peers prove the server role)")
	}
	if err := regiontable.ValidServerID(o.ServerID); err != nil {
		return fmt.Errorf("server: %w: %w", err, ErrInvalidOptions)
	}
	for name, a := range map[string]string{"listen": o.Listen, "rdma listen": o.RDMAListen, "raft listen": o.RaftListen, "metrics listen": o.MetricsListen} {
		if a == "" && name == "metrics listen" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("server: %s address %q: %w: %w", name, a, err, ErrInvalidOptions)
		}
	}
	return nil
}

// DefaultServerID derives a server ID from the host name and the RPC listen
// address, e.g. "db7-127.0.0.1-7070": stable across restarts with the same
// flags, distinct for servers sharing a host.
func DefaultServerID(listen string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "cell"
	}
	id := sanitizeID(host + "-" + listen)
	if len(id) > regiontable.MaxServerIDLen {
		id = id[:regiontable.MaxServerIDLen]
	}
	return id
}

// sanitizeID replaces bytes a server ID may not hold with '-'.
func sanitizeID(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// advertise returns the address to publish for a listener bound at bound
// (configured as listen): a wildcard host becomes the host name.
func advertise(bound string) string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			return net.JoinHostPort(h, port)
		}
	}
	return bound
}
