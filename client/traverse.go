package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/locality"
)

// opLocate is an internal search kind: find the leaf meganode of a key
// (for a write), without searching inside it.
const opLocate = numOpKinds

// hopState is where one meganode hop starts: the meganode (its header
// pointer) and what is known of it. level is -1 when unknown (a pointer a
// server returned), root nil when the local root must be read from the
// header.
type hopState struct {
	meganodeInfo
	// fromCache: the info came from the path cache (drop it if wrong).
	fromCache bool
	// via is the cached node whose entry pointed at this meganode, nil if
	// the pointer came from a fresh copy or a server (drop it if wrong).
	via blink.Ptr
}

// searchResult is the outcome of a search.
type searchResult struct {
	found   bool
	value   []byte          // dst with the value appended (get)
	version uint64          // the key's version (wantVersion; 0: none known)
	method  locality.Method // of the last hop
	leaf    blink.Ptr       // the leaf meganode reached (locate, server-side leaf hops)
}

// searchOp is one Get, Contains or locate in progress. Not shared between
// goroutines.
type searchOp struct {
	c    *Client
	kind opKind
	key  []byte
	t    *topology
	sc   *opScratch
	res  searchResult

	retries  int // RPC-level retries used (Config.MaxRetries)
	restarts int // torn re-reads and traversal restarts (Config.MaxRestarts)
	corrupt  int // consistent copies that did not decode (maxCorrupt)
	// bypass makes the op ignore both caches, after restarts suggest they
	// hold stale entries the op keeps meeting.
	bypass bool
	// forceServer makes every remaining hop server-side, after a
	// one-sided read failed (the region moved, or its registration went),
	// or met a leaf whose versions only the server knows.
	forceServer bool
	// wantVersion: the search returns the key's version too (GetKV).
	wantVersion bool
	// deep makes a locate search the leaf meganode too, following its
	// right links: after a write was refused by the leaf meganode its
	// parent names, whose keys a split moved to another server before the
	// separator reached the parent.
	deep bool

	// now is the op's latest time reading (its start, then the end of its
	// last read, RPC or recovery), for the selector: see observe.go.
	now time.Time
	// reads are the current hop's one-sided reads not yet handed to the
	// selector.
	reads hopReads
}

// errRestart asks the op loop to restart the search from the root (or the
// path cache); the cause was counted where it was found.
var errRestart = errors.New("cell: restart search")

// errNeedsServer: a one-sided hop met what only the server can answer (a
// leaf written before the region had versions, whose version the client
// cannot tell): the hop is done again server-side.
var errNeedsServer = errors.New("cell: the server must answer this hop")

// errNoRoute: a pointer's region is not in the topology.
var errNoRoute = errors.New("cell: no server known for region")

// bypassAfter is how many restarts of one op make it bypass the caches.
const bypassAfter = 8

// search runs a search for key of the given kind (opGet, opContains,
// opLocate), which started at start (a Client.now reading); a get appends
// the value to dst.
func (c *Client) search(ctx context.Context, kind opKind, key, dst []byte, start time.Time) (searchResult, error) {
	return c.searchOp(ctx, kind, key, dst, start, searchFlags{})
}

// searchFlags shape a search: deep applies to a locate (searchOp.deep),
// version to a get (searchOp.wantVersion).
type searchFlags struct {
	deep, version bool
}

// searchOp is search with flags.
func (c *Client) searchOp(ctx context.Context, kind opKind, key, dst []byte, start time.Time, fl searchFlags) (searchResult, error) {
	if c.isClosed() {
		return searchResult{}, ErrClosed
	}
	t := c.topo.Load()
	if err := checkKey(t, key); err != nil {
		return searchResult{}, err
	}
	op := searchOp{c: c, kind: kind, key: key, t: t, sc: c.getScratch(t.nodeSize), now: start, deep: fl.deep, wantVersion: fl.version}
	op.res.value = dst
	err := op.run(ctx)
	op.flushReads()
	c.putScratch(op.sc)
	if err != nil {
		op.res.value = dst
	}
	return op.res, err
}

// run is the op loop: hop from meganode to meganode, and recover from
// errors by retrying the hop, or restarting from the root (after a
// topology refresh when routing was stale).
func (op *searchOp) run(ctx context.Context) error {
	h := op.start()
	for {
		next, done, err := op.hop(ctx, &h)
		if err == nil {
			if done {
				return nil
			}
			h = next
			continue
		}
		again, err := op.recover(ctx, err, &h)
		if err != nil {
			return err
		}
		if !again {
			h = op.start()
		}
	}
}

// start returns the hop to begin with: the deepest cached meganode
// covering the key, or the root.
func (op *searchOp) start() hopState {
	if !op.bypass {
		if info, ok := op.c.paths.lookup(op.key); ok {
			return hopState{meganodeInfo: info, fromCache: true}
		}
	}
	return hopState{meganodeInfo: meganodeInfo{ptr: op.t.root, level: -1}}
}

// hop runs one meganode hop, server-side or client-side as the selector
// chooses. It returns the next hop, or done when the search ended.
func (op *searchOp) hop(ctx context.Context, h *hopState) (hopState, bool, error) {
	if err := ctx.Err(); err != nil {
		return hopState{}, false, err
	}
	if op.kind == opLocate && h.level == 0 && !op.deep {
		op.res.leaf = h.ptr
		return hopState{}, true, nil
	}
	srv, reg, ok := op.t.route(h.ptr)
	if !ok {
		return hopState{}, false, fmt.Errorf("%w %d (meganode %v)", errNoRoute, h.ptr.Region(), h.ptr)
	}
	method := locality.ServerSide
	switch {
	case op.kind == opScan:
		// A client-side range page: every hop client-side.
		if reg == nil || reg.reader == nil || op.forceServer {
			return hopState{}, false, errNoReader
		}
		method = locality.ClientSide
	case reg != nil && reg.reader != nil && !op.forceServer:
		method = op.choose(srv)
	}
	op.c.counters.hops[method].Add(1)
	op.res.method = method
	if method == locality.ClientSide {
		// A scan's hops run inside its page, which holds the slot.
		if op.kind != opScan && reg.loads() {
			held, wait, err := op.c.cfg.CPUSlots.acquireTimed(ctx, op.c.mono)
			if err != nil {
				return hopState{}, false, err
			}
			op.reads.wait = wait
			defer op.c.cfg.CPUSlots.release(held)
		}
		next, done, err := op.clientHop(ctx, h)
		op.flushReads()
		op.reads.wait = 0 // a hop that read nothing one-sided
		return next, done, err
	}
	return op.serverHop(ctx, h, srv, reg)
}

// recover decides what to do after a hop failed: again reports that the
// same hop is to be retried; otherwise the op restarts. A non-nil error
// ends the op.
func (op *searchOp) recover(ctx context.Context, err error, h *hopState) (again bool, _ error) {
	c := op.c
	// Backoffs and refreshes take time: the next hop's choice gets a
	// fresh reading.
	defer func() { op.now = c.now() }()
	if errors.Is(err, errNoReader) {
		return false, err
	}
	if errors.Is(err, errNeedsServer) {
		// The same hop again, and every one after it, server-side.
		op.forceServer = true
		return true, nil
	}
	if errors.Is(err, errRestart) {
		op.restarts++
		if op.restarts > c.cfg.MaxRestarts {
			return false, wrapErr(ErrUnavailable, fmt.Errorf("search restarted %d times", op.restarts))
		}
		if op.restarts >= bypassAfter {
			op.bypass = true
		}
		return false, ctx.Err()
	}
	if c.isClosed() {
		return false, ErrClosed
	}
	d, cause, ferr := c.failure(ctx, op.t, h.ptr, err, false, &op.retries)
	switch d {
	case final:
		return false, ferr
	case retrySame:
		return true, nil
	case retryRestart:
		op.dropHop(h)
		return false, nil
	}
	// retryRefresh
	c.noteRedirect(err)
	op.dropHop(h)
	t, err := c.refreshed(ctx, op.t, op.retries, cause, err)
	if err != nil {
		return false, err
	}
	op.t = t
	if len(op.sc.node) != op.t.nodeSize {
		op.sc.node = make([]byte, op.t.nodeSize)
	}
	return false, nil
}

// dropHop forgets the cached routing that led to hop h.
func (op *searchOp) dropHop(h *hopState) {
	if h.fromCache {
		op.c.paths.drop(h.ptr)
	}
	if !h.via.IsNil() {
		op.c.nodes.drop(h.via)
	}
}

// backoff sleeps before retry n (1-based): RetryBackoff doubling up to
// MaxRetryBackoff, ±50% jitter, or until ctx ends.
func (c *Client) backoff(ctx context.Context, n int) error {
	d := c.cfg.RetryBackoff
	for i := 1; i < n && d < c.cfg.MaxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxRetryBackoff)
	if d <= 0 {
		return ctx.Err()
	}
	d = d/2 + time.Duration(rand.Int64N(int64(d)+1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closing:
		return ErrClosed
	}
}

// kickRefresh asks the background loop for a topology refresh soon.
func (c *Client) kickRefresh() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}
