package server

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// scan serves OpRange: the pairs with Start <= key < End in order (or in
// reverse), read lock-free from the leaf meganodes of this server. It stops
// at the request's limit (capped to Options.MaxRangePairs), before the
// reply would pass the frame limit, or where the range continues on
// another server, and then says More with the point to resume at: Start =
// Resume forward, End = Resume in reverse, at meganode Next when not nil.
// Meganodes on this server are crossed within one request: forward by the
// right link leaving a meganode or, when there is none, by a search for
// the meganode's max key from the root; backward by a search from the root
// for the keys below a meganode's min key (B-link trees have no left
// links).
func (w *worker) scan(body []byte) (wire.Message, error) {
	req := &w.rangeReq
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	s := w.s
	var lower, upper []byte // nil: unbounded
	if !req.StartUnbounded && len(req.Start) > 0 {
		lower = req.Start // "" <= every key: the same as unbounded
	}
	if !req.EndUnbounded {
		if len(req.End) == 0 {
			upper = []byte{} // nothing is below ""
		} else {
			upper = req.End
		}
	}
	if len(lower) > s.reps.own.sm.MaxKey() || len(upper) > s.reps.own.sm.MaxKey() {
		return nil, wireErrorf(wire.StatusKeyTooLarge, "range bound of %d bytes, limit %d", max(len(lower), len(upper)), s.reps.own.sm.MaxKey())
	}
	limit, capped := int(req.Limit), false
	if limit == 0 || limit > s.opts.MaxRangePairs {
		limit, capped = s.opts.MaxRangePairs, true
	}
	rep := &w.rangeRep
	pairs := rep.Pairs[:0]
	*rep = wire.RangeReply{}
	w.arena, w.spans = w.arena[:0], w.spans[:0]
	defer func() {
		for _, sp := range w.spans {
			k := w.arena[sp.off : sp.off+sp.klen : sp.off+sp.klen]
			v := w.arena[sp.off+sp.klen : sp.off+sp.klen+sp.vlen : sp.off+sp.klen+sp.vlen]
			pairs = append(pairs, wire.KV{Key: k, Value: v, Version: sp.ver})
		}
		rep.Pairs = pairs
		rep.Versions = req.WithVersions
	}()
	if upper != nil && (len(upper) == 0 || lower != nil && bytes.Compare(lower, upper) >= 0) {
		return rep, nil // an empty range
	}
	lm, err := w.startAt(req.Ptr, req.Epoch, "range")
	if err != nil {
		return nil, err
	}
	frame := s.rpc.rangeBudget()
	sc := scanner{w: w, rep: rep, limit: limit, capped: capped, keysOnly: req.KeysOnly, versions: req.WithVersions,
		budget: min(frame, s.opts.MaxRangeBytes), frame: frame}
	if req.Reverse {
		err = sc.backward(lm, lower, upper)
	} else {
		err = sc.forward(lm, lower, upper)
	}
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// rangeBudget is the most bytes of pairs a range reply carries: the frame
// limit less the header and the reply's other fields (count, flags, a
// resume key of at most maxKey bytes, next pointer).
func (rs *rpcServer) rangeBudget() int {
	s := rs.s
	return s.opts.MaxFrameSize - wire.HeaderSize - (4 + 1 + 4 + s.reps.own.sm.MaxKey() + 8) - 64
}

// scanner is one range request in progress.
type scanner struct {
	w        *worker
	rep      *wire.RangeReply
	limit    int
	capped   bool // limit is MaxRangePairs, not the request's own
	keysOnly bool
	versions bool // each pair's version too (RangeRequest.WithVersions)
	budget   int  // bytes of pairs: MaxRangeBytes, at most frame
	frame    int  // bytes of pairs that fit a frame
	size     int
}

// add appends a pair and its version to the reply; it reports false (and
// adds nothing) when the pair would pass the byte budget. The first pair
// only has to fit the frame, so that every reply makes progress.
func (sc *scanner) add(k, v []byte, ver uint64) bool {
	n := len(k) + len(v) + wire.RangePairOverhead
	if sc.versions {
		n += wire.RangeVersionOverhead
	}
	if sc.size+n > sc.budget && (len(sc.w.spans) > 0 || n > sc.frame) {
		if sc.size+n <= sc.frame {
			sc.w.s.metrics.refusals.WithLabelValues(refuseRangeBytes).Inc()
		}
		return false
	}
	sc.size += n
	w := sc.w
	off := len(w.arena)
	w.arena = append(append(w.arena, k...), v...)
	w.spans = append(w.spans, span{off: off, klen: len(k), vlen: len(v), ver: ver})
	return true
}

// more ends the reply with More: continue at resume (copied), in meganode
// next when not nil. A scan that returned nothing yet from an unbounded
// side continues at next with an empty Resume, which keeps that side
// unbounded; one whose root is elsewhere is redirected.
func (sc *scanner) more(resume []byte, next blink.Ptr) error {
	w := sc.w
	if resume == nil && len(w.spans) == 0 && next.IsNil() {
		return w.s.redirect(blink.Ptr(w.s.root.Load()).Region(), "range")
	}
	w.resume = append(w.resume[:0], resume...)
	sc.rep.More, sc.rep.Resume, sc.rep.Next = true, w.resume, next
	return nil
}

// cutRows counts a reply cut short by MaxRangePairs (not by the request's
// own limit).
func (sc *scanner) cutRows() {
	if sc.capped {
		sc.w.s.metrics.refusals.WithLabelValues(refuseRangeRows).Inc()
	}
}

// lastKey returns the key of the last pair added.
func (sc *scanner) lastKey() []byte {
	sp := sc.w.spans[len(sc.w.spans)-1]
	return sc.w.arena[sp.off : sp.off+sp.klen]
}

// value reads the iterator's current value unless the scan is keys-only;
// ok is false when the key was deleted since the leaf was copied.
func (sc *scanner) value(it *blink.Iter) (v []byte, ok bool, err error) {
	if sc.keysOnly {
		return nil, true, nil
	}
	v, err = it.Value()
	if errors.Is(err, blink.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// rootMeganode returns the root meganode if it is on this server.
func (w *worker) rootMeganode() *rsm.Meganode {
	return w.s.servedMeganode(blink.Ptr(w.s.root.Load()))
}

func (sc *scanner) forward(lm *rsm.Meganode, cur, upper []byte) error {
	w := sc.w
	for i := range maxHops {
		leaf, next, err := w.edgeLeaf(lm, cur, false, i == 0)
		if err != nil {
			return err
		}
		if !next.IsNil() {
			return sc.more(cur, next)
		}
		it := leaf.T.NewIter(&blink.IterOptions{Lower: cur, Upper: upper})
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			if len(w.spans) == sc.limit {
				sc.cutRows()
				return sc.more(k, leaf.Ptr())
			}
			v, present, err := sc.value(it)
			if err != nil {
				return err
			}
			if present && !sc.add(k, v, it.Word().Version()) {
				return sc.more(k, leaf.Ptr())
			}
		}
		if err := it.Error(); err != nil {
			return err
		}
		// No more keys of the range in this meganode: does the range go
		// on to its right? From the max of the last leaf visited, not the
		// header's: a split moves the header's max while we iterate.
		edge, more := it.Edge()
		if !more {
			return nil
		}
		w.maxMin = append(w.maxMin[:0], edge...)
		cur = w.maxMin
		if b := it.Boundary(); !b.IsNil() {
			if lm = w.s.servedMeganode(b); lm == nil {
				return sc.more(cur, b)
			}
			continue
		}
		if lm = w.rootMeganode(); lm == nil {
			return sc.more(cur, 0) // the root is elsewhere: restart there
		}
	}
	return sc.more(cur, 0)
}

func (sc *scanner) backward(lm *rsm.Meganode, lower, upper []byte) error {
	w := sc.w
	for i := range maxHops {
		leaf, next, err := w.edgeLeaf(lm, upper, true, i == 0)
		if err != nil {
			return err
		}
		if !next.IsNil() {
			if len(w.spans) > 0 {
				return sc.more(sc.lastKey(), next)
			}
			return sc.more(upper, next)
		}
		it := leaf.T.NewIter(&blink.IterOptions{Lower: lower, Upper: upper})
		defer it.Close()
		for ok := it.Last(); ok; ok = it.Prev() {
			k := it.Key()
			if len(w.spans) == sc.limit {
				sc.cutRows()
				return sc.more(sc.lastKey(), leaf.Ptr())
			}
			v, present, err := sc.value(it)
			if err != nil {
				return err
			}
			if present && !sc.add(k, v, it.Word().Version()) {
				return sc.more(sc.lastKey(), leaf.Ptr())
			}
		}
		if err := it.Error(); err != nil {
			return err
		}
		if b := it.Boundary(); !b.IsNil() {
			// The keys below the edge lie right of this meganode's
			// current range (a split moved them): go on there.
			edge, _ := it.Edge()
			if edge == nil {
				upper = nil
			} else {
				w.maxMin = append(w.maxMin[:0], edge...)
				upper = w.maxMin
			}
			if lm = w.s.servedMeganode(b); lm == nil {
				if len(w.spans) > 0 {
					return sc.more(sc.lastKey(), b)
				}
				return sc.more(upper, b)
			}
			continue
		}
		h, err := w.header(leaf)
		if err != nil {
			return err
		}
		if h.Bounds.MinInf || lower != nil && bytes.Compare(lower, h.Bounds.Min) >= 0 {
			return nil
		}
		w.maxMin = append(w.maxMin[:0], h.Bounds.Min...)
		upper = w.maxMin
		if lm = w.rootMeganode(); lm == nil {
			return sc.more(upper, 0)
		}
	}
	return sc.more(upper, 0)
}

// edgeLeaf descends from lm through this server's meganodes to the leaf
// meganode where a scan goes on: forward, the one holding key (nil: the
// first key); backward, the one holding the last key below key (nil: the
// last key). A non-nil pointer means that meganode is elsewhere. first
// says lm is the request's own start (noChild).
func (w *worker) edgeLeaf(lm *rsm.Meganode, key []byte, backward, first bool) (*rsm.Meganode, blink.Ptr, error) {
	start := lm
	for range maxHops {
		if lm.Level == 0 {
			return lm, 0, nil
		}
		var child blink.Ptr
		if !backward && key != nil {
			res, err := lm.T.Search(key)
			if err != nil {
				return nil, 0, err
			}
			if child = res.Next; child.IsNil() {
				child = res.Child
			}
		} else {
			it := lm.T.NewIter(nil)
			defer it.Close()
			var ok bool
			switch {
			case !backward:
				ok = it.First()
			case key == nil:
				ok = it.Last()
			default:
				if ok = it.SeekLT(key); !ok && it.Error() == nil && it.Boundary().IsNil() {
					ok = it.First() // key is at or below the first child's key
				}
			}
			if err := it.Error(); err != nil {
				return nil, 0, err
			}
			if ok {
				child = it.Child()
			} else if b := it.Boundary(); !b.IsNil() {
				// The position lies right of this meganode's current
				// range (a split moved it): go on at the same level.
				if nl := w.s.servedMeganode(b); nl != nil {
					lm = nl
					continue
				}
				return nil, b, nil
			}
		}
		if child.IsNil() {
			return nil, 0, noChild(lm, first && lm == start, "a scan")
		}
		if nl := w.s.servedMeganode(child); nl != nil {
			lm = nl
			continue
		}
		return nil, child, nil
	}
	return nil, 0, fmt.Errorf("server: scan crossed %d meganodes: %w", maxHops, blink.ErrCorruption)
}
