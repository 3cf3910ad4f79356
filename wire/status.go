package wire

import "strconv"

// Status is the outcome of a request, carried in every reply (header bytes
// 16..17; zero in requests). The values are part of the wire format.
//
// A reply with a status other than StatusOK may carry an ErrorReply body
// (detail message, region, epoch, redirect address) or an empty body.
type Status uint16

// Statuses of protocol version 1. Each maps to one sentinel error (see
// Status.Err and StatusOf in errors.go).
const (
	// StatusOK: the request succeeded; the body is the op's reply.
	StatusOK Status = 0
	// StatusNotFound: the key (or node) does not exist.
	StatusNotFound Status = 1
	// StatusKeyTooLarge: the key exceeds the server's MaxKeySize(nodeSize).
	StatusKeyTooLarge Status = 2
	// StatusValueTooLarge: the value exceeds the server's maximum (1 MiB).
	StatusValueTooLarge Status = 3
	// StatusEmptyKey: keys must be at least one byte long.
	StatusEmptyKey Status = 4
	// StatusBadRequest: the request body could not be decoded or breaks a
	// rule of the op. Not retryable.
	StatusBadRequest Status = 5
	// StatusFrameTooLarge: the request frame exceeded the server's maximum
	// frame size; its body was discarded unread.
	StatusFrameTooLarge Status = 6
	// StatusUnknownOp: the server does not implement the op.
	StatusUnknownOp Status = 7
	// StatusBadVersion: the server does not speak the frame's protocol
	// version; it closes the connection after this reply.
	StatusBadVersion Status = 8
	// StatusWrongServer: the region is not served here (or this replica is
	// not its leader). The ErrorReply body may name the leader (Redirect).
	StatusWrongServer Status = 9
	// StatusStaleEpoch: the request's epoch is older than the region's;
	// the ErrorReply body carries the current epoch. Refresh the region
	// table and retry.
	StatusStaleEpoch Status = 10
	// StatusNeedsRetry: a transient condition (meganode split in progress,
	// lock-free reader gave up); retry after a short backoff. Not executed.
	StatusNeedsRetry Status = 11
	// StatusUnavailable: the server cannot serve now (starting, stopping,
	// no read lease). Not executed; retry elsewhere or later.
	StatusUnavailable Status = 12
	// StatusInternal: a server bug or I/O failure. For writes the outcome
	// is unknown unless the server states otherwise.
	StatusInternal Status = 13
	// StatusUnknownRegion: the pointer's region does not exist.
	StatusUnknownRegion Status = 14
	// StatusOutOfBounds: the pointer or length falls outside its region,
	// or does not address a node.
	StatusOutOfBounds Status = 15
	// StatusKeyOutOfRange: the key is outside the key range of the meganode
	// the request started at (below its min key); restart from the root.
	StatusKeyOutOfRange Status = 16
	// StatusOutcomeUnknown: a write may or may not have been applied (raft
	// timeout, leadership lost). Retry only with the same client id and
	// sequence number.
	StatusOutcomeUnknown Status = 17
	// StatusExpired: the request's budget ran out before the server started
	// it; it was not executed.
	StatusExpired Status = 18
	// StatusOverloaded: the server's queue is full; the request was not
	// executed. The selector should prefer client-side search.
	StatusOverloaded Status = 19
	// StatusPermissionDenied: the connection's peer may not run the op
	// (its certificate's role is too low: a client certificate on a
	// server-to-server op), or the port requires TLS and the connection
	// is plain TCP. Not executed; the connection stays usable unless the
	// reply is a refusal frame. Not retryable.
	StatusPermissionDenied Status = 20
	// StatusUnverifiable: a write retried after an unknown outcome
	// (FlagRetry) whose first attempt the region cannot prove was never
	// applied (its at-most-once table forgot the client, or the key moved
	// in from another region since). Not executed; the write's outcome
	// stays unknown. Not retryable. Also the answer to an unflagged write
	// whose sequence is at or below what the table forgot of its client,
	// or whose client the table forgot whole (another attempt of it may
	// have applied): not executed, and, if the client lost no attempt of
	// it, safe to send again under a new client id and sequence number.
	StatusUnverifiable Status = 21
	// StatusNotVersioned: a conditional write to a key whose region has
	// no versions yet (docs/transactions.md §2.6: its leader starts them
	// once every server of its group knows them). Not executed;
	// retryable: a region gets its versions within a second of having a
	// leader of this release and up-to-date replicas.
	StatusNotVersioned Status = 22
	// StatusTxnSpansRegions: a transaction (OpTxn) names a key outside
	// the region of the meganode it was sent to; multi-region
	// transactions are not built yet (docs/transactions.md §13 step 6).
	// Not executed. The client locates its keys again: when they are in
	// one region after all it retries, else it fails the transaction.
	StatusTxnSpansRegions Status = 23
)

var statusNames = [...]string{
	StatusOK:             "OK",
	StatusNotFound:       "NotFound",
	StatusKeyTooLarge:    "KeyTooLarge",
	StatusValueTooLarge:  "ValueTooLarge",
	StatusEmptyKey:       "EmptyKey",
	StatusBadRequest:     "BadRequest",
	StatusFrameTooLarge:  "FrameTooLarge",
	StatusUnknownOp:      "UnknownOp",
	StatusBadVersion:     "BadVersion",
	StatusWrongServer:    "WrongServer",
	StatusStaleEpoch:     "StaleEpoch",
	StatusNeedsRetry:     "NeedsRetry",
	StatusUnavailable:    "Unavailable",
	StatusInternal:       "Internal",
	StatusUnknownRegion:  "UnknownRegion",
	StatusOutOfBounds:    "OutOfBounds",
	StatusKeyOutOfRange:  "KeyOutOfRange",
	StatusOutcomeUnknown: "OutcomeUnknown",
	StatusExpired:        "Expired",
	StatusOverloaded:     "Overloaded",

	StatusPermissionDenied: "PermissionDenied",
	StatusUnverifiable:     "Unverifiable",
	StatusNotVersioned:     "NotVersioned",
	StatusTxnSpansRegions:  "TxnSpansRegions",
}

// Known reports whether s is defined by this protocol version.
func (s Status) Known() bool { return int(s) < len(statusNames) }

// String returns the status's name, or "Status(N)".
func (s Status) String() string {
	if s.Known() {
		return statusNames[s]
	}
	return "Status(" + strconv.FormatUint(uint64(s), 10) + ")"
}
