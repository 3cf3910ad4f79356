package client

import (
	"context"
	"fmt"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

// write puts (kind opPut) or deletes (opDelete) key. Writes are always
// done by a server (paper §2.1: clients only read one-sided): the client
// finds the key's leaf meganode (from the path cache, or with a search
// whose hops the selector routes as usual) and sends the write to the
// server holding it, starting there. With a single server and no cached
// leaf, it lets the server find the leaf (Ptr 0) instead of searching
// first.
//
// Retries: only after errors that prove the write was not executed
// (connection failed before sending, NeedsRetry, Unavailable, Overloaded,
// Expired, WrongServer, StaleEpoch, UnknownRegion, KeyOutOfRange), with
// the same client id and sequence number. Anything else that follows the
// request's sending is ErrOutcomeUnknown, never retried.
func (c *Client) write(ctx context.Context, kind opKind, key, value []byte) error {
	if c.isClosed() {
		return ErrClosed
	}
	t := c.topo.Load()
	if err := checkKey(t, key); err != nil {
		return err
	}
	if kind == opPut {
		if err := checkValue(value); err != nil {
			return err
		}
	}
	seq := c.seq.Add(1)
	sc := c.getScratch(t.nodeSize)
	defer c.putScratch(sc)
	bypass, deep := false, false
	var redirect *server // where a WrongServer reply sent us
	for retries := 0; ; {
		ptr, err := c.writeTarget(ctx, t, key, bypass, deep)
		if err != nil {
			return err
		}
		srv, reg, ok := t.route(ptr)
		if redirect != nil {
			srv, ok = redirect, true
		}
		if !ok {
			err = fmt.Errorf("%w %d (meganode %v)", errNoRoute, ptr.Region(), ptr)
		} else {
			var epoch uint64
			if reg != nil {
				epoch = reg.epoch
			}
			op := wire.OpPut
			if kind == opPut {
				req := wire.PutRequest{Ptr: ptr, Epoch: epoch, ClientID: c.clientID, Seq: seq, Key: key, Value: value}
				sc.body = req.AppendTo(sc.body[:0])
			} else {
				op = wire.OpDelete
				req := wire.DeleteRequest{Ptr: ptr, Epoch: epoch, ClientID: c.clientID, Seq: seq, Key: key}
				sc.body = req.AppendTo(sc.body[:0])
			}
			if err := ctx.Err(); err != nil {
				return err // not sent
			}
			var f wire.Frame
			f, err = srv.call(ctx, op, sc.body)
			if err == nil {
				f.Release()
				return nil
			}
		}
		d, cause, ferr := c.failure(ctx, t, ptr, err, true, &retries)
		switch d {
		case final:
			return ferr
		case retryRestart:
			c.paths.drop(ptr)
			bypass, deep = true, true
		case retryRefresh:
			if redirect = c.noteRedirect(err); redirect != nil {
				continue // the server named the leaf's server: go there
			}
			c.paths.drop(ptr)
			if t, err = c.refreshed(ctx, t, retries, cause, err); err != nil {
				return err
			}
		}
	}
}

// writeTarget returns the meganode to send a write of key to: the cached
// leaf meganode covering it, the root as the only server knows it (nil),
// or the leaf meganode a locating search finds.
func (c *Client) writeTarget(ctx context.Context, t *topology, key []byte, bypass, deep bool) (blink.Ptr, error) {
	if !bypass {
		if info, ok := c.paths.lookup(key); ok && info.level == 0 {
			return info.ptr, nil
		}
	}
	if len(t.servers) == 1 {
		return 0, nil
	}
	res, err := c.searchOp(ctx, opLocate, key, nil, c.now(), deep)
	return res.leaf, err
}

func isOutcomeUnknown(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Kind == ErrOutcomeUnknown
}
