package rdma

import "errors"

// Errors of one-sided reads. Test with errors.Is: they are usually wrapped
// with context (the provider, the region, the offending offset).
//
// A read that fails with any of them has left dst in an unspecified state:
// some bytes may have been written, none of them may be trusted.
var (
	// ErrBadKey: the provider does not know the remote key (never
	// registered, registered with another provider or region, or revoked so
	// long ago that the provider forgot it). Like ErrRevoked it means "this
	// RemoteKey is no good": fetch a fresh one from the region table.
	ErrBadKey = errors.New("rdma: unknown remote key")
	// ErrRevoked: the key was deregistered, before the read or while it was
	// copying. The bytes read, if any, must not be used.
	ErrRevoked = errors.New("rdma: registration revoked")
	// ErrOutOfBounds: a range does not lie inside the registered region.
	ErrOutOfBounds = errors.New("rdma: read outside the registered region")
	// ErrMisaligned: a range's offset or length is not a multiple of 8 (the
	// unit of atomic copy, docs/design.md §3).
	ErrMisaligned = errors.New("rdma: offset or length not a multiple of 8")
	// ErrTooLarge: a request reads more bytes in all than the provider's
	// MaxReadLen.
	ErrTooLarge = errors.New("rdma: read longer than the provider's limit")
	// ErrTooManySegments: a vector read has more ranges than the provider's
	// MaxSegments.
	ErrTooManySegments = errors.New("rdma: too many segments in a vector read")

	// ErrClosed: the Client or Server was closed by its owner (locally).
	ErrClosed = errors.New("rdma: closed")
	// ErrDisconnected: the responder could not be reached, or the
	// connection to it broke (it closed, restarted, or the network failed)
	// while the read was in flight. The read may be retried.
	ErrDisconnected = errors.New("rdma: responder unreachable or connection lost")
	// ErrProtocol: the peer sent bytes that are not this provider's
	// protocol. The connection is closed.
	ErrProtocol = errors.New("rdma: protocol violation")

	// ErrNotSameHost: a shared-memory remote key was given to a client on
	// another host (its host identity differs). Use a network provider.
	ErrNotSameHost = errors.New("rdma: region is on another host")
	// ErrNotShareable: the region has no file a same-host client could map
	// (a region over heap memory).
	ErrNotShareable = errors.New("rdma: region has no file to share")
	// ErrUnsupported: the provider does not run on this platform.
	ErrUnsupported = errors.New("rdma: provider not supported on this platform")
	// ErrUnknownProvider: no provider of that name is built in.
	ErrUnknownProvider = errors.New("rdma: unknown provider")

	// ErrCQFull: posting the op would give its completion queue more
	// completions outstanding than its depth. Nothing was posted.
	ErrCQFull = errors.New("rdma: completion queue full")
	// ErrInFlight: the op was posted again before its completion was
	// taken from its queue. Nothing was posted.
	ErrInFlight = errors.New("rdma: op already in flight")
	// ErrTooManyRegistrations: the server has no room for another
	// registration (the shm registration table is full).
	ErrTooManyRegistrations = errors.New("rdma: too many registrations")
	// ErrInvalidOptions: options that Validate rejects.
	ErrInvalidOptions = errors.New("rdma: invalid options")
)
