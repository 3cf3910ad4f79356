package regiontable

import "errors"

// Errors returned by Stores. Test with errors.Is: they are usually wrapped
// with context.
var (
	// ErrNotFound: no entry for that region (or member).
	ErrNotFound = errors.New("regiontable: not found")
	// ErrMemberExists: a live member with that server ID is registered
	// (possibly a crashed predecessor whose lease has not expired yet).
	ErrMemberExists = errors.New("regiontable: member already registered")
	// ErrStaleEpoch: PutRegion of an entry older than the stored one.
	ErrStaleEpoch = errors.New("regiontable: stale region epoch")
	// ErrConflict: a compare-and-set lost (SetRoot: the root is not the
	// expected old value).
	ErrConflict = errors.New("regiontable: compare-and-set conflict")
	// ErrExhausted: every region ID has been handed out.
	ErrExhausted = errors.New("regiontable: region IDs exhausted")
	// ErrLeaseLost: a member's or a campaign's lease expired or was
	// revoked before Close or Resign.
	ErrLeaseLost = errors.New("regiontable: lease lost")
	// ErrCompacted: a watch asked for changes older than what etcd keeps.
	// Load again and watch from the new revision.
	ErrCompacted = errors.New("regiontable: watch revision compacted")
	// ErrInvalid: an argument breaks the schema (bad server ID, region ID 0
	// or above blink.MaxRegionID, ...).
	ErrInvalid = errors.New("regiontable: invalid argument")
	// ErrCorruption: a stored value does not parse. It is wrapped with the
	// key, never a new error per case.
	ErrCorruption = errors.New("regiontable: corrupt value")
	// ErrUnreachable: Etcd.Connect found no etcd endpoint answering
	// within the dial timeout. The error says what each endpoint met.
	ErrUnreachable = errors.New("regiontable: etcd unreachable")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("regiontable: closed")
)
