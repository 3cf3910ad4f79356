package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/wire"
)

// Errors returned by the client. Test with errors.Is: they are usually
// wrapped with detail, and an error that came from a server also matches
// the wire package's sentinel (errors.Is(err, ErrNotFound) and
// errors.Is(err, wire.ErrNotFound) both hold for a key the server did not
// find), as does a connection error its wire or rdma cause.
var (
	// ErrNotFound: the key is not in the store.
	ErrNotFound = errors.New("cell: key not found")
	// ErrEmptyKey: keys are at least one byte long.
	ErrEmptyKey = errors.New("cell: empty key")
	// ErrKeyTooLarge: the key is longer than the store's limit
	// (blink.MaxKeySize of its node size: 128 bytes with 1 KiB nodes).
	ErrKeyTooLarge = errors.New("cell: key too large")
	// ErrValueTooLarge: the value is longer than 1 MiB.
	ErrValueTooLarge = errors.New("cell: value too large")
	// ErrOutcomeUnknown: a write was sent but its reply was lost (the
	// connection failed, the caller's context ended, or the server could
	// not tell): it may or may not have been applied. The client never
	// retries such a write by itself.
	ErrOutcomeUnknown = errors.New("cell: write outcome unknown")
	// ErrUnavailable: the operation could not be done within its retries
	// or deadline because no server that holds the data answered, or the
	// servers kept refusing it (unavailable, overloaded, redirecting).
	// It was not applied. The cause is wrapped.
	ErrUnavailable = errors.New("cell: unavailable")
	// ErrCorruption: bytes read from a server cannot be what a correct
	// server wrote (a consistent node that does not decode, a record
	// whose CRC matches but whose key is another).
	ErrCorruption = errors.New("cell: corruption")
	// ErrServer: a server failed the request (an internal error, or it
	// rejected the request as malformed): a bug, not a transient state.
	ErrServer = errors.New("cell: server error")
	// ErrPermissionDenied: the server refused the operation because the
	// client's certificate does not allow it (a client certificate on an
	// admin operation), or refused the connection because its port
	// requires TLS and the client dialled plain TCP. Not executed; not
	// retried.
	ErrPermissionDenied = errors.New("cell: permission denied")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("cell: client closed")
	// ErrInvalidConfig: Config.Validate rejected the configuration.
	ErrInvalidConfig = errors.New("cell: invalid config")
	// ErrConditionFailed: a conditional write's condition did not hold
	// (PutIf, DeleteIf); nothing changed. The error is a
	// *ConditionFailedError with the key's current version.
	ErrConditionFailed = errors.New("cell: condition failed")
	// ErrTxnConflict: a transaction did not commit because what it read
	// changed before its commit (or a key moved); nothing of it applied,
	// and running it again may succeed (Client.Txn does). The error is a
	// *TxnError that says the cause.
	ErrTxnConflict = errors.New("cell: transaction conflict")
	// ErrTxnSpansRegions: a transaction's keys are in more than one
	// region, which transactions cannot do until multi-region
	// transactions are built (docs/transactions.md §13 step 6). Nothing
	// was applied.
	ErrTxnSpansRegions = errors.New("cell: transaction spans regions (multi-region transactions are not built yet)")
	// ErrTxnTooLarge: a transaction's read or write set would pass a
	// limit (docs/limits.md); the read or write that would is refused,
	// and nothing is sent.
	ErrTxnTooLarge = errors.New("cell: transaction too large")
	// ErrTxnDone: the transaction was committed or rolled back already.
	ErrTxnDone = errors.New("cell: transaction already committed or rolled back")
)

// TxnError is a transaction that did not commit for a conflict
// (errors.Is(err, ErrTxnConflict)): nothing of it applied. Cause is
// "version" (a key read changed), "phantom" (a range read's keys or
// versions changed) or "moved" (a key moved to another region since the
// client located it).
type TxnError struct {
	Cause string
}

func (e *TxnError) Error() string { return "cell: transaction conflict: " + e.Cause }

// Is makes errors.Is(err, ErrTxnConflict) hold.
func (e *TxnError) Is(target error) bool { return target == ErrTxnConflict }

// ConditionFailedError is the definite answer to a conditional write whose
// condition did not hold when its region applied it: nothing changed.
// Version is the key's version then (0: absent). errors.Is(err,
// ErrConditionFailed) holds.
type ConditionFailedError struct {
	Key     []byte
	Version uint64
}

func (e *ConditionFailedError) Error() string {
	if e.Version == 0 {
		return fmt.Sprintf("cell: condition failed: %q is absent", e.Key)
	}
	return fmt.Sprintf("cell: condition failed: %q is at version %d", e.Key, e.Version)
}

// Is makes errors.Is(err, ErrConditionFailed) hold.
func (e *ConditionFailedError) Is(target error) bool { return target == ErrConditionFailed }

// RegionUnavailableError: the region table shows no live server for the
// region: neither its host nor any of its replicas is a live member (their
// member leases are gone: dead, stopped, or cut off from etcd), as opposed
// to a region whose leader is in transition (a replica lives and takes
// over). An operation on such a region fails at once with it, even with a
// deadline to wait within, unless this client saw the region served less
// than Config.RestartGrace ago (see Config.RestartGrace). A range crossing
// the region fails with it too. errors.Is(err, ErrUnavailable) holds. The
// operation was not applied.
type RegionUnavailableError struct {
	// Region is the region's ID.
	Region uint32
	// Servers are the members the table names for the region, its host
	// and replicas, none of them live.
	Servers []string
	// Since is when this client saw the region lose its last live
	// server; zero when it never saw it served.
	Since time.Time
}

// Error names the region and its servers.
func (e *RegionUnavailableError) Error() string {
	if len(e.Servers) == 1 {
		return fmt.Sprintf("%v: region %d has no live server (its server %s is not a member of the region table)",
			ErrUnavailable, e.Region, e.Servers[0])
	}
	return fmt.Sprintf("%v: region %d has no live server (none of its servers %s is a member of the region table)",
		ErrUnavailable, e.Region, strings.Join(e.Servers, ", "))
}

// Unwrap returns ErrUnavailable.
func (e *RegionUnavailableError) Unwrap() error { return ErrUnavailable }

// Error pairs one of the client's sentinels (Kind) with the error that
// caused it (Cause: a wire status, a connection or one-sided read error, a
// context error). errors.Is matches both.
type Error struct {
	Kind  error
	Cause error
}

// Error returns the kind's text followed by the cause's, or the kind's
// alone when the cause is a bare sentinel of the same meaning.
func (e *Error) Error() string {
	if e.Cause == nil || bareSentinel(e.Cause) {
		return e.Kind.Error()
	}
	return e.Kind.Error() + ": " + e.Cause.Error()
}

// Unwrap returns Kind and Cause.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Cause} }

// bareSentinel reports whether err is a wire sentinel with no detail.
func bareSentinel(err error) bool {
	for _, s := range wireStatusKinds {
		if err == s.wire {
			return true
		}
	}
	return false
}

func wrapErr(kind, cause error) error {
	if cause == nil {
		return kind
	}
	return &Error{Kind: kind, Cause: cause}
}

// wireStatusKinds maps the wire statuses that are final answers (not
// retried) to the client's sentinels.
var wireStatusKinds = [...]struct {
	wire, kind error
	shared     error // preallocated Error for the bare sentinel
}{
	{wire.ErrNotFound, ErrNotFound, errNotFound},
	{wire.ErrKeyTooLarge, ErrKeyTooLarge, &Error{Kind: ErrKeyTooLarge, Cause: wire.ErrKeyTooLarge}},
	{wire.ErrValueTooLarge, ErrValueTooLarge, &Error{Kind: ErrValueTooLarge, Cause: wire.ErrValueTooLarge}},
	{wire.ErrEmptyKey, ErrEmptyKey, &Error{Kind: ErrEmptyKey, Cause: wire.ErrEmptyKey}},
	{wire.ErrOutcomeUnknown, ErrOutcomeUnknown, &Error{Kind: ErrOutcomeUnknown, Cause: wire.ErrOutcomeUnknown}},
}

// errNotFound is ErrNotFound as both search paths return it: it matches
// wire.ErrNotFound too, whichever path found the key missing.
var errNotFound error = &Error{Kind: ErrNotFound, Cause: wire.ErrNotFound}

// disposition says what to do after an error.
type disposition uint8

const (
	// final: return the (mapped) error to the caller.
	final disposition = iota
	// retrySame: retry the same step after a backoff (not executed).
	retrySame
	// retryRefresh: refresh the topology, then restart from the root.
	retryRefresh
	// retryRestart: drop cached routing, restart from the root at once.
	retryRestart
)

// classify decides what an error of an RPC means for the operation: the
// error to report if it is final, the retry cause and what to do
// otherwise. write says the op changes the store; a write whose request
// may have reached the server is never retried.
func classify(err error, write bool) (disposition, retryCause, error) {
	for _, s := range wireStatusKinds {
		if errors.Is(err, s.wire) {
			if err == s.wire {
				return final, 0, s.shared
			}
			return final, 0, &Error{Kind: s.kind, Cause: err}
		}
	}
	var ce *wire.ConnError
	switch {
	case errors.Is(err, wire.ErrPermissionDenied):
		// An op refused, or a connection refused (a refusal frame: Sent
		// is false): not executed either way.
		return final, 0, &Error{Kind: ErrPermissionDenied, Cause: err}
	case errors.As(err, &ce):
		if ce.Sent && write {
			return final, 0, &Error{Kind: ErrOutcomeUnknown, Cause: err}
		}
		return retryRefresh, causeConnLost, err
	case errors.Is(err, errDial):
		// Nothing was sent, so even a write failed definitely. A dial
		// cut short by a deadline (the dial timeout's or the caller's:
		// net reports both as "i/o timeout", before the caller's context
		// may say it ended) is a lost connection like any other; giveUp
		// ends the operation once the caller's context has ended.
		return retryRefresh, causeConnLost, err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if write {
			// The request may have been queued or sent already.
			return final, 0, &Error{Kind: ErrOutcomeUnknown, Cause: err}
		}
		return final, 0, err
	case errors.Is(err, wire.ErrNeedsRetry), errors.Is(err, wire.ErrUnavailable),
		errors.Is(err, wire.ErrOverloaded), errors.Is(err, wire.ErrExpired),
		errors.Is(err, wire.ErrNotVersioned): // a region's leader starts versions soon
		return retrySame, causeServerBusy, err
	case errors.Is(err, wire.ErrWrongServer), errors.Is(err, wire.ErrStaleEpoch),
		errors.Is(err, wire.ErrUnknownRegion):
		return retryRefresh, causeRedirect, err
	case errors.Is(err, wire.ErrKeyOutOfRange), errors.Is(err, wire.ErrOutOfBounds):
		return retryRestart, causeRestart, err
	case errors.Is(err, errNoRoute):
		// The region table is stale (the region moved or is new).
		return retryRefresh, causeRedirect, err
	case errors.Is(err, wire.ErrInternal):
		if write {
			return final, 0, &Error{Kind: ErrOutcomeUnknown, Cause: err}
		}
		return final, 0, &Error{Kind: ErrServer, Cause: err}
	case errors.Is(err, wire.ErrFrameTooLarge):
		// Too large to send: nothing was sent. Too large a reply: the
		// server answered; for a write it was applied.
		return final, 0, &Error{Kind: ErrServer, Cause: err}
	}
	return final, 0, &Error{Kind: ErrServer, Cause: err}
}

// giveUp decides whether an operation stops after its retries-th
// retriable error err, of cause: nil to retry. A context that ended stops
// it; so does MaxRetries, unless the region may just have no serving
// leader now (a lost connection, a busy or unavailable server, a
// redirect) and the context has a deadline to wait within (docs/design.md §9:
// "a key whose region has no leader right now waits for one within the
// caller's deadline"), and Config.FailFast is off. Waiting stops with
// ErrUnavailable wrapping the context's error and err.
func (c *Client) giveUp(ctx context.Context, retries int, cause retryCause, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if retries > c.cfg.MaxRetries {
			return wrapErr(ErrUnavailable, fmt.Errorf("%w (last error: %w)", cerr, err))
		}
		return fmt.Errorf("%w (last error: %w)", cerr, err)
	}
	if retries <= c.cfg.MaxRetries {
		return nil
	}
	if _, ok := ctx.Deadline(); ok && !c.cfg.FailFast && (cause == causeConnLost || cause == causeServerBusy || cause == causeRedirect) {
		return nil
	}
	return wrapErr(ErrUnavailable, err)
}

// errDial marks a failure to connect to a server: nothing was sent.
var errDial = errors.New("cell: cannot connect to server")

// readCause maps a failed one-sided read to its retry cause: conn-lost
// when the responder could not be reached, read-failed otherwise (the
// registration was revoked or is unknown because the region moved or its
// server restarted, or the pointer is stale and out of bounds).
func readCause(err error) retryCause {
	if errors.Is(err, rdma.ErrDisconnected) {
		return causeConnLost
	}
	return causeReadFailed
}
