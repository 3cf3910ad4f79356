// Package client is Cell's Go client: a goroutine-safe connection to a
// Cell store with Get, GetKV, Put, Delete, Contains, Range, Scan and Close
// (docs/design.md §5).
//
// # Connecting
//
// New connects to the store through the etcd cluster that holds its region
// table (a single-node cellserver embeds one on 127.0.0.1:2379), and
// returns once it has reached a server:
//
//	c, err := client.New(ctx, client.Config{Endpoints: []string{"127.0.0.1:2379"}})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//
// The zero value of every other Config field is its default; a store
// under another table prefix needs Config.EtcdPrefix, and Config.Servers
// (server RPC addresses) or Config.Store (a region table the process has
// already) replace Endpoints. New's ctx bounds the connection only; the
// client follows the store's membership by itself afterwards.
//
// Config.TLS makes every RPC connection TLS (docs/tls.md), presenting the
// configuration's client certificate: its role decides what the servers
// let the client do, and an operation it does not allow fails with
// ErrPermissionDenied (as does plain TCP to a TLS port). A handshake that
// fails is a dial error: nothing was sent, so no write ends
// ErrOutcomeUnknown for it. The region table in etcd and the one-sided
// read providers do not use Config.TLS yet.
//
// # Reading and writing
//
// Keys are non-empty byte strings up to the store's limit (128 bytes with
// the default 1 KiB nodes), sorted bytewise; values are byte strings of up
// to 1 MiB.
//
//	err = c.Put(ctx, []byte("user/ada"), []byte("Lovelace"))
//	v, err := c.Get(ctx, []byte("user/ada"))      // a new slice, the caller's
//	ok, err := c.Contains(ctx, []byte("user/ada")) // no value fetched
//	err = c.Delete(ctx, []byte("user/ada"))
//
// Every operation takes a context: its deadline bounds the operation,
// retries included, and its cancellation stops it. Put and Delete copy
// their arguments before sending them; Get's value (GetAppend's dst
// aside) is a new slice.
//
// # Versions
//
// Every key carries a version (docs/transactions.md §2): GetKV returns it
// with the value, and Range and Scan with RangeOptions.Versions.
//
//	kv, err := c.GetKV(ctx, []byte("user/ada")) // kv.Value, kv.Version
//
// Per key, versions strictly increase with every put, also across a
// delete and a put again, restarts, failover and meganode splits that move
// the key to another server, so a (key, version) pair names one content.
// Versions of different keys are not ordered. A key of a region written
// before versions existed reads as version 0 until the region's leader
// starts them (once every server of its group runs code that knows them),
// then as that region's legacy version until its next put.
//
// # Conditional writes
//
// PutIf and DeleteIf write one key only if a condition on its version or
// value holds, the test and the write one step of the key's region:
//
//	v, err := c.PutIf(ctx, key, val, client.IfAbsent())   // the new version
//	v, err = c.PutIf(ctx, key, val2, client.IfVersion(v)) // compare-and-set
//	err = c.DeleteIf(ctx, key, client.IfValue(val2))
//	var cf *client.ConditionFailedError                  // errors.Is(err, client.ErrConditionFailed)
//	if errors.As(err, &cf) { _ = cf.Version /* the key's current version, 0: absent */ }
//
// A condition that does not hold is a definite answer: nothing changed. A
// conditional write whose answer was lost is retried flagged, as Put is:
// if its first attempt applied, the region answers as then; if not, the
// retry is evaluated afresh (so a value or presence test may hold on the
// retry though it failed before).
//
// # Transactions
//
// A Txn reads and writes keys of one region, serializably
// (docs/transactions.md §4.9): Get and Range record what they saw (each
// key's version, each range's keys and versions), Put and Delete buffer,
// and Commit sends it all as one request that the region validates and
// applies in one record of its log: every write with one version, or
// nothing when something read changed (ErrTxnConflict, a *TxnError with
// the cause "version", "phantom" or "moved"). Client.Txn runs a function
// in a transaction and runs it again on conflicts, with a backoff of 1 ms
// doubling to 100 ms, within ctx's deadline:
//
//	err := c.Txn(ctx, func(ctx context.Context, t *client.Txn) error {
//		a, err := t.Get(ctx, []byte("acct/a"))       // sees t's own buffered writes
//		if err != nil {
//			return err
//		}
//		return t.Put(a.Key, debit(a.Value))            // buffered until the commit
//	})
//
// A transaction's Range needs RangeOptions.Limit. Its keys must be in one
// region: one whose keys are in more than one fails with
// ErrTxnSpansRegions until multi-region transactions are built. A
// read-only transaction's commit validates its reads the same way (one
// record without writes). Limits (ErrTxnTooLarge) are in docs/limits.md.
// Not built yet: If/Then/Else, cellctl txn, multi-region transactions.
//
// # Ranges and scans
//
// Range returns the pairs with start <= key < end (nil bounds are
// unbounded) as a slice, at most RangeOptions.Limit of them, and a key to
// resume at when it stopped at the limit. Scan returns an iterator,
// iter.Seq2[KV, error], that fetches the range a page at a time as the
// loop consumes it, with any failure as its last element's error:
//
//	for kv, err := range c.Scan(ctx, []byte("user/"), nil, client.RangeOptions{Prefix: true}) {
//		if err != nil {
//			return err
//		}
//		use(kv.Key, kv.Value) // the caller's to keep: valid after the loop
//	}
//
// RangeOptions.Prefix makes start a key prefix (end must be nil): the
// keys that begin with it, [prefix, PrefixEnd(prefix)); the empty prefix
// is every key. Reverse gives descending order, KeysOnly leaves values
// out. A range is not a snapshot: each page reads the store as it is when
// fetched.
//
// # Errors
//
// Errors wrap the sentinels of errors.go; test them with errors.Is:
//
//   - ErrNotFound: Get or Delete of a key that is not there (Contains
//     answers false instead).
//   - ErrEmptyKey, ErrKeyTooLarge, ErrValueTooLarge: the arguments; not
//     sent.
//   - ErrOutcomeUnknown: a Put or Delete was sent but its answer was lost
//     (the context ended in flight, the server failed, or a retry of it
//     could not be settled: see Retries below): it may or may not have
//     been applied; read the key to know.
//   - ErrUnavailable: no server holding the data answered within the
//     retries or the context's deadline (the cause is wrapped); the
//     operation was not applied. A context that ends first gives its own
//     error (context.DeadlineExceeded, context.Canceled). When the region
//     table lists no live server for the key's region, the operation
//     fails at once with a *RegionUnavailableError (errors.As) naming the
//     region and its servers; it too matches ErrUnavailable.
//   - regiontable.ErrUnreachable (from New): no etcd endpoint answered
//     within Config.EtcdDialTimeout; the message names each endpoint and
//     what it met ("127.0.0.1:2999: connection refused").
//   - ErrClosed: the client was closed.
//   - ErrCorruption, ErrServer: a bug or damaged data, not a transient
//     state.
//   - ErrInvalidConfig: from New, for a Config that Validate rejects.
//
// Transient failures (a server restarting, a region moving to another
// server, a split under way, a torn one-sided read) are retried inside the
// operation, within Config.MaxRetries and the context's deadline (see
// "Consistency of one-sided reads and retries"), and cost latency, not
// errors.
//
// # Closing and concurrency
//
// A Client is safe for concurrent use by any number of goroutines, and
// is meant to be shared: it holds the connections (pipelined: concurrent
// operations share them), the caches and the selector's measurements,
// which are worth keeping. Make one per process and store, and Close it
// when done: Close fails operations in flight (ErrClosed, or
// ErrOutcomeUnknown for writes already sent) and later ones. A Scan
// iterator may be ranged over by several goroutines at once, each range a
// scan of its own.
//
// # How it works
//
// The rest of this comment describes the client's internals. It follows
// "Balancing CPU and Network in the Cell Distributed B-Tree Store" (USENIX
// ATC '16): searches go meganode by meganode, each hop either server-side
// or client-side as the locality selector chooses, through two caches.
//
// # Finding the store
//
// New finds the servers in the region table (package regiontable: in etcd
// at Config.Endpoints, or a Config.Store): the live members' RPC
// addresses, the root pointer, and each region's remote keys, one per
// one-sided provider. Or it takes server addresses directly
// (Config.Servers). It asks each server for its metadata: node and
// meganode size, the root meganode, the regions it hosts and their epochs
// and read endpoints. That is the topology, an immutable snapshot replaced
// as a whole by a refresh: every RefreshInterval, whenever the table's
// watch reports a change, and when an operation meets a redirect, an
// unknown region, a failed one-sided read or a dead connection. A
// WrongServer reply's leader is asked too from then on, and the request
// goes there at once.
//
// Connecting is bounded by the dial timeouts on their own, whatever the
// context allows: New with a context without deadline fails after
// Config.EtcdDialTimeout when etcd does not answer, with an error naming
// each endpoint and what it met (regiontable.ErrUnreachable: "no
// endpoint answered within 5s: 127.0.0.1:2379: connection refused"),
// and each read of the region table is bounded by it too.
//
// Each server has ConnsPerServer pipelined wire connections (any number of
// operations in flight share them) and one estimator in the selector: a
// "server connection" in the paper's sense.
//
// # Searching (paper §2.2, §2.3, §2.5)
//
// A search starts at the deepest meganode the path cache knows to cover
// the key, or at the root, and hops:
//
//   - The selector (locality.Selector, one Estimator per server) chooses
//     the method, unless the meganode's region cannot be read one-sided
//     with the configured provider (then server-side).
//   - Server-side: one Search RPC; the server answers with the leaf
//     result (the value too, for Get) or the next meganode, and describes
//     the meganode (level, height, range) for the path cache. The round
//     trip and the server's queue and service times feed ObserveServer,
//     the height ObserveHeight.
//   - Client-side: read the meganode header (one node; skipped when the
//     path cache knows the local root) with blink.DecodeHeader, then copy
//     nodes from the local root down with one-sided reads, check each with
//     blink.CheckCopy and step with blink.View.StepFor, the rule the server
//     applies. Every read's latency feeds the selector's l_r (a hop's
//     reads in one ObserveReadsAt at its end; observe.go), the header's
//     height ObserveHeight. At an extent leaf the record is fetched (the
//     length from the leaf entry, rounded up to 8) and checked with
//     blink.DecodeExtent against the entry's CRC, and its key against the
//     searched key; at a leaf of an inner meganode the entry's child is
//     the next hop.
//
// Writes are server-side (paper §2.1): the write goes to the server of the
// key's leaf meganode, found in the path cache, or by a search (whose hops
// the selector routes as usual), or, with a single server, left to it.
//
// Ranges go page by page (Config.RangePageSize pairs). The estimator of
// the server holding a page's first key chooses how, by the page rule
// (locality's "Range pages": not the hop rule, whose terms do not price a
// page): each estimator keeps the moving average cost per pair returned of
// the server-side and of the client-side pages this client measured (a
// page's latency, end to end, over its pairs, at least 1), and the
// cheaper one is chosen, the other explored now and then; the modes force
// the method as they do for hops (ratio=P on the pages' own credit).
// Reverse pages, and pages of regions not readable one-sided with the
// configured provider, are server-side without a decision. Decisions
// show in Stats.Selector.PageDecisions and in the
// selector_decisions_total metric with op="range" (op="search" for
// hops). Server-side, a page is a Range call (the server stops at the
// limit, the frame size or where the range continues on another server,
// and says where to resume); client-side
// (forward pages only: B-link trees have no left links), a client-side
// search for the leaf of the first key, then leaves copied along their
// right links, the records of each leaf fetched together in vector reads
// (one request per leaf over tcp: rdma Caps.VectorReads) and each checked
// against its entry's CRC and key. At a meganode's edge, where a leaf's
// right link is nil or leads to the root of the meganode a split made,
// the page searches again from the leaf's max key. A record that changed
// under the scan makes it copy the leaf again from that key.
//
// # Consistency of one-sided reads and retries
//
// A copy is used only when blink.CheckCopy accepts it (docs/design.md §3). What
// happens otherwise, by cause (each counted in Stats.Retries and the
// retries_total metric):
//
//   - torn: head and tail versions differ or are odd; re-read the node.
//   - invalid: the node or meganode is free or was invalidated by a split;
//     restart the hop from its meganode header (after two such restarts,
//     the search from the root).
//   - out-of-range: the key is below the node's min (the node was reused);
//     restart as for invalid. A key at or above the max is not an error:
//     follow the right link, also out of the meganode.
//   - crc: the record changed after its leaf was copied; re-read the leaf
//     and the record.
//   - stale-cache: a cached node led nowhere; drop it, read it fresh.
//   - conn-lost, read-failed: a connection or a one-sided read failed; the
//     rest of the operation goes server-side after a topology refresh.
//   - server-busy, redirect, restart: the server said NeedsRetry,
//     Unavailable, Overloaded or Expired (retry after a backoff),
//     WrongServer, StaleEpoch or UnknownRegion (refresh), KeyOutOfRange or
//     OutOfBounds (drop the cached start point, restart from the root).
//   - seq-passed: the server answered Unverifiable to a write sent once
//     with nothing lost (its region forgot sequences past it, or the
//     client whole): send it again at once with a new client id and
//     sequence number.
//
// Retries after errors stop at Config.MaxRetries (cheap traversal
// restarts and torn re-reads at Config.MaxRestarts) or when the caller's
// context ends, whichever comes first; the operation then fails with
// ErrUnavailable wrapping the last cause, or with the context's error.
// One exception: an operation whose region may just have no serving
// leader (a lost connection, an Unavailable, Overloaded or NeedsRetry
// answer, a redirect) goes on past MaxRetries, with the longest backoff,
// until its context's deadline when it has one (docs/design.md §9: "a key whose
// region has no leader right now waits for one within the caller's
// deadline"), so that a restart or a failover costs latency, not errors;
// it then fails with ErrUnavailable wrapping the deadline. Each operation
// waits on its own: others' keys are not slowed. Config.FailFast turns
// the wait off.
//
// A region the region table shows with no live server at all (neither its
// host nor any replica is a live member: their leases are gone) is not in
// transition but down: an operation on it (or a range crossing it) fails
// at once, after its first failed attempt and without waiting for its
// deadline, with a *RegionUnavailableError naming the region and its
// servers (errors.Is ErrUnavailable), so that an outage is reported as
// such, at once, and does not hold callers until their deadlines. The
// exception is a restart: a region this client saw served, and then saw
// lose its last live server less than Config.RestartGrace (10 s) ago, is
// waited for as above until the grace ends. A client that never saw the
// region served (a new process, a cellctl command) does not wait, and
// neither does a FailFast one. A region whose host is gone but one of
// whose replicas lives is a leader in transition, waited for as above.
// Only a region table tells: with Config.Servers the client waits.
//
// A server whose connection broke or whose dial failed is suspect for
// 10 s: dials to it give up after 500 ms instead of Config.DialTimeout (a
// dead host's address often does not refuse a connection, and a dial to
// it waits for ARP or SYN retries, 3 s on a local network, while its
// regions are served elsewhere), and the callers queued behind a failed
// dial fail with it instead of each dialling in turn. A server the table
// shows hosting no region, or whose region moved, is pinged on its open
// connections; if it does not answer within 500 ms they are closed, so
// that requests waiting on a paused or cut-off server are retried on the
// new host instead of waiting for their deadlines.
// Writes carry a client id and a sequence number for the servers'
// at-most-once application (docs/design.md §9); a retry keeps them (but for
// the seq-passed retry below). A write is
// retried as it was when the error proves it was not executed. When its
// outcome was lost (the connection failed after sending, or the server
// said OutcomeUnknown: its leadership ended under the write), it is sent
// again within the context's deadline flagged as a retry
// (wire.FlagRetry): the key's region answers as the first attempt did if
// that applied, applies it if its at-most-once table proves the first
// attempt did not, and otherwise answers Unverifiable (the table forgot
// the client, or the key moved in from another region since), which ends
// the write with ErrOutcomeUnknown. So does a context that ends, the
// client closing, or a server error (Internal) while the outcome is open
// (docs/durability.md, "At most once"). A first attempt is refused
// Unverifiable too when its sequence is below what the region's table
// forgot of the client (it arrived after the client's window moved past
// it: its retry may have applied), or when the table forgot the client
// whole (4,096 other clients wrote there since its last write); nothing
// was lost then, so the write is sent again under a new client id (the
// old one stays refused there) with a new sequence number (the
// seq-passed retry).
//
// # Caches (paper §3)
//
// The node cache (cache.go) keeps validated node copies, LRU, bounded in
// bytes (Config.NodeCacheBytes, 128 MiB), only of nodes at least
// Config.NodeCacheMinLevel (4) levels above the leaves. Within a leaf
// meganode a node's local level is its height above the leaves; a node of
// an inner meganode at global level g counts local level + g·m, m being
// the selector's running average meganode height. Extent leaves are never
// cached: a stale leaf would give a stale value.
//
// The path cache (pathcache.go) keeps meganodes (header pointer, level,
// height, key range, and the local root once a client-side hop read the
// header), LRU, Config.PathCacheEntries (4096), learnt from Search replies
// and header reads; an operation starts at the deepest one covering its
// key.
//
// Both are advisory. A cached node that does not cover the key is dropped
// and read fresh; a node reached through a cached node or a cached root
// that turns out invalid or out of range drops that source; following a
// right link drops the cached node (or cached local root) the traversal
// came through, and a right link out of a meganode drops the meganode's
// path entry (its range shrank in a split) — paper §2.3: "if they follow a
// right-link pointer, they invalidate any information cached from the
// parent node". A path entry whose meganode header is invalid, of the
// wrong level or starts above the key, or that a server answers with
// KeyOutOfRange, is dropped and the search restarts from the root. After
// bypassAfter (8) restarts an operation ignores both caches.
//
// # Providers
//
// Config.Provider picks the one-sided reader per region: "shm" maps the
// region file read-only (rdma.SHMClient; the region's server must run on
// this host, same host identity), "tcp" reads through the server's tcp
// responder (rdma.TCPClient), "auto" takes shm when it can and tcp
// otherwise. A server advertises a region's remote keys in its metadata:
// RegionInfo.ReadAddr is the tcp responder's address (with RemoteKey), or
// the JSON form of one rdma.RemoteKey or of a list of them; etcd's region
// records may add more (their ReadKey field).
//
// Reads over shm are loads from mapped memory: client-side work over shm
// never blocks, and with more goroutines doing it than the process has Ps
// the scheduler polls the network only every 10 ms, so the replies of
// server-side operations wait that long in their sockets. Config.CPUSlots
// (slots.go) bounds how many goroutines do it at once while a server-side
// call waits, across every client sharing the same CPUSlots; fewer than
// GOMAXPROCS leaves a P to poll. Off by default: it trades client-side
// throughput for the latency of server-side operations. The time a
// client-side hop or range page waits for its slot counts in what the
// selector learns of client-side work (a hop's wait is added to its first
// read's latency, a page is timed from before its slot), so that slots
// too few for the load turn hops server-side.
//
// # Memory
//
// The client-side get path reuses pooled buffers (a node buffer, a record
// buffer, a request buffer per operation) and does not allocate with
// GetAppend and enough room in dst; cached nodes are immutable copies,
// handed out without copying.
//
// # Error wrapping
//
// errors.go lists the sentinels. An error that came from a server matches
// both the client's sentinel and the wire package's (ErrNotFound and
// wire.ErrNotFound, ...); a connection failure matches its wire or rdma
// cause too.
//
// # Locking notes
//
// Client.mu (servers by address) and the caches' mutexes are leaves. A
// topology refresh runs under refreshSem (a channel, so waiting honours
// contexts) and takes Client.mu only to look servers up.
package client
