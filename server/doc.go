// Package server is a Cell server: it holds replicas of regions of
// meganodes, each a raft group on the server's log (package wal): its own
// region, which it made, and followers of other servers' regions
// (follower.go, Options.Replicas). It serves the regions whose groups it
// leads and whose region table entries name it as host (serve.go): its
// own, and any it took over from a host that died (failover.go). It
// answers the wire protocol with a fixed number of tree workers, exposes
// the regions it serves to one-sided reads (package rdma), and publishes
// itself in the region table (package regiontable).
//
// # Rooms
//
// What a region holds and how its records apply is package rsm (the
// replicated state machine: records, replicated state, apply, snapshots);
// a replica (replica.go) is one region's rsm.Machine with its raft group
// (group.go, fsm.go: the adapter from raft to the machine) and what the
// server keeps of it while it serves it. The Server owns the process
// (lifecycle, data directory, log, listeners, the table's view, peers,
// membership) and composes the roles, each a type of its own that
// reaches replicas only through the registry:
//
//   - registry (registry.go): every replica the server holds, its own,
//     its followers, and which of them it serves;
//   - rpcServer (conn.go, workers.go, handlers.go, scan.go, limits.go,
//     checkop.go, write.go, park.go): connections, the queue and the
//     workers, the handlers, a write's state machine;
//   - hosting (serve.go, lease.go): the served regions' read leases,
//     one-sided registrations and table entries;
//   - keeper (follower.go, repair.go's host side, failover.go): the
//     replicas' groups as the table and options say they should be:
//     followers, replication, moves, transfers, takeovers;
//   - coordinator (coordinator.go, repair.go's coordinator side,
//     placement.go): the election and the cluster-wide repairs;
//   - splitter (split.go, splitdriver.go, remote.go, recover.go): the
//     split driver, one method per step, rebuilt from the applied state
//     after a failover.
//
// # Lifecycle
//
// New validates Options; Start brings the server up; Close (or the end of
// Serve's context) shuts it down gracefully. Start, in order:
//
//  1. locks DataDir (a second server on it fails with ErrDataDirLocked);
//  2. opens the log and the snapshot store (package wal, group.go);
//  3. decides which region the directory holds (region.json, or a new ID
//     from the region table), removes every region file named after the
//     directory (regionFilePrefix) that no process holds, which a crash
//     left, and makes its file anew, empty and sparse: it takes memory as
//     it fills, unless Options.Prefault (region.go);
//  4. binds the raft listener (Options.RaftListen, internal/raftmux) and
//     the RPC, one-sided (tcp responder) and metrics listeners, serves
//     the metrics listener at once (/readyz says "starting"), and
//     registers the member under a lease: a server replaying its logs is
//     a member, not a dead server to replace (repair.go); connections
//     wait in the listen backlog until it accepts them (step 8);
//  5. reopens a follower replica for every other region its log holds
//     (follower.go), and starts its own region's raft group (group.go):
//     raft restores the newest snapshot into the region (package rsm: the
//     empty file of step 3 is removed first, so that a prefaulted or
//     hugetlbfs region is not held twice), a new directory bootstraps a
//     group of one voter, and Start waits until this server leads and a barrier committed, so that every record
//     committed before a restart is applied; a new region's first record
//     pins its layout. When the region table names another host for the
//     region (it was taken over while this server was down), the server
//     holds a replica of it and serves nothing of it;
//  6. makes sure the cluster has a root meganode: when the region table
//     has no root (or its root pointed into a region of ours that holds
//     no such meganode) root records format one leaf meganode covering
//     the whole key space around the table's compare-and-set (docs/design.md §4);
//  7. registers the region with the tcp responder and the shm provider
//     (whose start removes the registration tables of dead processes);
//  8. publishes the region's entry (next epoch, file path, remote keys),
//     starts the workers, the split loop (which first resumes or undoes
//     the splits the log shows in progress, recover.go) and the accept
//     loop; then it follows the table and campaigns for coordinator.
//
// Close leaves the member list first (clients stop coming), stops accepting
// connections and reading requests, lets the workers finish every request
// already queued and the writes in flight settle, flushes the replies,
// closes the connections, revokes one-sided access, snapshots the region
// and shuts its raft group down, closes the region and removes its file
// (the log and the snapshots hold it), and closes the log.
//
// # Restarts: what survives
//
// Everything acknowledged, whatever the stop. A write is answered only
// once its record is synced to the log and applied (propose.go); a
// restart rebuilds the region from the newest snapshot and the log after
// it, never from the file an earlier run left (after a crash it may hold
// a half-applied record). The region keeps the sizes its log's first
// record pinned, whatever this run's options say. The region's epoch
// grows at every start. The region table itself (in etcd: members,
// regions, root, ID counter) survives as etcd does.
//
// # Requests
//
// Per connection, a reader goroutine reads frames (wire.Reader) and hands
// each, with its arrival time, to a bounded queue served by exactly
// Options.Cores worker goroutines, the explicit CPU budget for tree work
// (the paper's server cores). Workers measure each request's queueing time
// (arrival to start) and service time, and reply out of order through the
// connection's wire.ReplyWriter; every reply carries both. A full queue is
// answered StatusOverloaded at once, a request whose budget ran out before
// a worker took it StatusExpired; neither is executed. Ping is answered by
// the reader itself, so that it measures the network rather than the
// queue.
//
// Malformed input never stops the server. A frame that is too large or has
// an unknown op leaves the stream at a frame boundary: it is answered with
// an error status and the connection reads on. A body that does not decode
// is answered StatusBadRequest. A stream that lost its framing (bad magic,
// bad length, truncated) is closed without an answer, one of another
// protocol version after StatusBadVersion. Every size is validated before
// use; nothing a client sends makes the server panic.
//
// # TLS and peer roles
//
// With Options.TLS the RPC port is TLS only (docs/tls.md): the accept loop
// wraps each connection and its goroutine does the handshake within
// FrameTimeout; a failed handshake closes that connection only and is
// counted (refusals, reason tls_handshake), and a plain TCP client is
// sent a refusal frame (StatusPermissionDenied) so that its calls fail as
// never sent. Each connection keeps its peer's role (tlsconf.PeerRole of
// its verified certificate; RoleNone on plain TCP). With
// Options.ClientCertAuth the reader checks each request's op against
// that role before anything is decoded (opRoles, conn.go): the
// server-to-server ops (SplitBegin, SplitAppend, SplitEnd, InsertChild,
// Meganode) need RoleServer, the admin ops (Check, ReplicaHash,
// NodeDump, MoveReplica, TransferLeader) RoleAdmin or RoleServer; a lower
// role is answered StatusPermissionDenied and the connection reads on.
// Without ClientCertAuth every connection may send every op: such a
// server belongs on a trusted network. The server dials other servers
// (remote.go) with Options.PeerTLS, presenting its own certificate.
//
// # Operations
//
//   - Search is one hop of a server-side search (paper §2.2): starting at
//     the request's pointer (any node of a meganode here, 0 for the root)
//     it searches within this server's meganodes, following child and
//     right-link pointers that stay local, until a leaf meganode's result
//     (and the value, if asked) or a pointer to another server, returned
//     as Next with the last meganode's range, level and height.
//   - Get, Contains, Put and Delete descend the same way; when the key's
//     leaf meganode is elsewhere they answer StatusWrongServer naming its
//     server. Put and Delete encode a write record and call apply.
//   - Range scans [Start, End) forward or in reverse across this server's
//     meganodes, up to the limit (at most MaxRangePairs), MaxRangeBytes or
//     the frame limit; More and Resume say where to go on.
//   - Metadata describes the server, its region (remote key, read address,
//     file path, epoch), its meganodes (range, level, height, fill, right
//     link, part in a split in progress) and selector hints (workers,
//     queue length, recent mean queueing time, recent mean service time of
//     a search hop).
//   - NodeDump copies bytes of the region with 8-byte atomic loads, as a
//     one-sided read would: any 8-byte aligned range inside the region.
//   - Check runs Server.Check between splits and lists its violations
//     (cellctl check). It is the one request served beside the workers,
//     on a goroutine of its own, because it is long (checkop.go).
//
// Connections are bounded (limits.go, docs/limits.md): connections per
// server and per client address, requests read and not answered per
// connection (the reader waits), idle and frame timeouts; each limit met
// is counted in cell_server_refusals_total.
//
// A request for a region this server does not host is answered
// StatusWrongServer with the host's address from the cached region table
// (StatusUnknownRegion when the table does not know the region), and one
// with another epoch StatusStaleEpoch with the current epoch. Tree errors
// map to statuses in errors.go; a full meganode that cannot split (splits
// off, no free meganode slot) is StatusUnavailable.
//
// # Meganode splits (paper §2.2, docs/design.md §4)
//
// A meganode whose fill reaches Options.SplitFill (0.75), or that refused
// a new key (blink.ErrNeedsSplit), is split into itself (X, the left half)
// and a new meganode of the same region (Y, the right half). One goroutine
// (splitLoop) runs the server's splits one at a time; writes queue them
// (requestSplit, deduplicated per meganode). A split is a sequence of
// split records through apply (server/rsm/record.go draws their format), each holding
// the apply lock and the trees' writer locks for one bounded step, so
// writes to other keys and other meganodes go on in between:
//
//  1. chose: sep = blink's SplitKey, the middle entry key of X's topmost
//     node with two entries (a node boundary at every level below).
//  2. start record: X frozen at sep (writes of keys >= sep get
//     blink.ErrFrozen; reads never block), Y formatted in the lowest free
//     slot (apply chooses it) with bounds [sep, X.max), X's global
//     level and X's right link, frozen whole, and published in the
//     meganode table (reachable by nobody yet).
//  3. copy records, Options.SplitCopyBatch leaves each: X's frozen leaf
//     entries into Y; a leaf meganode's records are shared, not copied.
//  4. link record: at every local level the node of X ending at sep links
//     right to Y's local root, X's root is cut at sep, X's header max
//     becomes sep. The point of no return: before it, a failure applies an
//     abort record (X thawed, Y freed); after it the split is finished.
//  5. free records, Options.SplitFreeBatch nodes each: X's old right half
//     invalidated and freed; the last one thaws X and Y, and the writes
//     that waited go on (in Y).
//  6. the separator: a child record puts (sep → Y) into the parent
//     meganode, found by searching sep from the root down to X's level + 1
//     (a full parent is split first, recursively); when X's level is the
//     root's, a root record formats a new root meganode one level up with
//     an entry per meganode of that level ("\x00" stands for -inf), and
//     the root pointer moves: the region table's with a compare-and-set,
//     then the server's and offset 0 of the region.
//  7. end record.
//
// Failpoints (FailpointSplit*) pause or fail the split after each step.
//
// One splitDriver (splitdriver.go) takes a split through these steps, a
// method each. It holds nothing the applied state does not also say: a
// server that finds a split in progress there (at start, on taking a
// region over, or when the next split of the same meganode is refused
// with blink.ErrSplitState) rebuilds the driver from it (resumeDriver,
// recover.go) and undoes the split if it had not linked, or runs the
// steps it has left. A separator that finds no parent yet queues its
// driver for the split loop, which retries the insert and then the end
// record; a rebuilt driver replaces a queued one of the same split.
//
// Readers stay right throughout, server-side and one-sided (blink's doc,
// "Meganode split"): until the separator is in the parent, searches reach
// Y through X's right links, which the server follows like child pointers
// (they lead to a node of another local meganode); ranges resume from the
// max of the last leaf they read (blink.Iter.Edge), never from a header
// that a split is changing.
//
// Writes never see a split. A write whose record's outcome says the key's
// meganode changed since its search (ErrKeyOutOfRange: the split linked)
// runs again from its search, and one whose key is frozen, or whose
// meganode is full and must split, is parked (propose.go, park.go): no
// worker waits for it, and the split's next
// event (the right half freed, the split done or failed) puts it back in
// the queue to run again from its search. The wait ends after
// Options.MaxSplitWait (NeedsRetry, which clients retry) or at the
// request's deadline (Expired). So a split never holds a worker, and reads
// are served throughout even with one core.
//
// After a restart the split loop first resumes or undoes every split the
// applied log shows in progress (recover.go): a start without a link is
// undone (abort: Y dropped, X thawed), a link is finished (the rest of X's
// right half freed, the separator inserted, end). No snapshot is taken
// while a split holds a freeze (package rsm), so replaying the log rebuilds the
// freeze and the list of detached nodes, which live in the trees' memory.
//
// # Remote splits (paper §2.2: "The server copies the nodes in X_right to
// a new local or remote meganode asynchronously")
//
// Options.SplitPlacement chooses where Y goes (remote.go): PlaceAuto is
// the paper's footnote ("Cell favors remote meganodes when few local
// meganodes have been used, and local meganodes otherwise"): while this
// server holds fewer than Options.SplitRemoteBelow meganodes, Y goes to
// the live server holding the fewest, if that is fewer than ours; a region
// with no free slot places remotely in any mode but PlaceLocal. The
// source (X's server) then drives the target (Y's) with the
// server-to-server ops of wire/split.go, each side logging its own steps:
//
//  1. SplitBegin: the target formats Y (target begin record), frozen
//     whole, with bounds [sep, X.max), X's level and X's right link.
//  2. start record here: X frozen at sep, naming Y in the other region.
//  3. SplitAppend batches: X's frozen leaf entries with copies of their
//     values (blink.FrozenRecords), written into Y as new records of the
//     target's region (target append records); the reply carries Y's
//     root.
//  4. link record (carrying Y's root) and free records: as local, but
//     FreeRight also frees X's copies of the moved records; the last one
//     thaws X.
//  5. SplitEnd commit: the target thaws Y (target commit record) and
//     wakes the writes that waited for it. Y is thawed only after X's old
//     right half is invalid, so no reader can see an old value after a
//     newer one was acknowledged in Y.
//  6. the separator goes up wherever the parent is: searched from the
//     root through local meganodes, then InsertChild at the server the
//     search leads to (it answers Next when the level goes on elsewhere,
//     NeedsRetry while that parent splits, and asks its own split loop to
//     split it when full). A root-level split grows the root by walking
//     the level along right links, local headers or Meganode calls, and
//     the root record lists the entries it found.
//
// A failure before the link aborts both sides (abort record here,
// SplitEnd without commit there: Y and its records freed). Handlers never
// call other servers and never take splitMu, so servers splitting into
// each other cannot deadlock; only split loops wait for peers. The
// server-to-server ops are not authenticated yet (TLS and peer identity
// are a later issue): they refuse anything that does not match a split in
// progress, but a hostile client on the network can still start one.
//
// Server.Check verifies the whole tree of meganodes at rest: each
// meganode, the right links along every level (blink.CheckLinks), the
// parents' entries, and that no meganode is left out. Meganodes on other
// servers are skipped (cellctl check verifies the cluster).
//
// # Writes and concurrency
//
// Every write to the region is a record (server/rsm/record.go) proposed to the
// region's raft group and applied by its state machine (package rsm, adapted to raft in fsm.go) in log order under
// applyMu: puts, deletes, the separators of meganode splits, every step
// of a split, the region's layout and the root's making. A worker that
// proposes a client's write does not wait for the log's sync: the write's
// outcome answers the request from a goroutine of its own (propose.go),
// so writes in flight together share one sync. Reads never take applyMu:
// blink's readers are lock-free and the meganode table is an immutable
// snapshot behind an atomic pointer.
//
// Locking order: Server.lifecycle < Server.mu; Server.splitMu <
// replica.applyMu < replica.megaMu < meganode.Region.mu <
// meganode.Extents.mu < a blink tree's writer lock.
//
// # Coordinator
//
// Every server campaigns in the region table's coordinator election
// (regiontable.Store.Campaign) for as long as it runs (coordinator.go).
// The elected one logs it, sets cell_coordinator to 1 and watches the
// table: a region whose host has not been a live member for a second
// (regionDownGrace) is logged once as unavailable, once more when its host
// is back, and counted in cell_regions_unavailable. It also repairs
// (repair.go): the replicas of a server missing longer than
// Options.DeadAfter, or marked draining, are moved by the regions' hosts
// onto live servers, and leaderships are spread every
// Options.BalanceInterval. It writes how long it has counted each missing
// server into the table (regiontable.Store.MarkMissing), so that the next
// coordinator, or any server that starts, goes on from that count. When its leadership
// ends (the session lease was lost, e.g. etcd was unreachable for longer
// than the TTL) it stops, sets both gauges to 0 and campaigns again;
// Close resigns, so that the next server takes over at once.
// Server.IsCoordinator tells whether this server leads now.
//
// # Metrics
//
// NewMetrics registers the server's Prometheus metrics with a Registerer
// (no globals); metrics.go lists them. MetricsListen serves /metrics,
// /debug/pprof/, /healthz (200 "ok", or 503 once the log latched a failed
// write or sync or the server reported a failure that stops it) and
// /readyz (200 "ok" once Start finished and the server serves every
// region whose raft group it leads; 503 with the reason otherwise).
//
// # Files outside the data directory
//
// Region files live in DataDir only with Hugepages off; otherwise in a
// hugetlbfs mount or ShmDir (/dev/shm), named after DataDir's absolute
// path. Close removes them and the shm registration table; a start
// removes those a crash left; Wipe deletes a stopped server's data
// directory with its region files, also once the directory is gone.
package server
