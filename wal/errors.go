package wal

import "errors"

// Errors returned by the package. Test with errors.Is; they are wrapped with
// context (region, index, path) unless said otherwise.
var (
	// ErrSyncFailed: a write or fsync of the shared pebble WAL failed (or
	// pebble reported a fatal error) at some point since Open. The DB
	// latches the first such failure: the failing call and every later
	// write of any region return an error wrapping ErrSyncFailed and the
	// original error, until the process reopens the directory. See doc.go,
	// "Durability and the sync latch".
	ErrSyncFailed = errors.New("wal: sync failed, writes refused until reopen")

	// ErrCorruption marks bytes that cannot be what a correct writer wrote:
	// a log record that does not decode, a log key whose index disagrees
	// with its record, a snapshot chunk or file whose checksum fails. It is
	// wrapped with context, never a new error per case.
	ErrCorruption = errors.New("wal: corruption")

	// ErrClosed: the DB was closed.
	ErrClosed = errors.New("wal: closed")

	// ErrOutOfOrder: StoreLogs was given entries whose indexes are not
	// consecutive (or index 0), or DeleteRange was asked to cut a hole in
	// the middle of a region's log. Nothing was written.
	ErrOutOfOrder = errors.New("wal: log entries out of order")

	// ErrTooLarge: a log entry's data or extensions are longer than the
	// record format can hold (MaxUint32 bytes). Nothing was written.
	ErrTooLarge = errors.New("wal: log entry too large")

	// ErrNotFound is what StableStore.Get and GetUint64 return for a key
	// that was never set. It is the one error here without the "wal:"
	// prefix, and it is returned unwrapped: hashicorp/raft (v1.8.0,
	// api.go HasExistingState, raft.go NewRaft and requestVote) tests
	// err.Error() != "not found" rather than errors.Is, and an error with
	// any other text fails NewRaft and makes every vote request a no-op.
	ErrNotFound = errors.New("not found")

	// ErrSnapshotNotFound: SnapshotStore.Open was given an ID that names
	// no complete snapshot of the region.
	ErrSnapshotNotFound = errors.New("wal: snapshot not found")

	// ErrSinkClosed: Write after the snapshot sink was closed or
	// cancelled, or Close after it was cancelled or failed to close.
	ErrSinkClosed = errors.New("wal: snapshot sink already closed")

	// ErrSnapshotClosed: Read after the snapshot reader was closed.
	ErrSnapshotClosed = errors.New("wal: snapshot reader closed")
)
