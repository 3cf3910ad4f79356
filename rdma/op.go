package rdma

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Op is one asynchronous read of one registered region: a single range
// (Prepare) or a vector of ranges (PrepareV). Post it with Client.Post and
// take its completion from the CQ given there; Err then reports the
// outcome. An Op may be posted again once its completion has been taken.
// The zero Op is ready to be prepared. An Op must not be copied after first
// use.
//
// While the op is in flight (from Post until its completion is taken), the
// op, its Remote and every Dst belong to the provider (see Client).
type Op struct {
	// Remote is the region to read.
	Remote *RemoteKey
	// Segs are the ranges to read.
	Segs []Segment
	// Tag is the caller's: providers never read or change it.
	Tag uint64

	err error
	// state is gen<<phaseBits | phase. gen counts posts, so that a
	// cancellation armed for one post can never cancel a later one.
	state atomic.Uint64
	cq    *CQ
	mu    sync.Mutex  // guards stop
	stop  func() bool // stops the context watch of the current post
	one   [1]Segment  // Segs of a Prepare'd op, without allocating
	reqID uint64      // tcp: the request id while in flight
	conn  *tcpConn    // tcp: the connection while in flight
}

// Phases of an op (the low phaseBits bits of Op.state).
const (
	opIdle      = 0 // never posted, or its completion was taken
	opPosted    = 1 // posted: whoever moves it on completes it
	opClaimed   = 2 // a provider is filling it in and will complete it
	opCancelled = 3 // its context ended; the canceller completes it
	opDone      = 4 // completed, waiting in its CQ
	phaseBits   = 3
	opPhaseMask = 1<<phaseBits - 1
)

// Prepare sets op up to read len(dst) bytes at offset off of rk into dst.
func (op *Op) Prepare(rk *RemoteKey, off uint64, dst []byte) {
	op.Remote = rk
	op.one[0] = Segment{Off: off, Dst: dst}
	op.Segs = op.one[:1]
}

// PrepareV sets op up to read every segment of rk. segs is used in place.
func (op *Op) PrepareV(rk *RemoteKey, segs []Segment) {
	op.Remote = rk
	op.Segs = segs
}

// Err returns the outcome of the op's last completed post: nil when every
// segment was read. Call it after taking the completion from the CQ.
func (op *Op) Err() error { return op.err }

// begin moves an idle op to posted for cq, reserving its completion slot.
// It returns the post's generation.
func (op *Op) begin(cq *CQ) (uint64, error) {
	if cq == nil {
		return 0, errors.New("rdma: Post needs a completion queue")
	}
	cur := op.state.Load()
	gen := cur>>phaseBits + 1
	if cur&opPhaseMask != opIdle || !op.state.CompareAndSwap(cur, gen<<phaseBits|opPosted) {
		return 0, ErrInFlight
	}
	if !cq.reserve() {
		op.state.Store(cur)
		return 0, fmt.Errorf("rdma: %d completions outstanding: %w", cq.Depth(), ErrCQFull)
	}
	op.cq = cq
	op.err = nil
	return gen, nil
}

// abort undoes begin when the post failed before anything was started.
func (op *Op) abort() {
	op.cq.release()
	op.cq = nil
	op.state.Store(op.state.Load() &^ opPhaseMask)
}

// claim moves a posted op to claimed; false if it is no longer posted (a
// cancellation won). The claimer must complete the op.
func (op *Op) claim() bool {
	cur := op.state.Load()
	return cur&opPhaseMask == opPosted && op.state.CompareAndSwap(cur, cur&^opPhaseMask|opClaimed)
}

// cancel moves the post gen from posted to cancelled; false if it was
// claimed, completed or superseded. The canceller must complete the op.
func (op *Op) cancel(gen uint64) bool {
	return op.state.CompareAndSwap(gen<<phaseBits|opPosted, gen<<phaseBits|opCancelled)
}

// canceller cancels post gen of op with err, if it is still in flight.
type canceller interface {
	cancelOp(op *Op, gen uint64, err error)
}

// watch arms ctx: when it ends while post gen is in flight, c cancels the
// op. A context that can end costs an allocation, so synchronous reads
// select on ctx.Done instead.
func (op *Op) watch(ctx context.Context, gen uint64, c canceller) {
	if ctx.Done() == nil {
		return
	}
	op.mu.Lock()
	op.stop = context.AfterFunc(ctx, func() { c.cancelOp(op, gen, ctxErr(ctx)) })
	op.mu.Unlock()
}

// complete records err and delivers the op to its CQ; taking it from there
// makes it idle again. REQUIRES: the caller owns the completion (it claimed or cancelled
// the op, or completed it synchronously).
func (op *Op) complete(err error) {
	op.err = err
	op.mu.Lock()
	stop := op.stop
	op.stop = nil
	op.mu.Unlock()
	if stop != nil {
		stop()
	}
	cq := op.cq
	op.cq = nil
	op.conn = nil
	op.state.Store(op.state.Load()&^opPhaseMask | opDone)
	cq.ch <- op // never blocks: begin reserved a slot
}

// ctxErr wraps the error of an ended context.
func ctxErr(ctx context.Context) error {
	return fmt.Errorf("rdma: read abandoned: %w", context.Cause(ctx))
}

// CQ is a completion queue: posted ops are delivered to it as they
// complete, in completion order. Its depth bounds the completions
// outstanding (posted and not yet taken): Post fails with ErrCQFull beyond
// it, so completing never blocks a provider. Safe for concurrent use.
type CQ struct {
	ch          chan *Op
	outstanding atomic.Int64
}

// NewCQ returns a completion queue of the given depth (at least 1).
func NewCQ(depth int) *CQ {
	depth = max(depth, 1)
	return &CQ{ch: make(chan *Op, depth)}
}

// Depth returns the most completions the queue can have outstanding.
func (cq *CQ) Depth() int { return cap(cq.ch) }

// Outstanding returns the number of ops posted to the queue whose
// completion has not been taken yet.
func (cq *CQ) Outstanding() int { return int(cq.outstanding.Load()) }

// Wait returns the next completed op, waiting for one until ctx ends. Ops
// in flight stay in flight when Wait gives up.
func (cq *CQ) Wait(ctx context.Context) (*Op, error) {
	select {
	case op := <-cq.ch:
		return cq.taken(op), nil
	default:
	}
	select {
	case op := <-cq.ch:
		return cq.taken(op), nil
	case <-ctx.Done():
		return nil, ctxErr(ctx)
	}
}

// Poll returns a completed op, or nil if none is ready.
func (cq *CQ) Poll() *Op {
	select {
	case op := <-cq.ch:
		return cq.taken(op)
	default:
		return nil
	}
}

// taken accounts for op leaving the queue and makes it idle (postable).
func (cq *CQ) taken(op *Op) *Op {
	cq.release()
	op.state.Store(op.state.Load() &^ opPhaseMask)
	return op
}

func (cq *CQ) reserve() bool {
	if cq.outstanding.Add(1) > int64(cap(cq.ch)) {
		cq.outstanding.Add(-1)
		return false
	}
	return true
}

func (cq *CQ) release() { cq.outstanding.Add(-1) }

// ReadAll posts every op to c and waits for all of them, even when ctx ends
// first (they then complete promptly with ctx's error), so that every
// destination is the caller's again when it returns. It returns the first
// error met, or nil; each op's Err tells its own outcome (an op that could
// not be posted reports why, unless it was in flight elsewhere).
func ReadAll(ctx context.Context, c Client, ops []*Op) error {
	if len(ops) == 0 {
		return nil
	}
	cq := NewCQ(len(ops))
	var first error
	posted := 0
	for _, op := range ops {
		if err := c.Post(ctx, op, cq); err != nil {
			if !errors.Is(err, ErrInFlight) {
				op.err = err // the op is idle: its outcome is the caller's to read
			}
			if first == nil {
				first = err
			}
			continue
		}
		posted++
	}
	for range posted {
		op, _ := cq.Wait(context.Background())
		if err := op.Err(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
