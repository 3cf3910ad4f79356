package server

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// Errors of the server's lifecycle. Test with errors.Is; they are usually
// wrapped with context.
var (
	// ErrInvalidOptions: an Options field is out of range or missing.
	ErrInvalidOptions = errors.New("server: invalid options")
	// ErrDataDirLocked: another process runs a server on the data
	// directory.
	ErrDataDirLocked = errors.New("server: data directory in use")
	// ErrSnapshotDir: Options.SnapshotDir disagrees with where the data
	// directory keeps its snapshots, or that directory is missing.
	ErrSnapshotDir = errors.New("server: snapshot directory")
	// ErrDataDirOwned: the data directory belongs to another server ID.
	ErrDataDirOwned = errors.New("server: data directory belongs to another server")
	// ErrRegionOwned: the region table says another server hosts the
	// region found in the data directory.
	ErrRegionOwned = errors.New("server: region hosted by another server")
	// ErrStarted: Start was called twice, or after Close.
	ErrStarted = errors.New("server: already started")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("server: closed")
)

// Messages of statuses whose cause a client cannot guess.
const (
	msgNeedsSplit  = "meganode full and not splitting (splits off, or no free meganode slot)"
	msgExtentsFull = "region extent area full"
	msgNoRoot      = "the cluster has no root meganode yet"
)

// wireError maps an error of the tree, the region or the server to what the
// reply says: a wire sentinel for routine outcomes, a *wire.StatusError
// where detail helps the client, and the error itself (StatusInternal, its
// text in the reply) for anything unexpected. Errors that already carry a
// wire status pass through.
func wireError(err error) error {
	var se *wire.StatusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return se
	case errors.Is(err, blink.ErrNotFound):
		return wire.ErrNotFound
	case errors.Is(err, blink.ErrEmptyKey):
		return wire.ErrEmptyKey
	case errors.Is(err, blink.ErrKeyTooLarge):
		return &wire.StatusError{Status: wire.StatusKeyTooLarge, Message: err.Error()}
	case errors.Is(err, blink.ErrValueTooLarge):
		return &wire.StatusError{Status: wire.StatusValueTooLarge, Message: err.Error()}
	case errors.Is(err, blink.ErrFrozen):
		return &wire.StatusError{Status: wire.StatusNeedsRetry, Message: "a meganode split is moving the key"}
	case errors.Is(err, blink.ErrNeedsSplit):
		return &wire.StatusError{Status: wire.StatusUnavailable, Message: msgNeedsSplit}
	case errors.Is(err, blink.ErrExtentsFull):
		return &wire.StatusError{Status: wire.StatusUnavailable, Message: msgExtentsFull}
	case errors.Is(err, blink.ErrKeyOutOfRange):
		return wire.ErrKeyOutOfRange
	case errors.Is(err, blink.ErrRestart):
		return &wire.StatusError{Status: wire.StatusNeedsRetry, Message: err.Error()}
	case errors.Is(err, rsm.ErrUnverifiable), errors.Is(err, rsm.ErrPassedFloor), errors.Is(err, rsm.ErrForgottenClient):
		return &wire.StatusError{Status: wire.StatusUnverifiable, Message: strings.TrimPrefix(err.Error(), "rsm: ")}
	case errors.Is(err, rsm.ErrNotVersioned):
		return &wire.StatusError{Status: wire.StatusNotVersioned, Message: "the key's region has no versions yet (its leader starts them once every server of its group knows them)"}
	case errors.Is(err, rsm.ErrTxnSpansRegions):
		return &wire.StatusError{Status: wire.StatusTxnSpansRegions, Message: strings.TrimPrefix(err.Error(), "rsm: ")}
	case errors.Is(err, meganode.ErrClosed), errors.Is(err, ErrClosed), errors.Is(err, rsm.ErrClosed):
		return &wire.StatusError{Status: wire.StatusUnavailable, Message: "server stopping"}
	case wire.StatusOf(err) != wire.StatusInternal:
		return err // a wire sentinel, possibly wrapped
	}
	return err
}

// wireErrorf returns a reply error with status st and a formatted message.
func wireErrorf(st wire.Status, format string, args ...any) error {
	return &wire.StatusError{Status: st, Message: fmt.Sprintf(format, args...)}
}
