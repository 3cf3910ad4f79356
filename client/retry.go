package client

import (
	"context"
	"errors"

	"github.com/cellstore/cell/blink"
)

// The retry policy every operation shares (searches, writes, range
// pages): after an attempt failed, failure decides and waits, the caller
// drops what routed it there, and a retryRefresh refreshes the topology
// (refreshed) before the operation starts again from the root.

// failure decides what an operation does after an attempt on the route
// to ptr in topology t failed with err: classify it (write: the attempt
// changed the store), end the operation if the error is final, the
// region has no live server or the caller's time or patience is spent,
// and otherwise count the retry and wait the backoff that a retrySame,
// or a retryRefresh after a lost connection, wants. It returns what to
// do next, the retry's cause, and, when the disposition is final, the
// error to return (ErrClosed once the client is closed, unless the
// outcome is unknown).
func (c *Client) failure(ctx context.Context, t *topology, ptr blink.Ptr, err error, write bool, retries *int) (disposition, retryCause, error) {
	d, cause, ferr := classify(err, write)
	if d == final {
		if c.isClosed() && !isOutcomeUnknown(ferr) {
			return final, cause, ErrClosed
		}
		return final, cause, ferr
	}
	if cause != causeRestart {
		if derr := c.regionDown(t.failedRegion(err, ptr)); derr != nil {
			return final, cause, derr
		}
	}
	c.countRetry(cause)
	*retries++
	if gerr := c.giveUp(ctx, *retries, cause, err); gerr != nil {
		return final, cause, gerr
	}
	if d == retrySame || d == retryRefresh && cause == causeConnLost {
		if c.backoff(ctx, *retries) != nil {
			return final, cause, c.giveUp(ctx, *retries, cause, err)
		}
	}
	return d, cause, nil
}

// refreshed refreshes topology t after a retryRefresh failure (err, the
// retries-th) and returns the topology to go on with. An error ends the
// operation: the client closed, or the caller's context ended.
func (c *Client) refreshed(ctx context.Context, t *topology, retries int, cause retryCause, err error) (*topology, error) {
	if rerr := c.refresh(ctx, t.gen); rerr != nil && (ctx.Err() != nil || errors.Is(rerr, ErrClosed)) {
		if errors.Is(rerr, ErrClosed) {
			return nil, rerr
		}
		return nil, c.giveUp(ctx, retries, cause, err)
	}
	return c.topo.Load(), nil
}
