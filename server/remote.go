package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// Remote meganode splits (paper §2.2, docs/design.md §4; doc.go draws the
// protocol). The source server (X's) drives the target server (Y's)
// through the server-to-server ops of wire/split.go; each side logs its
// own steps through its apply path (split records here, target records
// there).

// Placement chooses where a split puts the new meganode.
type Placement string

// Placements.
const (
	// PlaceAuto is the paper's rule: "Cell favors remote meganodes when
	// few local meganodes have been used, and local meganodes otherwise"
	// (§2.2, footnote 2). A split goes to the live server holding the
	// fewest meganodes, when this server holds fewer than
	// Options.SplitRemoteBelow and that server fewer than this one.
	PlaceAuto Placement = "auto"
	// PlaceLocal keeps every new meganode in this server's region.
	PlaceLocal Placement = "local"
	// PlaceRemote puts every new meganode on another live server (the
	// one holding the fewest meganodes) when there is one.
	PlaceRemote Placement = "remote"
)

// Bounds of the remote split protocol.
const (
	// remoteAppendBytes is the key and value bytes one SplitAppend
	// carries, at most (a single entry may exceed it).
	remoteAppendBytes = 1 << 20
	// peerTimeout bounds one call to another server.
	peerTimeout = 10 * time.Second
	// commitTries bounds the attempts to thaw a remote split's target
	// (the split is past its point of no return).
	commitTries = 64
)

// peerConns caches connections to other servers by RPC address.
type peerConns struct {
	mu    sync.Mutex
	conns map[string]*wire.Conn
}

// call sends req as op to the server at addr and decodes the reply into
// rep (nil: an empty reply).
func (s *Server) call(ctx context.Context, addr string, op wire.Op, req, rep wire.Message) error {
	c, err := s.peerConn(ctx, addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	f, err := c.CallMessage(ctx, op, req)
	if err != nil {
		return err
	}
	defer f.Release()
	if rep == nil {
		return nil
	}
	// Decoded replies alias their body (keys, ranges), and the frame goes
	// back to its pool when call returns: decode a copy, which the reply
	// then owns. Peer calls are split steps, not the read path.
	return rep.Decode(bytes.Clone(f.Body))
}

func (s *Server) peerConn(ctx context.Context, addr string) (*wire.Conn, error) {
	p := &s.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[addr]; c != nil {
		select {
		case <-c.Done():
			delete(p.conns, addr)
		default:
			return c, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	c, err := wire.Dial(dctx, addr, &s.peerOpts)
	if err != nil {
		return nil, fmt.Errorf("server: dial %s: %w", addr, err)
	}
	if p.conns == nil {
		p.conns = make(map[string]*wire.Conn)
	}
	p.conns[addr] = c
	return c, nil
}

// closePeers closes the connections to other servers.
func (s *Server) closePeers() {
	p := &s.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.conns {
		_ = c.Close()
		delete(p.conns, addr)
	}
}

// hostOf returns the live member serving region id, from the cached
// region table.
func (s *Server) hostOf(id uint32) (regiontable.Member, regiontable.Region, error) {
	v := s.table.Load()
	r, ok := v.regions[id]
	if !ok {
		return regiontable.Member{}, r, fmt.Errorf("server: region %d is not in the region table: %w", id, wire.ErrUnknownRegion)
	}
	m, ok := v.members[r.Host]
	if !ok {
		return regiontable.Member{}, r, fmt.Errorf("server: region %d's host %s is down: %w", id, r.Host, wire.ErrUnavailable)
	}
	return m, r, nil
}

// splitTarget is the other server's side of a remote split in progress.
type splitTarget struct {
	peer regiontable.Member
	ptr  blink.Ptr // Y's header
}

// placeSplit returns the server to put a new meganode on, nil for this
// one (Options.SplitPlacement). A region with no free meganode slot
// places remotely whatever the mode but local.
func (sp *splitter) placeSplit(x *rsm.Meganode) *regiontable.Member {
	s := sp.s
	mode := s.opts.SplitPlacement
	if mode == PlaceLocal {
		return nil
	}
	r := s.reps.holding(x.Ptr().Region()).sm.Region()
	ours := len(r.Meganodes())
	full := uint64(ours) >= r.Layout().Slots
	if mode == PlaceAuto && ours >= s.opts.SplitRemoteBelow && !full {
		return nil
	}
	m, count := sp.leastLoadedPeer()
	if m == nil || mode == PlaceAuto && count >= ours && !full {
		return nil
	}
	return m
}

// leastLoadedPeer returns the live member, other than this server and
// not draining, that holds the fewest bytes in use (the nodes in use of
// its meganodes, asked with Metadata calls), then has the fewest requests
// queued for its workers; and the number of meganodes it holds (the
// paper's placement rule compares counts). nil when no other member
// answers.
func (sp *splitter) leastLoadedPeer() (*regiontable.Member, int) {
	s := sp.s
	v := s.table.Load()
	type cand struct {
		m      regiontable.Member
		count  int
		used   uint64
		queued uint32
	}
	var cands []cand
	for id, m := range v.members {
		if id == s.opts.ServerID || v.draining[id] {
			continue
		}
		ctx, cancel := context.WithTimeout(s.bgCtx, 2*time.Second)
		var rep wire.MetadataReply
		err := s.call(ctx, m.RPCAddr, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true}, &rep)
		cancel()
		if err != nil {
			s.log.Debug("server: split placement skips a member", slog.String("member", id), slog.Any("err", err))
			continue
		}
		c := cand{m: m, count: len(rep.Meganodes), queued: rep.Hints.Queued}
		for _, mn := range rep.Meganodes {
			c.used += uint64(mn.UsedNodes) * uint64(rep.NodeSize)
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		return nil, 0
	}
	best := slices.MinFunc(cands, func(a, b cand) int {
		switch {
		case a.used != b.used:
			return cmp.Compare(a.used, b.used)
		case a.queued != b.queued:
			return cmp.Compare(a.queued, b.queued)
		}
		return strings.Compare(a.m.ID, b.m.ID)
	})
	return &best.m, best.count
}

// beginTries bounds the attempts of a remote split's begin.
const beginTries = 3

// beginRemoteTarget asks peer to format Y for the split of x at sep.
func (sp *splitter) beginRemoteTarget(x *rsm.Meganode, sep []byte, peer *regiontable.Member) (*splitTarget, error) {
	s := sp.s
	h, err := x.T.Header()
	if err != nil {
		return nil, err
	}
	// The peer puts the target in a region it serves, of its choice
	// (targetReplica); the request's epoch stays unchecked (0).
	req := wire.SplitBeginRequest{
		Source: x.Ptr(), Level: uint16(x.Level), Right: x.T.Right(),
		Range: wire.KeyRange{Min: sep, Max: h.Bounds.Max, MaxInf: h.Bounds.MaxInf},
	}
	// A begin whose reply was lost may have made the target: asked again,
	// the peer answers the same one (beginTargetLocked), so it is retried
	// until it is answered, definitely refused, or out of tries.
	var rep wire.SplitBeginReply
	for attempt := 0; attempt < beginTries; attempt++ {
		if attempt > 0 {
			if perr := sp.pause(attempt); perr != nil {
				return nil, perr
			}
			s.log.Warn("server: remote split begin unanswered; asking again", slog.String("peer", peer.ID), slog.Any("err", err))
		}
		err = s.call(s.bgCtx, peer.RPCAddr, wire.OpSplitBegin, &req, &rep)
		var se *wire.StatusError
		if err == nil || errors.As(err, &se) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if r, ok := s.table.Load().regions[rep.Meganode.Region()]; !ok || r.Host != peer.ID {
		return nil, fmt.Errorf("server: split target %v is not in a region %s hosts: %w", rep.Meganode, peer.ID, blink.ErrCorruption)
	}
	return &splitTarget{peer: *peer, ptr: rep.Meganode}, nil
}

// copyRemote copies x's frozen right half from sep on into the remote
// target, batch by batch, and returns Y's local root.
func (sp *splitter) copyRemote(x *rsm.Meganode, sep []byte, tgt *splitTarget) (blink.Ptr, error) {
	s := sp.s
	inner := x.Level > 0
	versioned, _ := x.T.Versioning()
	var (
		ents  []blink.Entry
		req   = wire.SplitAppendRequest{Meganode: tgt.ptr, Inner: inner, Words: versioned && !inner}
		root  blink.Ptr
		err   error
		batch = max(s.opts.SplitCopyBatch, 1)
	)
	send := func(es []blink.Entry) error {
		req.Entries = req.Entries[:0]
		for _, e := range es {
			se := wire.SplitEntry{Key: e.Key, Value: e.Value, Child: e.Child}
			if req.Words {
				se.Word = e.Word
			}
			req.Entries = append(req.Entries, se)
		}
		var rep wire.SplitAppendReply
		if err := s.call(s.bgCtx, tgt.peer.RPCAddr, wire.OpSplitAppend, &req, &rep); err != nil {
			return fmt.Errorf("server: copy %d entries to %s: %w", len(es), tgt.peer.ID, err)
		}
		root = rep.Root
		return nil
	}
	for cursor := sep; cursor != nil; {
		ents, cursor, err = x.T.FrozenRecords(cursor, batch, remoteAppendBytes, ents[:0])
		if err != nil {
			return 0, err
		}
		// One request per remoteAppendBytes of keys and values.
		for start, size, i := 0, 0, 0; i < len(ents); i++ {
			size += len(ents[i].Key) + len(ents[i].Value) + 24
			if size >= remoteAppendBytes || i == len(ents)-1 {
				if err := send(ents[start : i+1]); err != nil {
					return 0, err
				}
				start, size = i+1, 0
			}
		}
	}
	if root.IsNil() {
		// Nothing to copy (cannot happen: the split key is an entry).
		if err := send(nil); err != nil {
			return 0, err
		}
	}
	return root, nil
}

// endRemoteTarget thaws (commit) or drops the remote target. A commit is
// past the split's point of no return: it is retried until it is done,
// the target's region changed hands, or the server stops, but not after a
// refusal (refusedPeerOp): Y is no frozen target there, which asking
// again cannot change (a target restored from a snapshot after it was
// thawed answers so to a resumed split's commit).
//
// A commit carries the digest of the source region's session table
// (sessions, server/rsm/sessions.go), taken after the split froze the keys that move:
// the target merges it, so that no retry of a write to them is vouched
// for there that the source applied. It carries the source region's
// version clock too (0 without versions): the target's clock rises to it,
// so a moved key's next version is above the one it came with
// (docs/transactions.md §2.3).
func (sp *splitter) endRemoteTarget(tgt *splitTarget, commit bool, sessions []byte, clock uint64) error {
	s := sp.s
	req := wire.SplitEndRequest{Meganode: tgt.ptr, Commit: commit}
	if commit {
		req.Sessions, req.Clock = sessions, clock
	}
	var err error
	for attempt := 0; attempt < commitTries; attempt++ {
		if attempt > 0 {
			if perr := sp.pause(attempt); perr != nil {
				return perr
			}
		}
		addr := tgt.peer.RPCAddr
		if m, _, herr := s.hostOf(tgt.ptr.Region()); herr == nil {
			addr = m.RPCAddr
		}
		if err = s.call(s.bgCtx, addr, wire.OpSplitEnd, &req, nil); err == nil || !commit || refusedPeerOp(err) {
			break
		}
		s.log.Warn("server: thaw of a remote split's target failed; retrying", slog.String("target", tgt.ptr.String()), slog.Any("err", err))
	}
	if err != nil {
		what := "drop"
		if commit {
			what = "thaw"
		}
		err = fmt.Errorf("server: %s the remote split target %v on %s: %w", what, tgt.ptr, tgt.peer.ID, err)
		s.log.Error("server: remote split target left frozen", slog.Any("err", err))
	}
	return err
}

// refusedPeerOp reports whether a server-to-server request was refused
// for what it asks (the target is no split target there, or this
// server's certificate may not ask it): asking again would be refused
// again.
func refusedPeerOp(err error) bool {
	return errors.Is(err, wire.ErrBadRequest) || errors.Is(err, wire.ErrPermissionDenied)
}

// insertChildRemote asks the server of next to insert the separator
// (sep → yp) at level, searching from next. done reports that it is in;
// otherwise (nil error) the search goes on at the returned pointer, which
// the caller finds by starting again from the root.
func (sp *splitter) insertChildRemote(next blink.Ptr, level int, sep []byte, yp blink.Ptr) (bool, error) {
	s := sp.s
	for hops := 0; hops < maxHops; hops++ {
		m, _, err := s.hostOf(next.Region())
		if err != nil {
			return false, err
		}
		if m.ID == s.opts.ServerID {
			return false, nil // back here: the caller searches locally
		}
		req := wire.InsertChildRequest{Start: next, Level: uint16(level), Child: yp, Key: sep}
		var rep wire.InsertChildReply
		if err := s.call(s.bgCtx, m.RPCAddr, wire.OpInsertChild, &req, &rep); err != nil {
			return false, err
		}
		if rep.Done {
			return true, nil
		}
		next = rep.Next
	}
	return false, fmt.Errorf("server: separator %q crossed %d servers: %w", sep, maxHops, blink.ErrCorruption)
}

// remoteMeganode describes the meganode of node p on its server.
func (sp *splitter) remoteMeganode(p blink.Ptr) (wire.MeganodeReply, error) {
	s := sp.s
	var rep wire.MeganodeReply
	m, _, err := s.hostOf(p.Region())
	if err != nil {
		return rep, err
	}
	if m.ID == s.opts.ServerID {
		return rep, fmt.Errorf("server: %v names no meganode of this server: %w", p, blink.ErrCorruption)
	}
	err = s.call(s.bgCtx, m.RPCAddr, wire.OpMeganode, &wire.MeganodeRequest{Ptr: p}, &rep)
	return rep, err
}

// ---- The target's side: handlers (workers) and target records. ----

// splitBegin formats a remote split's target (OpSplitBegin).
func (w *worker) splitBegin(body []byte) (wire.Message, error) {
	var req wire.SplitBeginRequest
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	s := w.s
	tr := s.targetReplica()
	if tr == nil {
		return nil, wireErrorf(wire.StatusUnavailable, "server %s serves no region now", s.opts.ServerID)
	}
	if err := tr.checkEpoch(req.Epoch); err != nil {
		return nil, err
	}
	if err := w.checkKey(req.Range.Min); err != nil {
		return nil, err
	}
	if !req.Range.MaxInf {
		if err := w.checkKey(req.Range.Max); err != nil {
			return nil, err
		}
		if bytes.Compare(req.Range.Min, req.Range.Max) >= 0 {
			return nil, wireErrorf(wire.StatusBadRequest, "split range %v is empty", req.Range)
		}
	}
	if int(req.Level) > maxHops {
		return nil, wireErrorf(wire.StatusBadRequest, "meganode level %d", req.Level)
	}
	if rr := s.reps.servedReplica(req.Right.Region()); rr != nil && rr.sm.MeganodeAt(req.Right) == nil {
		return nil, wireErrorf(wire.StatusOutOfBounds, "right link %v is no node of region %d", req.Right, rr.regionID)
	}
	b := rsm.TargetBody{Phase: rsm.TargetBegin, MaxInf: req.Range.MaxInf, Level: req.Level, Right: req.Right, Source: req.Source, Payload: req.Range.Max}
	res, err := tr.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindTarget, Key: req.Range.Min, Value: rsm.AppendTargetBody(nil, &b)}))
	if errors.Is(err, meganode.ErrRegionFull) {
		return nil, wireErrorf(wire.StatusUnavailable, "%v", err)
	}
	if err != nil {
		return nil, badRequest(err)
	}
	yp := res.New
	s.log.Info("server: formatted a remote split's target", slog.String("meganode", yp.String()), slog.String("source", req.Source.String()),
		slog.Int("level", int(req.Level)), slog.String("range", req.Range.String()))
	if err := failpoint.Eval(FailpointTargetBegan); err != nil {
		return nil, wireErrorf(wire.StatusUnavailable, "%v", err)
	}
	return &wire.SplitBeginReply{Meganode: yp}, nil
}

// splitAppend appends a batch of a remote split's entries (OpSplitAppend).
func (w *worker) splitAppend(body []byte) (wire.Message, error) {
	var req wire.SplitAppendRequest
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	s := w.s
	tr := s.reps.servedReplica(req.Meganode.Region())
	if tr == nil {
		return nil, s.redirect(req.Meganode.Region(), "split append")
	}
	for i := range req.Entries {
		if err := w.checkKey(req.Entries[i].Key); err != nil {
			return nil, err
		}
	}
	ents := make([]blink.Entry, len(req.Entries))
	for i, e := range req.Entries {
		ents[i] = blink.Entry{Key: e.Key, Value: e.Value, Child: e.Child, Word: e.Word}
	}
	b := rsm.TargetBody{Phase: rsm.TargetAppend, Payload: rsm.AppendEntries(nil, req.Inner, req.Words, ents)}
	res, err := tr.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindTarget, Meganode: req.Meganode, Value: rsm.AppendTargetBody(nil, &b)}))
	if err != nil {
		return nil, badRequest(err)
	}
	if err := failpoint.Eval(FailpointTargetAppended); err != nil {
		return nil, wireErrorf(wire.StatusUnavailable, "%v", err)
	}
	return &wire.SplitAppendReply{Root: res.Root}, nil
}

// splitEnd thaws or drops a remote split's target (OpSplitEnd).
func (w *worker) splitEnd(body []byte) error {
	var req wire.SplitEndRequest
	if err := req.Decode(body); err != nil {
		return err
	}
	s := w.s
	tr := s.reps.servedReplica(req.Meganode.Region())
	if tr == nil {
		return s.redirect(req.Meganode.Region(), "split end")
	}
	b := rsm.TargetBody{Phase: rsm.TargetAbort}
	if req.Commit {
		b.Phase, b.Payload, b.Clock = rsm.TargetCommit, req.Sessions, req.Clock
	}
	_, err := tr.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindTarget, Meganode: req.Meganode, Value: rsm.AppendTargetBody(nil, &b)}))
	err = badRequest(err)
	if err == nil && req.Commit {
		s.splitEvent() // writes parked at the frozen target go on
		if y := s.servedMeganode(req.Meganode); y != nil {
			s.splits.maybeRequestSplit(y)
		}
	}
	if err == nil {
		if ferr := failpoint.Eval(FailpointTargetEnded); ferr != nil {
			return wireErrorf(wire.StatusUnavailable, "%v", ferr)
		}
	}
	return err
}

// insertChild inserts a separator into the level it names, searching from
// the request's start through this server's meganodes (OpInsertChild).
// A full parent is split (by this server's split loop) and the caller
// retries; so does a frozen one.
func (w *worker) insertChild(body []byte) (wire.Message, error) {
	var req wire.InsertChildRequest
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	if err := w.checkKey(req.Key); err != nil {
		return nil, err
	}
	s := w.s
	if s.reps.servedReplica(req.Child.Region()) == nil {
		if _, ok := s.table.Load().regions[req.Child.Region()]; !ok {
			return nil, wireErrorf(wire.StatusBadRequest, "child %v is in no region of the table", req.Child)
		}
	} else if c := s.servedMeganode(req.Child); c == nil || c.Ptr() != req.Child || c.Level != int(req.Level)-1 {
		return nil, wireErrorf(wire.StatusBadRequest, "child %v is not a level %d meganode here", req.Child, req.Level-1)
	}
	start := req.Start
	if start.IsNil() {
		start = blink.Ptr(s.root.Load())
	}
	if s.reps.servedReplica(start.Region()) == nil {
		return &wire.InsertChildReply{Next: start}, nil
	}
	p, next, err := s.splits.parentOf(start, req.Key, int(req.Level))
	if err != nil {
		return nil, err
	}
	if p == nil {
		if next == start {
			return nil, wireErrorf(wire.StatusOutOfBounds, "%v is not a node of a meganode of region %d", start, start.Region())
		}
		return &wire.InsertChildReply{Next: next}, nil
	}
	rep, err := s.holder(p)
	if err != nil {
		return nil, err
	}
	_, err = rep.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindChild, Meganode: p.Ptr(), Key: req.Key, Value: binary.LittleEndian.AppendUint64(nil, uint64(req.Child))}))
	switch {
	case err == nil:
		s.splits.maybeRequestSplit(p)
		return &wire.InsertChildReply{Done: true}, nil
	case errors.Is(err, blink.ErrNeedsSplit):
		s.splits.requestSplit(p, true)
		return nil, wireErrorf(wire.StatusNeedsRetry, "parent meganode %v is full; splitting it", p.Ptr())
	case errors.Is(err, blink.ErrFrozen), errors.Is(err, blink.ErrKeyOutOfRange):
		return nil, wireErrorf(wire.StatusNeedsRetry, "parent meganode %v is splitting", p.Ptr())
	}
	return nil, err
}

// meganodeInfo describes the meganode of a node (OpMeganode).
func (w *worker) meganodeInfo(body []byte) (wire.Message, error) {
	var req wire.MeganodeRequest
	if err := req.Decode(body); err != nil {
		return nil, err
	}
	s := w.s
	if s.reps.servedReplica(req.Ptr.Region()) == nil {
		return nil, s.redirect(req.Ptr.Region(), "meganode")
	}
	lm := s.servedMeganode(req.Ptr)
	if lm == nil {
		return nil, wireErrorf(wire.StatusOutOfBounds, "%v is not a node of a meganode of region %d", req.Ptr, req.Ptr.Region())
	}
	rep := &wire.MeganodeReply{}
	if _, err := w.describe(lm, &rep.Meganode); err != nil {
		return nil, err
	}
	rep.Right = lm.T.Right()
	if p, ok := s.reps.holding(lm.Ptr().Region()).sm.SplitOf(lm.Ptr()); ok {
		rep.SplitNew = p.Y
	}
	return rep, nil
}

// badRequest maps an apply record refused as inconsistent with the
// region (rsm.ErrBadRecord: a split op naming no split target, say) to
// StatusBadRequest: the server-to-server op was wrong, nothing changed.
func badRequest(err error) error {
	if errors.Is(err, rsm.ErrBadRecord) {
		return wireErrorf(wire.StatusBadRequest, "%v", err)
	}
	return err
}

// sweepTargets drops the frozen remote split targets of rep's region,
// which this server leads, whose source gave their split up: seen frozen
// for Options.OrphanTargetAge, and the source meganode, asked, names no
// split into them in its region's applied log (or no longer exists). A
// split names its target from its start record to its end record, and
// the target is thawed before the end, so a target whose split is
// linked is never dropped; one dropped before its source linked fails
// that split's copy, which the source then undoes. A source that cannot
// be asked is asked again at the next sweep.
func (sp *splitter) sweepTargets(rep *replica) {
	s := sp.s
	targets := rep.sm.Targets()
	now := time.Now()
	seen := &rep.targetSeen
	for yp := range *seen {
		if _, ok := targets[yp]; !ok {
			delete(*seen, yp)
		}
	}
	for _, yp := range slices.Sorted(maps.Keys(targets)) {
		if *seen == nil {
			*seen = make(map[blink.Ptr]time.Time)
		}
		first, ok := (*seen)[yp]
		if !ok {
			(*seen)[yp] = now
			continue
		}
		if now.Sub(first) < s.opts.OrphanTargetAge {
			continue
		}
		source := targets[yp]
		orphan, err := sp.splitGivenUp(source, yp)
		if err != nil {
			s.log.Debug("server: the source of a frozen split target could not be asked", slog.String("target", yp.String()), slog.String("source", source.String()), slog.Any("err", err))
			continue
		}
		if !orphan {
			continue
		}
		b := rsm.TargetBody{Phase: rsm.TargetAbort}
		if _, err := rep.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindTarget, Meganode: yp, Value: rsm.AppendTargetBody(nil, &b)})); err != nil {
			s.log.Warn("server: drop an orphan split target", slog.String("target", yp.String()), slog.Any("err", err))
			continue
		}
		delete(*seen, yp)
		s.metrics.splits.WithLabelValues("orphan_dropped").Inc()
		s.log.Warn("server: dropped a split target its source gave up", slog.String("target", yp.String()), slog.String("source", source.String()),
			slog.Duration("frozen_for", now.Sub(first).Round(time.Second)))
	}
}

// splitGivenUp reports whether source, a meganode that began a remote
// split into yp, no longer splits into it per its region's applied log.
func (sp *splitter) splitGivenUp(source, yp blink.Ptr) (bool, error) {
	s := sp.s
	if rep := s.reps.servedReplica(source.Region()); rep != nil && rep.sm.MeganodeAt(source) != nil {
		p, ok := rep.sm.SplitOf(source)
		return !ok || p.Y != yp, nil
	}
	info, err := sp.remoteMeganode(source)
	switch {
	case errors.Is(err, wire.ErrOutOfBounds):
		return true, nil // the source meganode is gone
	case err != nil:
		return false, err
	}
	return info.SplitNew != yp, nil
}

// sessionDigest returns the digest of the region's session table, as a
// remote split's commit carries it: in a wire frame of the server's
// MaxFrameSize, beside the request's other fields.
func (rep *replica) sessionDigest() []byte {
	return rep.sm.SessionDigest(rep.srv.opts.MaxFrameSize - wire.HeaderSize - splitEndOverhead)
}

// splitEndOverhead bounds the bytes of a wire.SplitEndRequest beside its
// sessions.
const splitEndOverhead = 64
