package server

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// maxHops bounds the meganodes one request visits on this server: a
// B-link tree of meganodes is a few levels deep, so more means a cycle
// (corruption) and must not spin a worker.
const maxHops = 64

// worker is one worker goroutine's state: decode targets, reply messages
// and buffers reused from request to request. Decoded requests alias the
// frame's body and replies alias the buffers: both live until the reply is
// written.
//
// Its 25 fields are those decode targets, replies and buffers, one per
// kind of request, kept so that serving allocates nothing; its methods
// are the handlers, one per op, and their steps.
type worker struct {
	s *Server

	searchReq wire.SearchRequest
	getReq    wire.GetRequest
	putReq    wire.PutRequest
	delReq    wire.DeleteRequest
	condReq   wire.CondRequest
	txnReq    wire.TxnRequest
	rangeReq  wire.RangeRequest
	dumpReq   wire.NodeDumpRequest
	metaReq   wire.MetadataRequest

	searchRep   wire.SearchReply
	getRep      wire.GetReply
	containsRep wire.ContainsReply
	rangeRep    wire.RangeReply
	dumpRep     wire.NodeDumpReply
	metaRep     wire.MetadataReply

	// The request being handled: when it started, its deadline (zero
	// when it has none), and its job (&cur: a pointer to the queued job
	// would move every job to the heap).
	started, deadline time.Time
	job               *job
	cur               job

	hdr    []byte // one node, 8-byte aligned: meganode header copies
	val    []byte // a value read by Get or Search
	rec    []byte // the write record being applied
	arena  []byte // keys and values of a range reply
	spans  []span
	resume []byte
	maxMin []byte // a meganode bound being crossed by a range
}

// span locates one range pair in worker.arena.
type span struct {
	off, klen, vlen int
	ver             uint64 // the pair's version (range replies with versions)
}

// Buffers above this size are dropped after the request that grew them.
const keepBuffer = 256 << 10

func newWorker(s *Server) *worker {
	return &worker{s: s, hdr: atomicmem.Alloc(s.reps.own.sm.NodeSize())}
}

// resetLarge drops buffers a large request grew.
func (w *worker) resetLarge() {
	if cap(w.val) > keepBuffer {
		w.val = nil
	}
	if cap(w.rec) > keepBuffer {
		w.rec = nil
	}
	if cap(w.arena) > keepBuffer {
		w.arena = nil
		w.spans = nil
		w.rangeRep.Pairs = nil
	}
	if cap(w.dumpRep.Data) > keepBuffer {
		w.dumpRep.Data = nil
	}
}

// handled is what a handler did with a request: its reply (msg, or err's
// status; a nil msg is an empty reply), or, for a write, the proposal its
// record became (write.go), whose outcome answers the request later.
type handled struct {
	msg      wire.Message
	err      error
	proposed bool
	p        proposal // when proposed
}

// reply is a handler's answer to a request.
func reply(msg wire.Message, err error) handled { return handled{msg: msg, err: err} }

// handle decodes and serves one request.
func (w *worker) handle(op wire.Op, body []byte) handled {
	switch op {
	case wire.OpSearch:
		return reply(w.search(body))
	case wire.OpGet:
		return reply(w.get(body))
	case wire.OpContains:
		return reply(w.contains(body))
	case wire.OpPut:
		return w.put(body)
	case wire.OpDelete:
		return w.del(body)
	case wire.OpCondWrite:
		return w.cond(body)
	case wire.OpTxn:
		return w.txn(body)
	case wire.OpRange:
		return reply(w.scan(body))
	case wire.OpMetadata:
		return reply(w.metadata(body))
	case wire.OpNodeDump:
		return reply(w.nodeDump(body))
	case wire.OpSplitBegin:
		return reply(w.splitBegin(body))
	case wire.OpSplitAppend:
		return reply(w.splitAppend(body))
	case wire.OpSplitEnd:
		return reply(nil, w.splitEnd(body))
	case wire.OpInsertChild:
		return reply(w.insertChild(body))
	case wire.OpMeganode:
		return reply(w.meganodeInfo(body))
	}
	return reply(nil, wireErrorf(wire.StatusUnknownOp, "op %v not served", op))
}

// checkKey rejects keys the trees would reject, before any work.
func (w *worker) checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return wire.ErrEmptyKey
	case len(key) > w.s.reps.own.sm.MaxKey():
		return wireErrorf(wire.StatusKeyTooLarge, "key of %d bytes, limit %d", len(key), w.s.reps.own.sm.MaxKey())
	}
	return nil
}

// startAt resolves a request's start pointer (0: the root) to a meganode of
// this server, after checking the request's epoch.
func (w *worker) startAt(p blink.Ptr, epoch uint64, what string) (*rsm.Meganode, error) {
	s := w.s
	if p.IsNil() {
		if p = blink.Ptr(s.root.Load()); p.IsNil() {
			return nil, wireErrorf(wire.StatusUnavailable, msgNoRoot)
		}
	}
	rep := s.reps.servedReplica(p.Region())
	if rep == nil {
		return nil, s.redirect(p.Region(), what)
	}
	if err := rep.checkEpoch(epoch); err != nil {
		return nil, err
	}
	if !rep.leased() {
		return nil, errNoLease(rep.regionID)
	}
	lm := rep.sm.MeganodeAt(p)
	if lm == nil {
		return nil, wireErrorf(wire.StatusOutOfBounds, "%v is not a node of a meganode of region %d", p, rep.regionID)
	}
	return lm, nil
}

// elsewhere is the error for a request that must continue at next, a
// pointer this server cannot follow.
func (w *worker) elsewhere(next blink.Ptr, what string) error {
	if w.s.reps.servedReplica(next.Region()) == nil {
		return w.s.redirect(next.Region(), fmt.Sprintf("%s continues at meganode %v", what, next))
	}
	return fmt.Errorf("server: pointer %v names no meganode of region %d: %w", next, next.Region(), blink.ErrCorruption)
}

// hop is where a search through this server's meganodes ended: a leaf
// meganode's result (next nil), or the pointer to continue at elsewhere.
type hop struct {
	lm   *rsm.Meganode
	res  blink.Result
	next blink.Ptr
}

// descend searches key from meganode lm down and right through the
// meganodes of this server (paper §2.2: "Each server uses Sagiv's algorithm
// to search within meganode(s) until it reaches a pointer that is not local
// to the machine").
func (w *worker) descend(lm *rsm.Meganode, key []byte) (hop, error) {
	start := lm
	for range maxHops {
		res, err := lm.T.Search(key)
		if err != nil {
			return hop{lm: lm}, err
		}
		next := res.Next
		if next.IsNil() && lm.Level > 0 {
			if next = res.Child; next.IsNil() {
				return hop{lm: lm}, noChild(lm, lm == start, fmt.Sprintf("%q", key))
			}
		}
		if next.IsNil() {
			return hop{lm: lm, res: res}, nil
		}
		if nl := w.s.servedMeganode(next); nl != nil {
			lm = nl
			continue
		}
		return hop{lm: lm, res: res, next: next}, nil
	}
	return hop{}, fmt.Errorf("server: search for %q crossed %d meganodes: %w", key, maxHops, blink.ErrCorruption)
}

// noChild is the error for an inner meganode lm that holds no child for
// a request's key (what). In the tree an inner meganode always holds one:
// a split's target is filled before it is linked. A request whose own
// start pointer names lm (first) is refused, OutOfBounds: that pointer
// came from no search (it names a split's target still empty, say, which
// a client can name but no search reaches). One that came to lm from
// another meganode found the tree corrupt.
func noChild(lm *rsm.Meganode, first bool, what string) error {
	if first {
		return wireErrorf(wire.StatusOutOfBounds, "meganode %v holds no child for %s: no place to start a request (a split's target, not yet in the tree?)", lm.Ptr(), what)
	}
	return fmt.Errorf("server: inner meganode %v has no child for %s: %w", lm.Ptr(), what, blink.ErrCorruption)
}

// header copies lm's header into w.hdr and decodes it, lock-free and
// without allocating; the bounds alias w.hdr until the next call.
func (w *worker) header(lm *rsm.Meganode) (blink.Header, error) {
	hp := lm.Ptr()
	for attempt := 1; ; attempt++ {
		if !lm.T.NodeBytes(hp, w.hdr) {
			return blink.Header{}, fmt.Errorf("server: meganode header %v: %w", hp, blink.ErrCorruption)
		}
		h, r := blink.DecodeHeader(w.hdr)
		switch {
		case r == blink.OK:
			return h, nil
		case r != blink.Torn:
			return blink.Header{}, fmt.Errorf("server: meganode header %v: %v: %w", hp, r, blink.ErrCorruption)
		case attempt > 1<<16:
			return blink.Header{}, fmt.Errorf("server: meganode header %v keeps changing: %w", hp, blink.ErrRestart)
		case attempt%16 == 0:
			runtime.Gosched()
		}
	}
}

// describe fills m from lm's header; key bytes alias w.hdr.
func (w *worker) describe(lm *rsm.Meganode, m *wire.Meganode) (blink.Header, error) {
	h, err := w.header(lm)
	if err != nil {
		return h, err
	}
	*m = wire.Meganode{Ptr: lm.Ptr(), Level: uint16(h.Level), Height: uint16(h.Height), Range: keyRange(h.Bounds)}
	return h, nil
}

func keyRange(b blink.Bounds) wire.KeyRange {
	r := wire.KeyRange{MinInf: b.MinInf, MaxInf: b.MaxInf}
	if !b.MinInf {
		r.Min = b.Min
	}
	if !b.MaxInf {
		r.Max = b.Max
	}
	return r
}

// search is one meganode hop of a server-side search (OpSearch): it ends
// at a leaf meganode of this server with the key's result, or with the
// next meganode to visit, elsewhere.
func (w *worker) search(body []byte) (wire.Message, error) {
	req := &w.searchReq
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	if err := w.checkKey(req.Key); err != nil {
		return nil, err
	}
	lm, err := w.startAt(req.Ptr, req.Epoch, "search")
	if err != nil {
		return nil, err
	}
	for range 4 {
		hp, err := w.descend(lm, req.Key)
		if err != nil {
			return nil, err
		}
		rep := &w.searchRep
		*rep = wire.SearchReply{}
		if _, err := w.describe(hp.lm, &rep.Meganode); err != nil {
			return nil, err
		}
		if !hp.next.IsNil() {
			rep.Kind, rep.Next = wire.SearchNext, hp.next
			w.s.metrics.searchNext.Inc()
			return rep, nil
		}
		rep.Kind, rep.Found = wire.SearchLeaf, hp.res.Found
		word := hp.res.Word
		if req.WantValue && rep.Found {
			v, wd, err := w.value(hp, req.Key)
			switch {
			case err == nil:
				w.val = v[:0]
				rep.HasValue, rep.Value = true, v
				word = wd
			case errors.Is(err, blink.ErrNotFound):
				rep.Found = false // deleted since the search
			case errors.Is(err, blink.ErrKeyOutOfRange):
				continue // moved since the search: search again
			default:
				return nil, err
			}
		}
		if req.WantVersion && rep.Found && word.Version() != 0 {
			rep.HasVersion, rep.Version = true, word.Version()
		}
		w.s.metrics.searchLeaf.Inc()
		return rep, nil
	}
	return nil, wireErrorf(wire.StatusNeedsRetry, "key %q kept moving", req.Key)
}

// leafFor descends to the leaf meganode holding key (OpGet, OpContains and
// the writes), which must be on this server.
func (w *worker) leafFor(p blink.Ptr, epoch uint64, key []byte, what string) (hop, error) {
	if err := w.checkKey(key); err != nil {
		return hop{}, err
	}
	lm, err := w.startAt(p, epoch, what)
	if err != nil {
		return hop{}, err
	}
	hp, err := w.descend(lm, key)
	if err != nil {
		return hop{}, err
	}
	if !hp.next.IsNil() {
		// A request sent to a leaf meganode whose keys moved to another
		// server (a remote split) is refused KeyOutOfRange: the client's
		// cached leaf is stale, and it locates the key again from the
		// root. One sent to an inner meganode is redirected.
		if lm.Level == 0 && w.s.reps.servedReplica(hp.next.Region()) == nil {
			return hop{}, wireErrorf(wire.StatusKeyOutOfRange, "%s: key %q continues at meganode %v on another server", what, key, hp.next)
		}
		return hop{}, w.elsewhere(hp.next, what)
	}
	return hp, nil
}

// value reads the value of key into w.val's buffer from the record the
// search that ended at hp found, without descending again; if the leaf
// changed since the search, with a search of its own (blink GetWord). It
// returns the entry's word with the value, both of one leaf version. A key
// the search did not find is blink.ErrNotFound.
func (w *worker) value(hp hop, key []byte) ([]byte, blink.Word, error) {
	v, ok, err := hp.lm.T.Value(hp.res, key, w.val[:0])
	if ok || err != nil {
		return v, hp.res.Word, err
	}
	return hp.lm.T.GetWord(key, w.val[:0])
}

func (w *worker) get(body []byte) (wire.Message, error) {
	req := &w.getReq
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	for range 4 {
		hp, err := w.leafFor(req.Ptr, req.Epoch, req.Key, "get")
		if err != nil {
			return nil, err
		}
		v, _, err := w.value(hp, req.Key)
		if errors.Is(err, blink.ErrKeyOutOfRange) {
			continue // moved since the search
		}
		if err != nil {
			return nil, err
		}
		w.val = v[:0]
		w.getRep.Value = v
		return &w.getRep, nil
	}
	return nil, wireErrorf(wire.StatusNeedsRetry, "key %q kept moving", req.Key)
}

func (w *worker) contains(body []byte) (wire.Message, error) {
	req := &w.getReq
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	hp, err := w.leafFor(req.Ptr, req.Epoch, req.Key, "contains")
	if err != nil {
		return nil, err
	}
	w.containsRep.Found = hp.res.Found
	return &w.containsRep, nil
}

// nodeDump copies bytes of the region (OpNodeDump) with 8-byte atomic
// loads, as a one-sided read would: any range inside the region, 8-byte
// aligned, up to what fits in a reply.
func (w *worker) nodeDump(body []byte) (wire.Message, error) {
	req := &w.dumpReq
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	s := w.s
	if req.Ptr.IsNil() {
		return nil, wireErrorf(wire.StatusOutOfBounds, "nil pointer")
	}
	rep := s.reps.servedReplica(req.Ptr.Region())
	if rep == nil {
		return nil, s.redirect(req.Ptr.Region(), "node dump")
	}
	if err := rep.checkEpoch(req.Epoch); err != nil {
		return nil, err
	}
	if !rep.leased() {
		return nil, errNoLease(rep.regionID)
	}
	n := uint64(req.Length)
	if n == 0 {
		n = uint64(rep.sm.NodeSize())
	}
	off := req.Ptr.Offset()
	size := uint64(len(rep.sm.Region().Bytes()))
	limit := uint64(s.opts.MaxFrameSize-wire.HeaderSize-4) &^ 7
	switch {
	case off%8 != 0 || n%8 != 0:
		return nil, wireErrorf(wire.StatusOutOfBounds, "offset %#x and length %d must be multiples of 8", off, n)
	case n > limit:
		return nil, wireErrorf(wire.StatusOutOfBounds, "length %d over the reply limit %d", n, limit)
	case off >= size || n > size-off:
		return nil, wireErrorf(wire.StatusOutOfBounds, "[%#x, +%d) outside region %d of %d bytes", off, n, rep.regionID, size)
	}
	if uint64(cap(w.dumpRep.Data)) < n {
		w.dumpRep.Data = make([]byte, n)
	}
	w.dumpRep.Data = w.dumpRep.Data[:n]
	atomicmem.LoadTo(w.dumpRep.Data, rep.sm.Region().Bytes()[off:off+n])
	return &w.dumpRep, nil
}

// metadata describes the server (OpMetadata).
func (w *worker) metadata(body []byte) (wire.Message, error) {
	req := &w.metaReq
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	s := w.s
	served := s.reps.servedList()
	if req.OneRegion {
		r := s.reps.servedReplica(req.Region)
		if r == nil {
			if f := s.reps.holding(req.Region); f != nil {
				return s.followerMetadata(f), nil
			}
			return nil, s.redirect(req.Region, "metadata")
		}
		served = []*replica{r}
	}
	rep := &w.metaRep
	regions, megas := rep.Regions[:0], rep.Meganodes[:0]
	*rep = wire.MetadataReply{
		Server:       s.opts.ServerID,
		NodeSize:     uint32(s.reps.own.sm.NodeSize()),
		MeganodeSize: s.reps.own.sm.Region().Layout().MeganodeSize,
		Root:         blink.Ptr(s.root.Load()),
		Hints:        s.rpc.hints(),
	}
	for _, r := range served {
		regions = append(regions, s.hosting.regionInfo(r))
	}
	rep.Regions = regions
	rep.Meganodes = megas
	if req.WantMeganodes {
		// Each entry is at most this many bytes; stop before the frame
		// limit (a region has at most meganode.MaxSlots meganodes, far
		// below it with default sizes).
		per := wire.MeganodeStatsSize(s.reps.own.sm.MaxKey(), s.reps.own.sm.MaxKey())
		room := s.opts.MaxFrameSize - wire.HeaderSize - 4096
		for _, lm := range servedMeganodes(served) {
			if room -= per; room < 0 {
				break
			}
			h, err := lm.T.Header() // copies the bounds out
			if err != nil {
				return nil, err
			}
			// Right and Split take the tree's writer lock briefly; a
			// split may change them between these reads (cellctl check
			// allows for that).
			sp := lm.T.Split()
			rep.Meganodes = append(rep.Meganodes, wire.MeganodeStats{
				Meganode:    wire.Meganode{Ptr: lm.Ptr(), Level: uint16(h.Level), Height: uint16(h.Height), Range: keyRange(h.Bounds)},
				UsedNodes:   uint32(h.InUse),
				Capacity:    uint32(h.Capacity),
				Right:       lm.T.Right(),
				SplitSource: sp.Source,
				SplitTarget: sp.Target,
				SplitLinked: sp.Source && sp.Linked,
			})
		}
	}
	return rep, nil
}
