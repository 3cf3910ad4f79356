package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Errors of the frame layer. Test with errors.Is; they are usually wrapped
// with context.
var (
	// ErrBadMagic: the first byte after the length is not Magic; the
	// stream is not Cell's wire protocol or is out of sync. Close the
	// connection.
	ErrBadMagic = errors.New("wire: bad magic byte")
	// ErrBadVersion: the frame's protocol version (or a reserved header
	// field, which only another version would set) is not supported.
	// Close the connection, after replying StatusBadVersion if you are the
	// server.
	ErrBadVersion = errors.New("wire: unsupported protocol version")
	// ErrBadLength: the frame's length is shorter than a header. The
	// stream is out of sync: close the connection.
	ErrBadLength = errors.New("wire: bad frame length")
	// ErrFrameTooLarge: a frame exceeds Options.MaxFrameSize. On receipt
	// its body was discarded unread and the stream is still in sync; on
	// send nothing was sent.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrUnknownOp: the frame's op is neither known nor an extension op.
	// The body was read and the stream is still in sync.
	ErrUnknownOp = errors.New("wire: unknown op")
	// ErrProtocol: a well-formed frame that the peer must not send here (a
	// request where a reply is due, a reply with another op). Close the
	// connection unless the error names a single call.
	ErrProtocol = errors.New("wire: protocol violation")
	// ErrMalformed: a message body does not decode (truncated, trailing
	// bytes, non-canonical flags). The server answers StatusBadRequest.
	ErrMalformed = errors.New("wire: malformed message body")

	// ErrIdleTimeout: no frame started within the Reader's idle timeout
	// (Reader.SetTimeouts). Close the connection.
	ErrIdleTimeout = errors.New("wire: connection idle too long")
	// ErrFrameTimeout: a frame that started did not arrive whole within
	// the Reader's frame timeout (a stalled or slowloris peer). The
	// stream is out of sync: close the connection.
	ErrFrameTimeout = errors.New("wire: frame not received in time")

	// ErrRefused: the server refused the connection (a connection
	// limit) before reading anything from it: it sent a refusal frame
	// (RefusalFrame) and closed it. Calls pending on it fail with a
	// *ConnError whose Sent is false: nothing was executed.
	ErrRefused = errors.New("wire: connection refused by the server")

	// ErrHandshake: the TLS handshake of a Dial failed (an untrusted or
	// expired certificate, a plain TCP server, a server that refused this
	// end's certificate). Nothing was sent: any op may be retried,
	// though the same failure is likely until the certificates change.
	ErrHandshake = errors.New("wire: TLS handshake failed")

	// ErrClosed: the Conn or ReplyWriter was closed by its owner.
	ErrClosed = errors.New("wire: connection closed")
	// ErrConnLost: the connection failed; every call pending on it fails
	// with a *ConnError that wraps ErrConnLost and the cause.
	ErrConnLost = errors.New("wire: connection lost")
)

// Errors that a reply status maps to (Status.Err, StatusOf). The client
// returns them, possibly inside a *StatusError with detail.
var (
	ErrNotFound       = errors.New("wire: key not found")
	ErrKeyTooLarge    = errors.New("wire: key too large")
	ErrValueTooLarge  = errors.New("wire: value too large")
	ErrEmptyKey       = errors.New("wire: empty key")
	ErrBadRequest     = errors.New("wire: bad request")
	ErrWrongServer    = errors.New("wire: wrong server")
	ErrStaleEpoch     = errors.New("wire: stale epoch")
	ErrNeedsRetry     = errors.New("wire: needs retry")
	ErrUnavailable    = errors.New("wire: server unavailable")
	ErrInternal       = errors.New("wire: internal server error")
	ErrUnknownRegion  = errors.New("wire: unknown region")
	ErrOutOfBounds    = errors.New("wire: pointer out of bounds")
	ErrKeyOutOfRange  = errors.New("wire: key outside the meganode's range")
	ErrOutcomeUnknown = errors.New("wire: write outcome unknown")
	ErrExpired        = errors.New("wire: request expired before service")
	ErrOverloaded     = errors.New("wire: server overloaded")
	// ErrPermissionDenied: the peer's certificate does not allow the op,
	// or TLS was required and the connection is plain TCP.
	ErrPermissionDenied = errors.New("wire: permission denied")
	// ErrUnverifiable: a retried write (FlagRetry) whose first attempt
	// the region cannot prove unapplied, or a first attempt whose sequence
	// the region's table already passed; not executed.
	ErrUnverifiable = errors.New("wire: retried write unverifiable")
	// ErrNotVersioned: a conditional write to a region without versions
	// yet; not executed.
	ErrNotVersioned = errors.New("wire: the key's region has no versions yet")
	// ErrTxnSpansRegions: a transaction names keys of more than one
	// region; not executed.
	ErrTxnSpansRegions = errors.New("wire: the transaction spans regions")
	// ErrUnknownStatus: a reply carried a status this version does not
	// define.
	ErrUnknownStatus = errors.New("wire: unknown status")
)

// statusErrs maps every known status but OK to its sentinel.
var statusErrs = [...]error{
	StatusNotFound:       ErrNotFound,
	StatusKeyTooLarge:    ErrKeyTooLarge,
	StatusValueTooLarge:  ErrValueTooLarge,
	StatusEmptyKey:       ErrEmptyKey,
	StatusBadRequest:     ErrBadRequest,
	StatusFrameTooLarge:  ErrFrameTooLarge,
	StatusUnknownOp:      ErrUnknownOp,
	StatusBadVersion:     ErrBadVersion,
	StatusWrongServer:    ErrWrongServer,
	StatusStaleEpoch:     ErrStaleEpoch,
	StatusNeedsRetry:     ErrNeedsRetry,
	StatusUnavailable:    ErrUnavailable,
	StatusInternal:       ErrInternal,
	StatusUnknownRegion:  ErrUnknownRegion,
	StatusOutOfBounds:    ErrOutOfBounds,
	StatusKeyOutOfRange:  ErrKeyOutOfRange,
	StatusOutcomeUnknown: ErrOutcomeUnknown,
	StatusExpired:        ErrExpired,
	StatusOverloaded:     ErrOverloaded,

	StatusPermissionDenied: ErrPermissionDenied,
	StatusUnverifiable:     ErrUnverifiable,
	StatusNotVersioned:     ErrNotVersioned,
	StatusTxnSpansRegions:  ErrTxnSpansRegions,
}

// Err returns the sentinel error of s: nil for StatusOK, an error wrapping
// ErrUnknownStatus for a status this version does not define.
func (s Status) Err() error {
	switch {
	case s == StatusOK:
		return nil
	case int(s) < len(statusErrs):
		return statusErrs[s]
	default:
		return fmt.Errorf("%w %d", ErrUnknownStatus, uint16(s))
	}
}

// StatusOf returns the status a server replies with for err: StatusOK for
// nil, the status of the first sentinel that errors.Is finds (ErrMalformed
// answers StatusBadRequest; context.DeadlineExceeded StatusExpired), and
// StatusInternal for anything else. Servers map their packages' errors
// (blink.ErrNotFound, ...) to wire sentinels by wrapping them.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	for s := StatusNotFound; int(s) < len(statusErrs); s++ {
		if errors.Is(err, statusErrs[s]) {
			return s
		}
	}
	switch {
	case errors.Is(err, ErrMalformed):
		return StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		return StatusExpired
	}
	return StatusInternal
}

// InSync reports whether, after Reader.ReadFrame returned err, the stream
// is still at a frame boundary so that reading can go on: the frame was too
// large (its body was skipped) or had an unknown op (its body was read).
// Any other error means the connection must be closed.
func InSync(err error) bool {
	return errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrUnknownOp)
}

// StatusError is a non-OK reply that carried detail (an ErrorReply body).
// It unwraps to the status's sentinel, so errors.Is(err, ErrWrongServer)
// holds for a redirect.
type StatusError struct {
	Status  Status
	Message string // human-readable detail, may be empty
	Region  uint32 // the region concerned, if any
	Epoch   uint64 // the region's current epoch (StaleEpoch), if known
	Leader  string // the address to redirect to (WrongServer), if known
}

// Error formats the sentinel's text followed by the detail.
func (e *StatusError) Error() string {
	var b strings.Builder
	b.WriteString(e.Status.Err().Error())
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Region != 0 || e.Epoch != 0 {
		fmt.Fprintf(&b, " (region %d epoch %d)", e.Region, e.Epoch)
	}
	if e.Leader != "" {
		b.WriteString(" (leader ")
		b.WriteString(e.Leader)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the status's sentinel error.
func (e *StatusError) Unwrap() error { return e.Status.Err() }

// ConnError fails a call whose connection broke before its reply arrived.
// It wraps both ErrConnLost and the cause (ErrClosed after Conn.Close, an
// io or net error, ErrBadMagic, ...).
type ConnError struct {
	// Sent is false when the request had certainly not been handed to
	// the socket: it was not executed and any op may be retried. When true
	// the server may have executed it: a write's outcome is unknown.
	Sent bool
	// Err is the cause.
	Err error
}

func (e *ConnError) Error() string {
	if e.Sent {
		return "wire: connection lost, request may have been delivered: " + e.Err.Error()
	}
	return "wire: connection lost, request not sent: " + e.Err.Error()
}

// Unwrap returns ErrConnLost and the cause.
func (e *ConnError) Unwrap() []error { return []error{ErrConnLost, e.Err} }
