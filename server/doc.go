// Package server is a Cell server (DESIGN §5): it hosts one region of
// meganodes, answers the wire protocol with a fixed number of tree workers,
// exposes the region to one-sided reads (package rdma), and publishes
// itself in the region table (package regiontable).
//
// # Lifecycle
//
// New validates Options; Start brings the server up; Close (or the end of
// Serve's context) shuts it down gracefully. Start, in order:
//
//  1. locks DataDir (a second server on it fails with ErrDataDirLocked);
//  2. reopens the region the last clean shutdown left, or else discards
//     what an unclean stop left and creates a new region (see Restarts);
//  3. makes sure the cluster has a root meganode: when the region table
//     has no root (or its root pointed into a region of ours that is gone)
//     it formats one leaf meganode covering the whole key space and
//     publishes its pointer with a compare-and-set; the pointer is also
//     stored at offset 0 of the region (DESIGN §4);
//  4. binds the RPC, one-sided (tcp responder) and metrics listeners;
//  5. registers the region with the tcp responder and the shm provider;
//  6. publishes the region's entry (next epoch, file path, remote keys),
//     starts the workers and the accept loop, and last registers the
//     member, under a lease, so that clients find a server that serves.
//
// Close leaves the member list first (clients stop coming), stops accepting
// connections and reading requests, lets the workers finish every request
// already queued and flushes the replies, closes the connections, revokes
// one-sided access, syncs (msync) and closes the region, and writes the
// CLEAN marker.
//
// # Restarts: what survives
//
// There is no write-ahead log yet (DESIGN §9, a later issue), so:
//
//   - After a clean shutdown (Close, SIGTERM to cellserver) the next start
//     reopens the region file as it was: every acknowledged write
//     survives, as long as the file does. A region in /dev/shm or on
//     hugetlbfs (Hugepages auto or on) does not survive a reboot; a plain
//     file in DataDir (Hugepages off) does.
//   - After an unclean stop (crash, kill -9, power loss) the region file
//     may hold half-applied writes, so the server logs a warning and
//     starts EMPTY: it removes the old file, keeps the region ID if the
//     region table still gives it to this server, formats a new root
//     meganode if the cluster's root was in that region, and publishes the
//     region with a higher epoch, so that clients drop what they cached.
//
// The region's epoch grows at every start. The region table itself (in
// etcd: members, regions, root, ID counter) survives as etcd does.
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
//     meganodes, up to the limit or the frame limit; More and Resume say
//     where to go on.
//   - Metadata describes the server, its region (remote key, read address,
//     file path, epoch), its meganodes (range, level, height, fill) and
//     selector hints (workers, queue length, recent mean queueing time,
//     recent mean service time of a search hop).
//   - NodeDump copies bytes of the region with 8-byte atomic loads, as a
//     one-sided read would: any 8-byte aligned range inside the region.
//
// A request for a region this server does not host is answered
// StatusWrongServer with the host's address from the cached region table
// (StatusUnknownRegion when the table does not know the region), and one
// with another epoch StatusStaleEpoch with the current epoch. Tree errors
// map to statuses in errors.go; a full meganode is StatusUnavailable,
// "meganode full (split arrives with issue #4)".
//
// # Writes and concurrency
//
// Every write to the region goes through apply (apply.go), which takes an
// encoded write record and changes memory deterministically under
// applyMu: the place raft's log will sit in front of. Reads never take
// applyMu: blink's readers are lock-free and the meganode table is an
// immutable snapshot behind an atomic pointer.
//
// Locking order: Server.lifecycle < Server.mu; Server.applyMu <
// Server.megaMu < meganode.Region.mu < meganode.Extents.mu < a blink
// tree's writer lock.
//
// # Metrics
//
// NewMetrics registers the server's Prometheus metrics with a Registerer
// (no globals); metrics.go lists them. MetricsListen serves /metrics and
// /debug/pprof/.
package server
