package client

import (
	"bytes"
	"context"
	"errors"
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
// Retries, with the same client id and sequence number (all but the
// seq-passed one at the end): after
// errors that prove the write was not executed (connection failed before
// sending, NeedsRetry, Unavailable, Overloaded, Expired, WrongServer,
// StaleEpoch, UnknownRegion, KeyOutOfRange), and after a lost outcome (the
// connection failed after sending, or the server answered OutcomeUnknown:
// its leadership ended under the write). From a lost outcome on, every
// attempt carries wire.FlagRetry: the region applies it only if its
// at-most-once table proves the first attempt was not applied, answers
// as the first attempt did if it was, and otherwise answers Unverifiable,
// which ends the write with ErrOutcomeUnknown. So does any other end of a
// write whose outcome was once lost (the caller's context, the client
// closing, an error of the server): only the region's answer to a
// flagged attempt settles it. Unverifiable to an unflagged attempt means
// the region's table had forgotten sequences past this one (the client's
// later writes applied first), or forgotten the client whole, and did not
// apply it: nothing of the write applied, and it is sent again with a new
// client id and sequence number.
func (c *Client) write(ctx context.Context, kind opKind, key, value []byte) error {
	_, err := c.writeOp(ctx, writeReq{kind: kind, key: key, value: value})
	return err
}

// writeReq is one write: a put (kind opPut, key and value), a delete
// (opDelete), or with cond a conditional put or delete of key
// (docs/transactions.md §3).
type writeReq struct {
	kind       opKind
	key, value []byte
	cond       *Cond
	// txn, when set, is a transaction's commit (docs/transactions.md
	// §4.9), sent to the leaf meganode of key, its least key.
	txn *wire.TxnRequest
}

// writeOp sends the write req as write does, and returns what its region
// answered: the version a put gave its key, and for a conditional write
// whose condition failed a *ConditionFailedError.
func (c *Client) writeOp(ctx context.Context, req writeReq) (uint64, error) {
	var w writeAttempts
	version, err := c.writeOnce(ctx, req, &w)
	if err != nil && w.lost != nil {
		return 0, w.settle(err)
	}
	return version, err
}

// writeAttempts is what a write's attempts learned: the error of the
// first attempt whose outcome was lost (nil while none was).
type writeAttempts struct {
	lost error
}

// flags returns the header flags of the next attempt.
func (w *writeAttempts) flags() wire.Flags {
	if w.lost != nil {
		return wire.FlagRetry
	}
	return 0
}

// settle returns the error a write whose outcome was once lost ends with:
// NotFound (a delete the region applied, or vouched for and applied, that
// found no key), ConditionFailed (a conditional write the region vouched
// for, whose condition failed: no attempt applied), TxnConflict (the
// same for a transaction whose validation failed), else
// ErrOutcomeUnknown.
func (w *writeAttempts) settle(err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrConditionFailed) || errors.Is(err, ErrTxnConflict) || isOutcomeUnknown(err) {
		return err
	}
	return &Error{Kind: ErrOutcomeUnknown, Cause: fmt.Errorf("%w (after: %w)", err, w.lost)}
}

// lostOutcome reports whether err leaves a sent write's outcome unknown
// in a way a flagged retry can settle: the connection failed after
// sending, or the server answered OutcomeUnknown. Not the caller's
// context ending (nothing can be sent after it) nor Internal (a server
// error that would most likely repeat).
func lostOutcome(err error) bool {
	var ce *wire.ConnError
	return errors.As(err, &ce) && ce.Sent || errors.Is(err, wire.ErrOutcomeUnknown)
}

func (c *Client) writeOnce(ctx context.Context, req writeReq, w *writeAttempts) (uint64, error) {
	if c.isClosed() {
		return 0, ErrClosed
	}
	t := c.topo.Load()
	kind, key, value := req.kind, req.key, req.value
	if err := checkKey(t, key); err != nil {
		return 0, err
	}
	if kind == opPut {
		if err := checkValue(value); err != nil {
			return 0, err
		}
	}
	if req.cond != nil {
		if err := checkValue(req.cond.value); err != nil {
			return 0, err
		}
	}
	id, seq := c.clientID.Load(), c.seq.Add(1)
	sc := c.getScratch(t.nodeSize)
	defer c.putScratch(sc)
	bypass, deep := false, false
	var redirect *server // where a WrongServer reply sent us
	for retries := 0; ; {
		ptr, err := c.writeTarget(ctx, t, key, bypass, deep)
		if err != nil {
			return 0, err
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
			var op wire.Op
			op, sc.body = req.encode(sc.body[:0], ptr, epoch, id, seq)
			if k := c.cfg.TestingKnobs.BeforeWriteSend; k != nil {
				k(key, seq)
			}
			if err := ctx.Err(); err != nil {
				return 0, err // not sent
			}
			var f wire.Frame
			f, err = srv.callFlags(ctx, op, w.flags(), sc.body)
			if err == nil {
				version, err := req.answer(f.Body)
				f.Release()
				return version, err
			}
			if errors.Is(err, wire.ErrUnverifiable) {
				if w.lost != nil {
					return 0, &Error{Kind: ErrOutcomeUnknown, Cause: fmt.Errorf("%w (first attempt: %w)", err, w.lost)}
				}
				// No attempt's outcome was lost, so none applied: the
				// region had forgotten sequences past this one, or the
				// client whole. Send it again as a new write, under a new
				// client id (one for all of the client's writes refused
				// with this id): a forgotten id is refused for good.
				c.countRetry(causeSeqPassed)
				retries++
				if err := c.giveUp(ctx, retries, causeSeqPassed, err); err != nil {
					return 0, err
				}
				c.clientID.CompareAndSwap(id, randomID())
				id, seq = c.clientID.Load(), c.seq.Add(1)
				redirect = nil
				continue
			}
			if lostOutcome(err) && ctx.Err() == nil && !c.isClosed() {
				if t, err = c.afterLost(ctx, t, ptr, err, w, &retries); err != nil {
					return 0, err
				}
				redirect = nil
				continue
			}
		}
		d, cause, ferr := c.failure(ctx, t, ptr, err, true, &retries)
		switch d {
		case final:
			return 0, ferr
		case retryRestart:
			c.paths.drop(ptr)
			bypass, deep = true, true
		case retryRefresh:
			if redirect = c.noteRedirect(err); redirect != nil {
				continue // the server named the leaf's server: go there
			}
			c.paths.drop(ptr)
			if t, err = c.refreshed(ctx, t, retries, cause, err); err != nil {
				return 0, err
			}
		}
	}
}

// encode appends the request body of one attempt of the write to dst,
// starting at meganode ptr of a region at epoch, as client id's write seq.
func (req *writeReq) encode(dst []byte, ptr blink.Ptr, epoch, id, seq uint64) (wire.Op, []byte) {
	switch {
	case req.txn != nil:
		req.txn.Ptr, req.txn.Epoch, req.txn.ClientID, req.txn.Seq = ptr, epoch, id, seq
		return wire.OpTxn, req.txn.AppendTo(dst)
	case req.cond != nil:
		cr := req.cond.request()
		cr.Ptr, cr.Epoch, cr.ClientID, cr.Seq, cr.Key = ptr, epoch, id, seq, req.key
		if req.kind == opPut {
			cr.Op, cr.Value = wire.CondPut, req.value
		} else {
			cr.Op = wire.CondDelete
		}
		return wire.OpCondWrite, cr.AppendTo(dst)
	case req.kind == opPut:
		m := wire.PutRequest{Ptr: ptr, Epoch: epoch, ClientID: id, Seq: seq, Key: req.key, Value: req.value}
		return wire.OpPut, m.AppendTo(dst)
	}
	m := wire.DeleteRequest{Ptr: ptr, Epoch: epoch, ClientID: id, Seq: seq, Key: req.key}
	return wire.OpDelete, m.AppendTo(dst)
}

// answer decodes the reply to the write: the version a put gave its key;
// a conditional write whose condition failed is a *ConditionFailedError.
func (req *writeReq) answer(body []byte) (uint64, error) {
	if req.txn != nil {
		var rep wire.TxnReply
		if err := rep.Decode(body); err != nil {
			return 0, wrapErr(ErrServer, err)
		}
		if !rep.Committed {
			return 0, &TxnError{Cause: rep.Cause.String()}
		}
		return rep.Version, nil
	}
	if req.cond != nil {
		var rep wire.CondReply
		if err := rep.Decode(body); err != nil {
			return 0, wrapErr(ErrServer, err)
		}
		if !rep.Succeeded {
			return 0, &ConditionFailedError{Key: bytes.Clone(req.key), Version: rep.Version}
		}
		return rep.Version, nil
	}
	var rep wire.WriteReply
	if err := rep.Decode(body); err != nil {
		return 0, wrapErr(ErrServer, err)
	}
	return rep.Version, nil
}

// afterLost prepares the next attempt of a write whose attempt at ptr
// lost its outcome (err, lostOutcome): the later attempts are flagged
// retries, sent after a backoff on a refreshed topology (the region's
// leader may have changed), within the retry bounds of any lost
// connection. It returns the topology to go on with, or the error that
// ends the write.
func (c *Client) afterLost(ctx context.Context, t *topology, ptr blink.Ptr, err error, w *writeAttempts, retries *int) (*topology, error) {
	if w.lost == nil {
		w.lost = err
	}
	c.countRetry(causeConnLost)
	*retries++
	if gerr := c.giveUp(ctx, *retries, causeConnLost, err); gerr != nil {
		return nil, gerr
	}
	if c.backoff(ctx, *retries) != nil {
		return nil, ctx.Err()
	}
	c.paths.drop(ptr)
	return c.refreshed(ctx, t, *retries, causeConnLost, err)
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
	res, err := c.searchOp(ctx, opLocate, key, nil, c.now(), searchFlags{deep: deep})
	return res.leaf, err
}

func isOutcomeUnknown(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Kind == ErrOutcomeUnknown
}
