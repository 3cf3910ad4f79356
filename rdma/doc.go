// Package rdma is Cell's one-sided read layer (docs/design.md §6): a client copies
// bytes straight out of a server's registered region without the server's
// tree code taking part. Client-side search (paper §2.3) is built on it: the
// client package reads B-link nodes with it, checks each copy with
// blink.CheckCopy (head == tail version, even, valid), and reads extents,
// checked by their CRC.
//
// # Interface
//
// A provider has two sides. The server side (Server) registers regions:
//
//	rk, err := srv.Register(region) // RemoteKey: key + where the region is
//	...                             // publish rk in the region table
//	err = srv.Deregister(rk.Key)    // revoke at once (lost read lease)
//
// The client side (Client) reads with the RemoteKey it got from the region
// table:
//
//	err := cl.Read(ctx, &rk, off, dst)          // one range
//	err = cl.ReadV(ctx, &rk, []rdma.Segment{...}) // several ranges, one request
//
// and, for several reads in flight (range scans, multi-get), posts ops to a
// completion queue and takes their completions as they come, in the style
// of libfabric's fi_read and fi_cq_read:
//
//	cq := rdma.NewCQ(64)
//	for i := range ops {
//		ops[i].Prepare(&rk, offs[i], bufs[i]) // or PrepareV for a vector
//		if err := cl.Post(ctx, &ops[i], cq); err != nil { ... }
//	}
//	for range ops {
//		op, err := cq.Wait(ctx) // or cq.Poll()
//		... op.Err(), op.Tag ...
//	}
//
// ReadAll does post-and-wait-all in one call. A RemoteKey names its
// provider; NewServer and NewClient pick a provider by name from
// configuration ("tcp", "shm", and "fabric" in builds with the libfabric
// tag; Providers lists them).
//
// Every range must have an offset and a length that are multiples of 8 and
// lie inside the registered region; a request reads at most
// Caps.MaxReadLen bytes in at most Caps.MaxSegments ranges. Violations fail
// with ErrMisaligned, ErrOutOfBounds, ErrTooLarge and ErrTooManySegments,
// checked by the client before sending and again by the provider's server
// side (or, for shm, against the mapped file), which never trusts the
// client's copy of the region's length. An unknown key fails with
// ErrBadKey, a revoked one with ErrRevoked. All errors are in errors.go,
// test them with errors.Is.
//
// # Ownership
//
// A destination buffer belongs to the provider from the call that starts a
// read (Read, ReadV, Post) until that read completes: Read or ReadV returns,
// or the op's completion is taken from its CQ (Wait, Poll). The caller must
// not touch or free it meanwhile. After completion the provider never writes
// it again, even when the read failed or its context ended: a reply that
// arrives after a cancellation is read into nothing. This is what lets
// destinations live outside the Go heap (a registered landing area of a
// future libfabric provider, C memory, a mapping): nothing keeps a pointer to
// them past completion. Destinations need no alignment. The Op, its Remote
// and its Segs belong to the provider in the same way.
//
// # Consistency of a copy
//
// docs/design.md §3: node memory is read as 8-byte atomic loads in increasing
// address order, so a copy sees a node's head version before any byte of its
// body and the tail version after all of them; a copy that raced with the
// writer has mismatched or odd versions and is rejected by
// blink.CheckCopy. Caps.OrderedReads states that a provider copies this way
// (the paper relies on NICs doing the same, footnote 3). Both providers here
// copy with internal/atomicmem.Load/LoadTo. The copy is not a snapshot of
// the region as a whole: a read of several nodes may see each at a
// different moment, and each is judged on its own.
//
// # Revocation
//
// Deregister is the moment a server stops vouching for a region (docs/design.md §9:
// it lost the region's read lease). When Deregister returns, no read of the
// key succeeds any more, including one whose copy was in progress while it
// ran: providers check the registration again after copying, and fail the
// read with ErrRevoked if it was revoked meanwhile. A read that succeeded
// was therefore copied entirely while the registration was live. The tcp
// responder also waits, inside Deregister, for copies in progress to end, so
// after Deregister the caller may close the region's memory.
//
// # Capabilities
//
//	                      tcp     shm     fabric
//	OrderedReads          yes     yes     shm, tcp, verbs (not efa, cxi)
//	VectorReads           yes     yes     yes   (one batch of reads)
//	SparesServerCPU       no      yes     verbs, efa, cxi (a NIC serves)
//	SameHostOnly          no      yes     no    (fabric shm: yes in fact)
//	InOrderCompletion     no      yes     no
//	                                            (shm completes inside Post)
//
// # The tcp provider
//
// A passive responder (TCPResponder, started by Listen) on its own TCP port
// serves each connection on its own goroutine: it reads requests, looks the
// key up in an immutable map behind an atomic pointer (no lock), checks the
// ranges, copies them with 8-byte atomic loads into its reply buffer, and
// writes the replies. It runs no tree code. Requests are pipelined: a client
// may have any number in flight on a connection. The responder answers them
// in order and writes all replies ready in one write when no further
// request is waiting in its read buffer; clients match replies to requests
// by id and do not rely on the order. Malformed frames close the connection,
// never the responder. Counters for metrics are in Stats (ResponderStats).
//
// The client (TCPClient) keeps ConnsPerEndpoint connections per responder
// address (default 2), spreads reads over them round-robin, and batches the
// requests posted concurrently into one write. A broken connection fails
// its reads in flight with ErrDisconnected and is redialed on next use.
//
// Frames are little-endian at fixed offsets (tcp_frame.go); these layouts
// are the provider's wire format. A request:
//
//	0               4       5       6       7       8
//	+---------------+-------+-------+-------+-------+
//	|  length u32   | magic |version|  op   | flags |   magic 0xCD, version 1,
//	+---------------+-------+-------+-------+-------+   op 0x01 (read), flags 0
//	8                                               16
//	|               request id u64                  |   chosen by the client,
//	16                                              24  echoed by the reply
//	|               key u64                         |
//	24              28              30              32
//	|  region u32   |   nseg u16    |   rsv u16 (0) |   nseg >= 1
//	32 + 16*i, for each of nseg segments:
//	|               offset u64                      |
//	|  length u32   |   rsv u32 (0) |
//
// length is the whole frame: exactly 32 + 16*nseg. A reply:
//
//	0               4       5       6       7       8
//	+---------------+-------+-------+-------+-------+
//	|  length u32   | magic |version|  op   |status |   op 0x81
//	+---------------+-------+-------+-------+-------+
//	8                                               16
//	|               request id u64                  |
//	16: data, length-16 bytes: every segment's bytes in request order when
//	    status is 0 (ok); none otherwise.
//
// Status codes: 0 ok, 1 bad key (ErrBadKey), 2 revoked (ErrRevoked), 3 out
// of bounds, 4 misaligned, 5 too large, 6 too many segments. A request over
// the responder's limits is answered with a status, not a closed
// connection. A frame with a bad magic, version, op, reserved bit or length
// is malformed: the responder closes the connection (and the client closes
// on a malformed reply).
//
// With TCPOptions.TLS and TCPClientOptions.TLS the same frames travel
// inside TLS. The responder runs each connection's handshake on the
// connection's goroutine, never in the accept loop, within FrameTimeout
// (DefaultTLSHandshakeTimeout without one); a failed or timed-out
// handshake closes that connection and counts in ResponderStats.TLSRefused.
// The client handshakes right after dialling, within DialTimeout and the
// read's context; a failure is an error naming the TLS handshake that
// wraps ErrDisconnected and the tls error. The read path is unchanged but
// for the net.Conn being a *tls.Conn: the same buffered reads and batched
// writes (the tls.Conn seals each batch).
//
// # The shm provider
//
// A client on the server's host maps the region file itself (read-only,
// MAP_SHARED) and copies with the same atomic loads; the server's CPU does
// nothing per read. SHMServer.Register needs a file-backed region (Path; a
// meganode region on /dev/shm, hugetlbfs or a plain file) readable by the
// client's user.
//
// Revocation uses a registration table: a small file the server creates
// (in /dev/shm by default, named cell-rdma-<pid>-<nonce>, flock'ed while
// the server runs, removed by Close) and maps read-write, and clients map
// read-only. A server starting removes the tables of dead processes (a
// pid that is gone, a file no one holds locked) that kill -9 left.
// Each registration owns one 8-byte slot word holding its key; the
// RemoteKey carries the table's path and the slot. Deregister stores the
// key's tombstone (key | 1<<63) into the slot with one atomic store. A
// client loads the slot atomically after every copy, and accepts the copy
// only if the slot still holds its key. Go's atomics are sequentially
// consistent, also between processes sharing the pages, so all loads of
// the copy precede the check: if the key is still there, every byte was
// copied before Deregister's store, and a read that completes after
// Deregister is never returned as valid. Keys are random and never reused,
// so a slot reused by a later registration fails older keys too
// (ErrBadKey; the tombstone, while it lasts, gives ErrRevoked). The client
// also checks the slot before copying, to fail fast.
//
// Leases fence a region without the server's help (SetLease): each slot
// has a second word, a CLOCK_MONOTONIC deadline in nanoseconds (0: none)
// that the server holding the region's raft leadership renews; after
// checking the key, the client accepts the copy only if that deadline had
// not passed (package internal/monotime reads the clock every process on
// the host shares, through the vDSO). A leader that is paused, deposed or
// cut off stops renewing, and its region stops being readable by itself.
// The tcp responder judges its registrations' leases the same way before
// and after each copy. The region file's
// device and inode travel in the RemoteKey: a client never maps a file that
// replaced the registered one at the same path.
//
// Same host: the client must share the server's kernel and file system
// namespace. A RemoteKey carries the server's host identity (HostID: the
// host name and the kernel's boot id, or a value set in the options), and
// the client reads only keys with its own identity (else ErrNotSameHost).
// Knowing which servers share a client's host is left to the caller: the
// region table can carry both a tcp and a shm RemoteKey per region, and the
// client package uses shm for the keys whose Host is its own.
//
// A shm client maps each file once and keeps the mapping until Close; Read
// then allocates nothing. Mapping costs the client address space and page
// tables only. Files must be readable by the client's user (meganode
// creates them 0600, or 0640 and owned by its Options.FileGroup, and
// SHMOptions.FileGroup does the same for the table: run clients as the
// server's user or a user of that group). A region file must
// never shrink while it is registered or mapped by a client: a client
// reading past the end of a shrunk file would die of SIGBUS (meganode never
// shrinks region files).
//
// # The fabric provider
//
// Built only with the build tag libfabric (cgo and libfabric-dev; the
// default build is pure Go and does not list it), in fabric_*.go. It
// reads over libfabric's RDM endpoints, so over any fabric libfabric
// drives: verbs (InfiniBand, RoCE; "verbs;ofi_rxm"), efa, cxi, and the
// software providers tcp ("tcp;ofi_rxm") and shm that run anywhere.
// FabricOptions.Provider and FabricClientOptions.Provider name it; a
// client reads only keys registered with the libfabric provider it uses.
//
// The server (FabricServer) opens one endpoint, registers each region's
// memory with fi_mr_reg (remote read only), honouring the mode bits the
// provider asks for (FI_MR_VIRT_ADDR: reads name virtual addresses, else
// offsets; FI_MR_PROV_KEY: the provider picks the key, else a random one;
// FI_MR_ENDPOINT: bound to the endpoint; FI_MR_LOCAL: the client's
// landing area is registered too; FI_MR_ALLOCATED: regions are mappings,
// allocated), and keeps a registration table in memory it registers for
// remote reads as well: per slot, the key, the lease deadline and the
// registered length (fabric.go has the layout). A RemoteKey carries the
// endpoint's address, the region's and the table's memory keys and base
// addresses, and the server's incarnation in Desc. Registering a region
// again gives a new key and a new memory registration: a RemoteKey is
// never valid for two registrations.
//
// The client (FabricClient) reads a registration's slot once before its
// first read (the server's length then bounds every read, not the
// RemoteKey's), and after every read a check read of the slot, posted
// once the read's data has landed: the read succeeds only if the slot
// still held its key, so, as with shm, a read that overlapped Deregister
// is refused (ErrRevoked), and one whose range passed the registered
// length too (ErrOutOfBounds; software providers do not all check).
// Deregister stores the tombstone before it closes the memory
// registration.
//
// Leases: the slot's lease word is a deadline on the server's
// CLOCK_MONOTONIC, which a client on another host cannot read. Each
// client therefore exchanges clock messages with each server it reads
// (fi_send of a request carrying its address; the server answers with its
// clock and incarnation from its progress goroutine): a reading s of the
// server's clock, taken after the client's time c, bounds the server's
// clock at the client's time t by s + (t-c)(1+ClockDrift). A check read
// that completed at t accepts the read only if that bound is not past the
// lease word it copied; with no exchange yet, the read waits for one
// (within its context). The server's clock running faster than the bound
// allows (ClockDrift, 1000 ppm by default) is the one assumption, beside
// raft's own clock rate margin for the lease. Exchanges repeat every
// SyncInterval while a client reads a leased region; the server's CPU
// answers one per client and interval, not per read.
//
// Reads land in a landing area (mapped memory registered with the
// domain): 8 KiB slots for reads of up to 8 KiB, larger chunks for longer
// ones, and are copied to their destinations once judged; a cancelled
// read's destination is never written, as the Client contract requires,
// even though libfabric cannot cancel the read itself. Post posts an op's
// ranges in one batch (FI_MORE on all but the last) from the caller's
// goroutine; one goroutine per client takes completions in batches of up
// to 64, posts the check reads of all the reads that landed in one batch,
// and posts again what the provider refused with FI_EAGAIN (a full queue,
// a connection being made: the first read of a new server connects
// lazily), until the read's context ends. It polls the completion queue
// for 200µs after its last completion, then waits in it (fi_cq_sread) for
// providers whose wait object wakes on a completion (tcp, verbs), or
// sleeps in growing steps up to 1ms (shm, whose reads progress only
// while the reader polls).
//
// The server's side progresses as its profile says (FabricOptions.
// Progress): "tick" calls the completion queue every ProgressInterval
// (shm, 1ms: a read is the reader's process_vm_readv plus a command the
// target's progress retires; the reader stalls once the target's queue of
// 1024 commands is full); "auto" asks the provider for its own progress
// thread (tcp;ofi_rxm serves reads from it: server CPU per read) and
// waits in the completion queue for clock messages; "conn" leaves reads
// to the NIC and handles connections and clock messages only (verbs,
// efa, cxi).
//
// Failures: a read or check that fails with a transport error fails with
// ErrDisconnected (tcp;ofi_rxm drops the connection of a read with a
// revoked key, so a check that fails after its read failed is tried again
// over a new connection, up to four times, to tell ErrRevoked from a lost
// server). A server that does not answer a read within ReadTimeout (a
// killed shm server never does; tcp;ofi_rxm keeps reconnecting) is given
// up: its reads fail with ErrDisconnected, its address leaves the address
// vector, and reads naming it fail at once for ReadTimeout more. A
// FabricServer closing makes the fabric clients of its own process give
// it up first (libfabric's shm shares a server's memory with clients in
// its process, which the close frees). libfabric's shm backs each
// endpoint with a 16 MiB file in /dev/shm ("<pid>:0:<n>") that a killed
// process leaves: a fabric server or client of shm removes those of dead
// processes when it starts (RemoveStaleFabricSHM).
//
// What software providers leave open: libfabric's shm reads with the
// reader's process_vm_readv and checks neither keys nor bounds (the slot
// checks do); after Deregister, tcp;ofi_rxm may still be sending a reply
// it had started from the region's memory, so a caller should keep a
// region mapped a moment after Deregister (Cell's server keeps replaced
// regions mapped until it stops).
//
// # Trust
//
// Keys and bounds protect correctness, not secrecy: keys are random so
// that a stale or mistaken key fails, not to keep anyone out. Without TLS
// the tcp responder does not authenticate its clients (run it, like Cell's
// RPC port, on a trusted network). With TCPOptions.TLS the bytes read are
// encrypted, and a tls.Config that requires client certificates
// (tls.RequireAndVerifyClientCert; tlsconf's ServerConfig with
// ClientCertAuth) admits only clients with a certificate of its CAs, of
// any role: a client may read what its RemoteKeys name. A shm client can read whatever its user can open:
// file permissions are the only boundary.
//
// # What this hardware can show
//
// The paper's case for client-side search is that an RDMA read costs the
// server's CPU nothing: the NIC serves it. On commodity machines without
// RDMA NICs, the tcp provider keeps the protocol and the client-side
// algorithm honest (same interface, same torn-read handling, same
// revocation) but not the economics: every read still costs the server a
// receive, a copy and a send, i.e. system calls and a scheduler wake-up on
// the server's cores, cheaper than a tree search but not free, and its
// latency is a TCP round trip (tens of microseconds on loopback). The
// selector of docs/design.md §7 will therefore see one-sided reads that compete
// with server-side requests for the same CPUs; measurements taken with the
// tcp provider must say so. Only shm (for clients on the server's host) and
// a real RDMA NIC spare the server's CPU; shm is also the only provider here
// whose reads take well under a microsecond. Caps.SparesServerCPU tells them
// apart.
package rdma
