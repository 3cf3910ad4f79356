package blink

import "errors"

// Errors returned by the tree. Test with errors.Is; they may be wrapped.
var (
	// ErrNotFound: the key is not in the tree.
	ErrNotFound = errors.New("blink: key not found")
	// ErrEmptyKey: keys must be at least one byte long.
	ErrEmptyKey = errors.New("blink: empty key")
	// ErrKeyTooLarge: the key is longer than MaxKeySize(nodeSize).
	ErrKeyTooLarge = errors.New("blink: key too large")
	// ErrValueTooLarge: the value is longer than Options.MaxValueSize.
	ErrValueTooLarge = errors.New("blink: value too large")
	// ErrNeedsSplit: the meganode reached its fill threshold (or ran out of
	// nodes); the insert was not applied and the meganode must be split
	// before it can take more keys. Nothing was changed.
	ErrNeedsSplit = errors.New("blink: meganode needs split")
	// ErrExtentsFull: the region's extent area has no block large enough
	// for the record. Nothing was changed.
	ErrExtentsFull = errors.New("blink: extent area full")
	// ErrKeyOutOfRange: the key is outside the meganode's key range; the
	// caller must route it to another meganode.
	ErrKeyOutOfRange = errors.New("blink: key outside the meganode's range")
	// ErrFrozen: the key is in the right half of a meganode split in
	// progress; the write was not applied. Retry once the split is done
	// (the key may then belong to another meganode).
	ErrFrozen = errors.New("blink: key range frozen by a meganode split")
	// ErrSplitState: a meganode split step was called out of order, or on
	// a meganode in no split or in another one.
	ErrSplitState = errors.New("blink: meganode split step out of order")
	// ErrSplitTooSmall: the meganode's keys all sit in one leaf; there is
	// no inner entry key to split at.
	ErrSplitTooSmall = errors.New("blink: meganode too small to split")
	// ErrNotVersioned: an operation on entry words (PutWord, SetWord,
	// PutPlaceholder) on a tree in legacy mode, or an entry carrying a
	// word appended to one. Nothing was changed.
	ErrNotVersioned = errors.New("blink: meganode not in versioned mode")
	// ErrNeedsWord: a write without an entry word (Put, an appended entry
	// with word 0) into a tree in versioned mode, or a word whose version
	// is 0 for an entry with a record. Nothing was changed.
	ErrNeedsWord = errors.New("blink: versioned meganode needs an entry word")
	// ErrVersioning: SetVersioning with another legacy version than the
	// one the meganode has, or a legacy version out of [1, MaxVersion].
	ErrVersioning = errors.New("blink: meganode versioning mismatch")
	// ErrKeyExists: PutPlaceholder of a key that has a record.
	ErrKeyExists = errors.New("blink: key exists")
	// ErrRestart: a lock-free reader gave up after too many restarts; the
	// operation can be retried.
	ErrRestart = errors.New("blink: too many restarts")

	// ErrTorn: a node copy raced with a writer (versions mismatched or odd).
	ErrTorn = errors.New("blink: torn node read")
	// ErrInvalidNode: a node copy is of a free or invalidated node.
	ErrInvalidNode = errors.New("blink: invalid node")
	// ErrOutOfRange: the searched key is below a node's min key.
	ErrOutOfRange = errors.New("blink: key below node's min key")
	// ErrCorruption marks bytes that cannot be what a correct writer wrote.
	// It is wrapped with context, never a new error per case.
	ErrCorruption = errors.New("blink: corruption")
)
