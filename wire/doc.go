// Package wire is Cell's RPC protocol: a compact binary framed protocol
// over TCP between clients and servers (docs/design.md §5). It defines the frame
// header, op and status codes, the message bodies of every op, a client
// connection that multiplexes concurrent calls (Conn), and the server-side
// pieces (Reader, ReplyWriter).
//
// # Frames
//
// A connection carries frames in both directions. Every frame is a 32-byte
// header followed by a body; integers are little-endian at fixed offsets
// (encoding/binary, never a cast struct):
//
//	0               4       5       6       7       8
//	+---------------+-------+-------+-------+-------+
//	|  length u32   | magic |version|  op   | flags |
//	+---------------+-------+-------+-------+-------+
//	8                                               16
//	+-----------------------------------------------+
//	|               request id u64                  |
//	+-------+-------+---------------+---------------+---------------+
//	16      18      20              24              28              32
//	|status |  rsv  | queue ns u32  | service ns u32| budget µs u32 |
//	+-------+-------+---------------+---------------+---------------+
//	32: body, length-32 bytes
//
// The fields:
//
//   - length: the whole frame's size, header included (so >= 32).
//   - magic: 0xCE. version: 1 (Version).
//   - op: the operation (Op); a reply carries its request's op.
//   - flags: bit 0 FlagReply, set on every server reply; bit 1 FlagRetry,
//     on a Put or Delete sent again after its first attempt's outcome was
//     lost (the server applies it only if it can prove the first attempt
//     was not applied, else answers Unverifiable); other bits zero.
//   - request id: chosen by the client, unique among its requests in
//     flight on the connection (Conn counts from 1); echoed by the reply.
//   - status: the outcome (Status), in replies; zero in requests.
//   - rsv: zero.
//   - queue ns, service ns: in every reply, the time the request waited in
//     the server before a worker took it, and the time the worker spent on
//     it, in nanoseconds, saturating at 2^32-1 (about 4.29 s; a request
//     queued longer than that has other problems). Nanoseconds because a
//     server-side search hop takes single microseconds. The client's
//     selector subtracts both from the measured latency to separate network
//     delay from server queueing. Zero in requests.
//   - budget µs: in requests, how long the caller was still willing to wait
//     when it sent the request (its context's deadline), in microseconds,
//     rounded up and saturating; zero means no deadline. Relative, because
//     clocks differ between machines. A server may drop a request whose
//     budget has passed since it read it (StatusExpired: not executed).
//     Zero in replies.
//
// Bytes 0..15 keep their meaning in every version, so a server can name the
// request it rejects with StatusBadVersion. The golden file
// testdata/frames.golden pins the layout of the header and of every body.
//
// # Ops
//
// Op codes (one byte):
//
//	0x01 Ping       body echoed back
//	0x02 Metadata   MetadataRequest  -> MetadataReply
//	0x10 Search     SearchRequest    -> SearchReply    (one meganode hop)
//	0x11 Get        GetRequest       -> GetReply       (or NotFound)
//	0x12 Contains   GetRequest       -> ContainsReply
//	0x13 Range      RangeRequest     -> RangeReply
//	0x14 NodeDump   NodeDumpRequest  -> NodeDumpReply
//	0x15 Check      CheckRequest     -> CheckReply     (invariant violations)
//	0x20 Put        PutRequest       -> empty
//	0x21 Delete     DeleteRequest    -> empty          (or NotFound)
//	0x30 SplitBegin  SplitBeginRequest  -> SplitBeginReply   (server to server:
//	0x31 SplitAppend SplitAppendRequest -> SplitAppendReply   a remote meganode
//	0x32 SplitEnd    SplitEndRequest    -> empty              split, split.go)
//	0x33 InsertChild InsertChildRequest -> InsertChildReply
//	0x34 Meganode    MeganodeRequest    -> MeganodeReply
//	0x35-0x3f       reserved: meganode split and migration
//	0x40-0x5f       reserved: raft transport
//	0x60-0x6f       reserved: one-sided reads (the software rdma provider
//	                may keep its own framing instead)
//	0xc0-0xff       extension ops: passed through by the frame layer
//
// Any other op is unknown: the receiver reads and drops the body, and a
// server answers StatusUnknownOp.
//
// # Statuses
//
// Status codes (u16), each with a sentinel error (errors.go):
//
//	 0 OK              -
//	 1 NotFound        ErrNotFound
//	 2 KeyTooLarge     ErrKeyTooLarge
//	 3 ValueTooLarge   ErrValueTooLarge
//	 4 EmptyKey        ErrEmptyKey
//	 5 BadRequest      ErrBadRequest (and ErrMalformed bodies)
//	 6 FrameTooLarge   ErrFrameTooLarge
//	 7 UnknownOp       ErrUnknownOp
//	 8 BadVersion      ErrBadVersion
//	 9 WrongServer     ErrWrongServer    (redirect: ErrorReply.Leader)
//	10 StaleEpoch      ErrStaleEpoch     (ErrorReply.Epoch is current)
//	11 NeedsRetry      ErrNeedsRetry     (not executed)
//	12 Unavailable     ErrUnavailable    (not executed)
//	13 Internal        ErrInternal
//	14 UnknownRegion   ErrUnknownRegion
//	15 OutOfBounds     ErrOutOfBounds
//	16 KeyOutOfRange   ErrKeyOutOfRange  (restart from the root)
//	17 OutcomeUnknown  ErrOutcomeUnknown (a write may have been applied)
//	18 Expired         ErrExpired        (budget ran out; not executed)
//	19 Overloaded      ErrOverloaded     (queue full; not executed)
//	20 PermissionDenied ErrPermissionDenied (the peer's certificate does
//	                   not allow the op; not executed)
//	21 Unverifiable    ErrUnverifiable   (a retried write whose first
//	                   attempt may have applied, or a write whose
//	                   sequence its region's table passed; not executed)
//	22 NotVersioned    ErrNotVersioned   (a conditional write to a region
//	                   without versions yet; not executed, retryable)
//	23 TxnSpansRegions ErrTxnSpansRegions (a transaction with keys
//	                   outside its region; not executed)
//
// A non-OK reply's body is empty or an ErrorReply (region, epoch, message,
// leader address); the client returns the sentinel or a *StatusError that
// unwraps to it, so callers test with errors.Is.
//
// # Bodies
//
// Each op's request and reply body is a Message; its layout is drawn on
// its type. Bodies are sequences of little-endian integers and byte
// strings prefixed by a u32 length, with a canonical encoding (decoders
// reject trailing bytes, unknown flag bits and bools other than 0/1).
// Key requests start with the meganode to start at (a blink.Ptr, 0 for the
// root) and the epoch of its region as the client knows it (0: unchecked).
// Writes carry a client id and sequence number for at-most-once
// application (docs/design.md §9).
//
// Decoding does not allocate (except the strings of MetadataReply and
// CheckReply, and list growth): byte slices alias the frame's body, which belongs to the Frame
// (see Frame for how long it lives).
//
// # Limits
//
//   - Frame size: Options.MaxFrameSize, header included, default
//     DefaultMaxFrameSize = 4 MiB + 32, checked by both ends. A sender
//     refuses a larger frame (ErrFrameTooLarge, nothing sent); a receiver
//     skips its body and stays in sync (a server answers
//     StatusFrameTooLarge, a client fails that one call).
//   - Keys: on the wire up to the frame size; the server enforces
//     blink.MaxKeySize(nodeSize) (128 bytes with 1 KiB nodes) with
//     StatusKeyTooLarge, and rejects the empty key with StatusEmptyKey.
//   - Values: the server enforces MaxValueSize (1 MiB) with
//     StatusValueTooLarge.
//   - Range, metadata and check replies: the server stops before the
//     frame limit (RangeReply.More and Resume; CheckReply.Count counts
//     the violations left out).
//   - In flight per Conn: Options.MaxInFlight (default 4096).
//   - Memory of a frame being received: a body over 64 KiB is read in
//     64 KiB chunks taken as its bytes arrive (at most 64 KiB beyond what
//     arrived) and joined into one buffer once it is whole, never
//     allocated straight at the length its header claims, so a peer that
//     sends a large header and stalls costs what it sent.
//   - Time: Reader.SetTimeouts bounds the wait for a frame's first byte
//     (ErrIdleTimeout) and for the rest of a frame once it started
//     (ErrFrameTimeout); the server sets both (docs/limits.md).
//
// # Errors and stream synchronisation
//
// A receiver that meets a bad magic byte, a bad version (or non-zero
// reserved bits) or a length shorter than a header has lost the frame
// boundary: it closes the connection (a server may first answer
// StatusBadVersion, naming the request id). A frame that is too large or
// has an unknown op leaves the stream in sync (InSync reports which case
// an error is): the server answers with an error status and reads on. A
// client that fails to decode a reply body returns ErrMalformed for that
// call only.
//
// # Pipelining
//
// Requests are pipelined and a server may answer them in any order,
// matching by request id. Conn is the client side: Call is safe for
// concurrent use, a writer goroutine batches queued requests and flushes
// when the queue runs empty (a call made one at a time, when the writer
// is idle, on a plain socket, goes out at once from the caller with a
// non-blocking write), a reader goroutine dispatches replies by id.
// A call whose context ends stops waiting at once and its late reply is
// dropped. When the connection fails, pending calls fail with *ConnError,
// whose Sent field tells whether the request may have reached the server
// (unknown outcome for writes) or certainly did not. On the server, Reader
// reads frames without allocating, and ReplyWriter lets worker goroutines
// answer out of order without blocking on the socket.
//
// # TLS
//
// Frames run unchanged over TLS: Dial with Options.TLS does the handshake
// (bounded by its context; a failure wraps ErrHandshake, nothing sent)
// and confirms with a Ping a TLS 1.3 connection whose server asked for a
// client certificate, since such a server refuses the certificate only
// after the client's handshake ended. A server refuses a plain TCP
// connection to its TLS port with a refusal frame of status
// PermissionDenied, and an op the peer's certificate does not allow with
// a PermissionDenied reply (docs/tls.md).
package wire
