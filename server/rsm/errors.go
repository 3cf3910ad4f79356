package rsm

import (
	"errors"
	"fmt"

	"github.com/cellstore/cell/blink"
)

// Errors of apply and of the machine. Test with errors.Is; they are
// usually wrapped with context. Every error Apply returns is part of the
// record's deterministic outcome: every replica gets the same one.
var (
	// ErrBadRecord: a record that does not decode, or names no meganode
	// of the region, or a step its meganode is not at.
	ErrBadRecord = errors.New("rsm: bad apply record")
	// ErrUnverifiable: a retried write (FlagRetry) whose first attempt
	// the session table cannot prove unapplied (sessions.go): it changes
	// nothing, and its outcome stays unknown.
	ErrUnverifiable = errors.New("rsm: the region cannot prove that the write's first attempt was not applied (its at-most-once table forgot the client, or the key moved in since); the outcome stays unknown")
	// ErrPassedFloor: a first attempt (FlagFloor) at or below its
	// client's floor: nothing changed; another attempt of it may have
	// applied and been forgotten.
	ErrPassedFloor = errors.New("rsm: the write's sequence is below what the region's at-most-once table forgot of its client, so another attempt of it may have applied; this one was not")
	// ErrForgottenClient: a first attempt (FlagForgotten) of a client
	// the table forgot whole: nothing changed; the client sends it again
	// under a new client id.
	ErrForgottenClient = errors.New("rsm: the region's at-most-once table forgot the write's client, so another attempt of it may have applied; this one was not (send it again under a new client id)")
	// ErrSnapshotLater: no snapshot can be taken now (a split is in
	// progress); raft tries again later.
	ErrSnapshotLater = errors.New("rsm: no snapshot now")
	// ErrVersionMode: a step that needs both regions of a remote split,
	// or the whole region, in one version mode (docs/transactions.md
	// §2.6): target entries of the other mode, or a version record while
	// a split is in progress. Nothing changed; the split aborts, or the
	// version record is proposed again later.
	ErrVersionMode = errors.New("rsm: the regions' version modes differ, or a split is in progress")
	// ErrNotVersioned: a conditional write to a region without versions
	// yet (its version record not applied): nothing changed.
	ErrNotVersioned = errors.New("rsm: the region has no versions yet")
	// ErrTxnMoved: a txn record names a key that is in no leaf meganode
	// of the region reachable from the record's meganode (it moved out
	// in a remote split since the server looked): nothing changed; the
	// server looks again and answers TxnSpansRegions when the key is in
	// another region. It wraps blink.ErrKeyOutOfRange, so the server's
	// write path searches again as for a put whose key moved.
	ErrTxnMoved = fmt.Errorf("rsm: a key of the transaction is not in the region: %w", blink.ErrKeyOutOfRange)
	// ErrTxnSpansRegions: a txn record's range read runs on into another
	// region: nothing changed (multi-region transactions are not built
	// yet, docs/transactions.md §13).
	ErrTxnSpansRegions = errors.New("rsm: a range read of the transaction runs into another region")
	// ErrClosed: the machine's region was closed (the replica dropped,
	// or the server stopping).
	ErrClosed = errors.New("rsm: region closed")
)
