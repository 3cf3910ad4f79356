package client

import (
	"context"
	"fmt"

	"github.com/cellstore/cell/wire"
)

// serverHop asks srv for one meganode hop of the search (paper §2.2,
// "(Server-side) search and caching"): the server searches the meganode at
// h.ptr (nil: the root) and answers with the leaf result, or the pointer
// to continue at, together with the meganode's level, height and key
// range, which go into the path cache. The round trip, with the queueing
// and service time the server reports, feeds the selector's l_s.
func (op *searchOp) serverHop(ctx context.Context, h *hopState, srv *server, reg *region) (hopState, bool, error) {
	c := op.c
	req := wire.SearchRequest{Ptr: h.ptr, WantValue: op.kind == opGet, WantVersion: op.wantVersion, Key: op.key}
	if reg != nil {
		req.Epoch = reg.epoch
	}
	op.sc.body = req.AppendTo(op.sc.body[:0])
	start := c.mono()
	f, err := srv.call(ctx, wire.OpSearch, op.sc.body)
	if err != nil {
		return hopState{}, false, err
	}
	defer f.Release()
	end := c.mono()
	op.now = c.at(end)
	if c.sysClock {
		srv.est.ObserveServerAt(end-start, f.Header.QueueTime(), f.Header.ServiceTime(), op.now)
	} else {
		srv.est.ObserveServer(end-start, f.Header.QueueTime(), f.Header.ServiceTime())
	}
	var rep wire.SearchReply
	if err := rep.Decode(f.Body); err != nil {
		return hopState{}, false, wrapErr(ErrServer, err)
	}
	mn := &rep.Meganode
	c.sel.ObserveHeight(int(mn.Height))
	if h.fromCache && mn.Ptr != h.ptr {
		// The server followed meganode right links: the meganode we
		// started at no longer covers the key (paper §2.3: following a
		// right link invalidates what was cached from the parent).
		c.paths.drop(h.ptr)
	}
	c.learnMeganode(mn)
	switch rep.Kind {
	case wire.SearchLeaf:
		op.res.found = rep.Found
		op.res.leaf = mn.Ptr
		if op.kind == opGet && rep.Found {
			if !rep.HasValue {
				return hopState{}, false, wrapErr(ErrServer, fmt.Errorf("search reply for %q found it without its value", op.key))
			}
			op.res.value = append(op.res.value, rep.Value...)
		}
		if rep.HasVersion {
			op.res.version = rep.Version
		}
		return hopState{}, true, nil
	case wire.SearchNext:
		if rep.Next.IsNil() {
			return hopState{}, false, wrapErr(ErrServer, fmt.Errorf("search reply to continue at a nil meganode"))
		}
		// Next is a child or a right sibling: its level is unknown until
		// its header or the next reply tells.
		return hopState{meganodeInfo: meganodeInfo{ptr: rep.Next, level: -1}}, false, nil
	}
	return hopState{}, false, wrapErr(ErrServer, fmt.Errorf("search reply of kind %v", rep.Kind))
}

// learnMeganode records a meganode a server described in the path cache.
// It copies the key range only when the entry is new or changed.
func (c *Client) learnMeganode(mn *wire.Meganode) {
	if c.paths == nil || mn.Ptr.IsNil() {
		return
	}
	if c.paths.fresh(mn.Ptr, int(mn.Level), int(mn.Height), &mn.Range) {
		return
	}
	c.paths.insert(meganodeInfo{ptr: mn.Ptr, level: int(mn.Level), height: int(mn.Height), rng: ownedRange(&mn.Range)})
}
