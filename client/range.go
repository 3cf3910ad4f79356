package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/wire"
)

// KV is a key, its value and its version: GetKV's always, Range's and
// Scan's with RangeOptions.Versions (0 without). A version
// (docs/transactions.md §2) is never 0 for a present key of a region with
// versions; per key, versions only grow, and a (key, version) pair names
// one content. It is 0 when the key's region has no versions yet (a
// region written before them, until its leader starts them).
type KV struct {
	Key, Value []byte
	Version    uint64
}

// RangeOptions shape a Range or Scan. The zero value asks for every pair
// of [start, end) in ascending order.
type RangeOptions struct {
	// Limit is the most pairs to return; 0 means no limit (Range then
	// returns the whole range, which may be large: prefer Scan).
	Limit int
	// Reverse returns pairs in descending key order.
	Reverse bool
	// KeysOnly returns keys with empty values.
	KeysOnly bool
	// Prefix makes start a key prefix: the range is every key that
	// begins with start, [start, PrefixEnd(start)), as etcd's
	// clientv3.WithPrefix. end must then be nil. An empty prefix is the
	// whole keyspace.
	Prefix bool
	// Versions sets every pair's KV.Version. One-sided pages read it from
	// the leaves; a leaf written before its region had versions is read
	// server-side, which knows the region's legacy version.
	Versions bool
}

// PrefixEnd returns the least key greater than every key that begins with
// prefix, so that [prefix, PrefixEnd(prefix)) holds exactly the keys with
// that prefix (etcd's clientv3.GetPrefixRangeEnd): prefix with its last
// byte below 0xff incremented and the bytes after it dropped. It returns
// nil, an unbounded end for Range and Scan, when there is no such key:
// for an empty prefix or one of 0xff bytes only. The result never aliases
// prefix.
func PrefixEnd(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] < 0xff {
			end := make([]byte, i+1)
			copy(end, prefix)
			end[i]++
			return end
		}
	}
	return nil
}

// bounds checks opts and returns the range's bounds: with Prefix, start
// and PrefixEnd(start).
func (opts *RangeOptions) bounds(start, end []byte) ([]byte, []byte, error) {
	if opts.Limit < 0 {
		return nil, nil, fmt.Errorf("cell: negative range limit %d", opts.Limit)
	}
	if !opts.Prefix {
		return start, end, nil
	}
	if len(end) != 0 {
		return nil, nil, fmt.Errorf("cell: range end %q given with RangeOptions.Prefix (the prefix is start; end must be nil)", end)
	}
	return start, PrefixEnd(start), nil
}

// Range returns the pairs with start <= key < end in ascending order
// (descending with Reverse), at most opts.Limit of them; with
// opts.Prefix, the pairs whose keys begin with start (end must be nil). A
// nil (or empty) start or end leaves that side unbounded. resume is nil
// when the range was exhausted; otherwise pass it as start (ascending) or
// as end (descending) to continue where this call stopped (with Prefix,
// continue without it: Range(ctx, resume, PrefixEnd(prefix), ...)
// ascending, Range(ctx, prefix, resume, ...) descending). The returned
// slices are the caller's: nothing else refers to them.
//
// An empty range is no error: Range returns no pairs and a nil resume.
// Errors are those of Get (ErrUnavailable, ErrClosed, the context's, ...)
// and an error for a negative Limit or an end given with Prefix.
//
// Ranges go page by page (paper §2.2: "Range queries are implemented by
// following right links at the leaf level"), each page served by the
// server (one Range call; a range spanning several meganodes takes one
// per meganode, or more when replies would exceed the frame size) or,
// forward pages only, read client-side, as the selector's page rule
// chooses from the pages' measured costs (see the package doc).
func (c *Client) Range(ctx context.Context, start, end []byte, opts RangeOptions) (pairs []KV, resume []byte, err error) {
	begin := time.Now()
	start, end, err = opts.bounds(start, end)
	if err != nil {
		c.finish(opRange, locality.ServerSide, begin, err)
		return nil, nil, err
	}
	rs := c.newRangeState(start, end, opts)
	pairs, resume, err = rs.all(ctx, opts)
	c.finish(opRange, rs.method, begin, err)
	return pairs, resume, err
}

func (rs *rangeState) all(ctx context.Context, opts RangeOptions) ([]KV, []byte, error) {
	c := rs.c
	var out []KV
	for {
		want := c.cfg.RangePageSize
		if opts.Limit > 0 {
			want = min(want, opts.Limit-len(out))
		}
		var err error
		out, err = rs.page(ctx, want, out)
		if err != nil {
			return nil, nil, err
		}
		if rs.done {
			return out, nil, nil
		}
		if opts.Limit > 0 && len(out) >= opts.Limit {
			return out, rs.resume(), nil
		}
	}
}

// Scan returns an iterator over the pairs with start <= key < end (with
// opts.Prefix, the keys that begin with start; end must be nil), in
// ascending order (descending with Reverse), fetching them a page of
// Config.RangePageSize at a time as the loop consumes them; opts.Limit
// bounds the total. A nil (or empty) start or end leaves that side
// unbounded.
//
// The iterator yields each pair with a nil error. If the scan fails, it
// yields one zero KV with the error, as its last element, and stops: the
// loop sees the error where it handles the pairs, and a loop that ranges
// over the pairs alone (for kv := range ...) ignores errors. Breaking out
// of the loop stops the scan; nothing needs closing.
//
//	for kv, err := range c.Scan(ctx, []byte("user/"), nil, client.RangeOptions{Prefix: true}) {
//		if err != nil {
//			return err
//		}
//		fmt.Printf("%s=%s\n", kv.Key, kv.Value)
//	}
//
// Each yielded KV's Key and Value are the caller's to keep and to modify:
// they stay valid after the next iteration and after the loop, and the
// client never writes them again. (They share one allocation with the
// pairs fetched with them, so keeping one small key keeps its page's
// bytes reachable; copy it to let them go.)
//
// Each range over the iterator is a new scan from start, seeing the
// store as it is then; the iterator may be ranged over concurrently. A
// scan is not a snapshot: each page reads the store as it is when it is
// fetched. Keys come in strictly increasing (decreasing) order, so a key
// present throughout the scan is yielded exactly once; one written or
// deleted during it may or may not be.
func (c *Client) Scan(ctx context.Context, start, end []byte, opts RangeOptions) iter.Seq2[KV, error] {
	return func(yield func(KV, error) bool) {
		begin := time.Now()
		start, end, err := opts.bounds(start, end)
		if err != nil {
			c.finish(opRange, locality.ServerSide, begin, err)
			yield(KV{}, err)
			return
		}
		rs := c.newRangeState(start, end, opts)
		defer func() { c.finish(opRange, rs.method, begin, err) }()
		var buf []KV
		n := 0
		for !rs.done {
			want := c.cfg.RangePageSize
			if opts.Limit > 0 {
				want = min(want, opts.Limit-n)
			}
			if want == 0 {
				return
			}
			buf, err = rs.page(ctx, want, buf[:0])
			if err != nil {
				yield(KV{}, err)
				return
			}
			for _, kv := range buf {
				n++
				if !yield(kv, nil) {
					return
				}
			}
		}
	}
}

// rangeState is a range being paged through.
type rangeState struct {
	c      *Client
	req    wire.RangeRequest
	method locality.Method // of the last page
	// srv is the server whose estimator chose the last client-side page.
	srv *server
	// loads: that page's region is read by loads (shm), bounded by
	// Config.CPUSlots.
	loads bool
	done  bool
	// last is the resume point the last reply gave.
	last []byte
}

func (c *Client) newRangeState(start, end []byte, opts RangeOptions) *rangeState {
	rs := &rangeState{c: c}
	rs.req = wire.RangeRequest{
		Start: start, End: end,
		StartUnbounded: len(start) == 0, EndUnbounded: len(end) == 0,
		Reverse: opts.Reverse, KeysOnly: opts.KeysOnly, WithVersions: opts.Versions,
	}
	if rs.req.StartUnbounded {
		rs.req.Start = nil
	}
	if rs.req.EndUnbounded {
		rs.req.End = nil
	}
	if !opts.Reverse && !rs.req.StartUnbounded {
		// Start at the cached leaf meganode of the first key.
		if info, ok := c.paths.lookup(start); ok && info.level == 0 {
			rs.req.Ptr = info.ptr
		}
	}
	if !rs.req.StartUnbounded && !rs.req.EndUnbounded && string(start) >= string(end) {
		rs.done = true
	}
	return rs
}

// resume returns the key to continue the range at.
func (rs *rangeState) resume() []byte { return rs.last }

// page fetches up to want pairs and appends copies of them to out. It
// retries errors that leave the request unexecuted, as searches do.
func (rs *rangeState) page(ctx context.Context, want int, out []KV) ([]KV, error) {
	c := rs.c
	if c.isClosed() {
		return out, ErrClosed
	}
	if want <= 0 || rs.done {
		return out, nil
	}
	t := c.topo.Load()
	if rs.pageMethod(t) == locality.ClientSide {
		start := c.mono()
		slots := c.cfg.CPUSlots
		if !rs.loads {
			slots = nil
		}
		held, err := slots.acquire(ctx)
		if err != nil {
			return out, err
		}
		got, err := rs.clientPage(ctx, t, want, out)
		slots.release(held)
		switch {
		case err == nil:
			c.observePage(rs.srv, locality.ClientSide, start, c.mono(), len(got)-len(out))
			rs.method = locality.ClientSide
			return got, nil
		case errors.Is(err, errRestart):
			return out, wrapErr(ErrUnavailable, errors.New("client-side range page restarted too often"))
		case !errors.Is(err, errNoReader):
			return out, err
		}
		// errNoReader: the server serves the page after all.
	}
	rs.method = locality.ServerSide
	rs.req.Limit = uint32(want)
	var body []byte
	var redirect *server // where a WrongServer reply sent us
	for retries := 0; ; {
		srv, reg, ok := t.route(rs.req.Ptr)
		if redirect != nil {
			srv, ok = redirect, true
		}
		var err error
		if !ok {
			err = fmt.Errorf("%w %d (meganode %v)", errNoRoute, rs.req.Ptr.Region(), rs.req.Ptr)
		} else {
			rs.req.Epoch = 0
			if reg != nil {
				rs.req.Epoch = reg.epoch
			}
			body = rs.req.AppendTo(body[:0])
			var f wire.Frame
			start := c.mono()
			f, err = srv.call(ctx, wire.OpRange, body)
			if err == nil {
				n := len(out)
				out, err = rs.take(&f, out)
				f.Release()
				if err == nil {
					c.observePage(srv, locality.ServerSide, start, c.mono(), len(out)-n)
				}
				return out, err
			}
		}
		d, cause, ferr := c.failure(ctx, t, rs.req.Ptr, err, false, &retries)
		switch d {
		case final:
			return out, ferr
		case retryRestart:
			c.paths.drop(rs.req.Ptr)
			rs.req.Ptr = 0
		case retryRefresh:
			if redirect = c.noteRedirect(err); redirect != nil {
				// The server named the one that holds the range's
				// start: go there with the same request.
				continue
			}
			c.paths.drop(rs.req.Ptr)
			rs.req.Ptr = 0
			if t, err = c.refreshed(ctx, t, retries, cause, err); err != nil {
				return out, err
			}
		}
	}
}

// take decodes a range reply, appends copies of its pairs to out and
// moves the request on to the resume point.
func (rs *rangeState) take(f *wire.Frame, out []KV) ([]KV, error) {
	var rep wire.RangeReply
	if err := rep.Decode(f.Body); err != nil {
		return out, wrapErr(ErrServer, err)
	}
	// One allocation for the page's bytes, one for the pairs.
	n := 0
	for i := range rep.Pairs {
		n += len(rep.Pairs[i].Key) + len(rep.Pairs[i].Value)
	}
	arena := make([]byte, 0, n)
	out = growKV(out, len(rep.Pairs))
	for i := range rep.Pairs {
		kv := &rep.Pairs[i]
		k0 := len(arena)
		arena = append(arena, kv.Key...)
		v0 := len(arena)
		arena = append(arena, kv.Value...)
		out = append(out, KV{Key: arena[k0:v0:v0], Value: arena[v0:len(arena):len(arena)], Version: kv.Version})
	}
	if !rep.More {
		rs.done = true
		rs.last = nil
		return out, nil
	}
	if len(rep.Resume) == 0 && rep.Next.IsNil() {
		return out, wrapErr(ErrServer, errors.New("range reply with more but no resume point"))
	}
	rs.last = append([]byte(nil), rep.Resume...)
	if rs.req.Reverse {
		rs.req.End, rs.req.EndUnbounded = rs.last, len(rs.last) == 0
	} else {
		rs.req.Start, rs.req.StartUnbounded = rs.last, len(rs.last) == 0
	}
	if rs.req.EndUnbounded {
		rs.req.End = nil
	}
	if rs.req.StartUnbounded {
		rs.req.Start = nil
	}
	rs.req.Ptr = rep.Next // nil: wherever the server finds the resume key
	return out, nil
}

func growKV(s []KV, n int) []KV {
	if cap(s)-len(s) >= n {
		return s
	}
	ns := make([]KV, len(s), len(s)+n)
	copy(ns, s)
	return ns
}
