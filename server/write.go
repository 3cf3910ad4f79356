package server

import (
	"bytes"
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// A client's write (put, delete) is a state machine over the queued job
// that carries it, so that no worker holds its slot through the log's
// sync (one worker per core would otherwise allow one sync at a time):
//
//	searching ──► proposed ──► answered
//	    ▲             │
//	    │             ├─► requeued (the key moved to another meganode)
//	    │             └─► parked   (a split froze the key's range, or
//	    └───────────────────────── the meganode is full and splits)
//
//   - searching: a worker descends to the key's leaf meganode (search.go's
//     leafFor), builds the record and proposes it to the region's group
//     (proposeAsync). Its handler returns the proposal (handled.proposed)
//     and the worker moves on.
//   - proposed: a goroutine per proposal (settleWrite) waits for the
//     record's outcome and decides the next step (afterApply).
//   - answered: the outcome is the reply (a delete that found nothing is
//     NotFound); also when the wait bound ran out (NeedsRetry).
//   - requeued: the key moved since the search (a split linked): the job
//     goes back in the queue and a worker searches again, at most
//     maxMoves times.
//   - parked: the write waits in the parking lot (park.go) until the
//     split moves on, then is requeued; a full meganode asks for its split
//     first, and counts towards maxFullWaits once a split of it ran. The
//     wait is bounded by Options.MaxSplitWait and the request's deadline.
//
// Meganode splits stay invisible to the client, which sees at most
// NeedsRetry (or Expired past its deadline).

// Bounds of a write's retries.
const (
	maxMoves     = 8 // the key's meganode changed between search and apply
	maxFullWaits = 3 // splits asked for after ErrNeedsSplit
)

// ackBeforeCommitDelay is how long TestingKnobs.AckBeforeCommit holds an
// acknowledged write before proposing it.
const ackBeforeCommitDelay = 100 * time.Millisecond

// proposal is a write in flight: its future, and what settleWrite needs
// to settle it.
type proposal struct {
	f     raft.ApplyFuture
	start time.Time     // when it was proposed
	rep   *replica      // the replica it was proposed to
	lm    *rsm.Meganode // the leaf meganode the record is for
	gen   uint64        // the split generation when it was searched
	op    wire.Op
}

// put proposes the write of a PutRequest.
func (w *worker) put(body []byte) handled {
	req := &w.putReq
	if err := req.Decode(body); err != nil {
		return reply(nil, err)
	}
	if len(req.Value) > wire.MaxValueSize {
		return reply(nil, wireErrorf(wire.StatusValueTooLarge, "value of %d bytes, limit %d", len(req.Value), wire.MaxValueSize))
	}
	flags, err := w.writeFlags(req.ClientID)
	if err != nil {
		return reply(nil, err)
	}
	return w.write(req.Ptr, req.Epoch, req.Key, "put", func(lm *rsm.Meganode) []byte {
		w.rec = rsm.AppendRecord(w.rec[:0], &rsm.Record{Kind: rsm.KindPut, Flags: flags, Meganode: lm.Ptr(), ClientID: req.ClientID, Seq: req.Seq, Key: req.Key, Value: req.Value})
		return w.rec
	})
}

// del proposes the write of a DeleteRequest.
func (w *worker) del(body []byte) handled {
	req := &w.delReq
	if err := req.Decode(body); err != nil {
		return reply(nil, err)
	}
	flags, err := w.writeFlags(req.ClientID)
	if err != nil {
		return reply(nil, err)
	}
	return w.write(req.Ptr, req.Epoch, req.Key, "delete", func(lm *rsm.Meganode) []byte {
		w.rec = rsm.AppendRecord(w.rec[:0], &rsm.Record{Kind: rsm.KindDelete, Flags: flags, Meganode: lm.Ptr(), ClientID: req.ClientID, Seq: req.Seq, Key: req.Key})
		return w.rec
	})
}

// cond proposes the write of a CondRequest (docs/transactions.md §3): the
// condition is evaluated in apply, never here.
func (w *worker) cond(body []byte) handled {
	req := &w.condReq
	if err := req.Decode(body); err != nil {
		return reply(nil, err)
	}
	if len(req.Value) > wire.MaxValueSize || len(req.ExpectedValue) > wire.MaxValueSize {
		return reply(nil, wireErrorf(wire.StatusValueTooLarge, "value of %d bytes, limit %d", max(len(req.Value), len(req.ExpectedValue)), wire.MaxValueSize))
	}
	flags, err := w.writeFlags(req.ClientID)
	if err != nil {
		return reply(nil, err)
	}
	return w.write(req.Ptr, req.Epoch, req.Key, "conditional write", func(lm *rsm.Meganode) []byte {
		w.val = rsm.AppendCondBody(w.val[:0], &rsm.CondBody{Op: uint8(req.Op), Target: uint8(req.Target), Compare: uint8(req.Compare),
			ExpectedVersion: req.ExpectedVersion, Expected: req.ExpectedValue, Value: req.Value})
		w.rec = rsm.AppendRecord(w.rec[:0], &rsm.Record{Kind: rsm.KindCond, Flags: flags, Meganode: lm.Ptr(), ClientID: req.ClientID, Seq: req.Seq, Key: req.Key, Value: w.val})
		return w.rec
	})
}

// writeFlags returns the record flags of the write request being served:
// rsm.FlagRetry when the request came with wire.FlagRetry, which needs a
// client id (the session table vouches per client); otherwise
// rsm.FlagFloor and rsm.FlagForgotten for a write with a client id (a
// first attempt), none for one without.
func (w *worker) writeFlags(client uint64) (uint16, error) {
	retry := w.job.f.Header.Flags&wire.FlagRetry != 0
	switch {
	case retry && client == 0:
		return 0, wireErrorf(wire.StatusBadRequest, "a retried write without a client id")
	case retry:
		return rsm.FlagRetry, nil
	case client != 0:
		return rsm.FlagFloor | rsm.FlagForgotten, nil
	}
	return 0, nil
}

// txn proposes the txn record of a TxnRequest (docs/transactions.md
// §4.9): it searches the transaction's least key, checks that every other
// key is in the same region (else TxnSpansRegions), and proposes; the
// reads are validated in apply, never here. A transaction without writes
// is proposed too: its record validates the reads at one point of the
// region's log (serving it under the read lease without a log entry is
// left for later).
func (w *worker) txn(body []byte) handled {
	req := &w.txnReq
	if err := req.Decode(body); err != nil {
		return reply(nil, err)
	}
	for _, wr := range req.Writes {
		if len(wr.Value) > wire.MaxValueSize {
			return reply(nil, wireErrorf(wire.StatusValueTooLarge, "value of %d bytes, limit %d", len(wr.Value), wire.MaxValueSize))
		}
	}
	var keys [][]byte
	for _, r := range req.Reads {
		keys = append(keys, r.Key)
	}
	for _, r := range req.Ranges {
		keys = append(keys, r.Start)
	}
	for _, wr := range req.Writes {
		keys = append(keys, wr.Key)
	}
	for _, k := range keys {
		if err := w.checkKey(k); err != nil {
			return reply(nil, err)
		}
	}
	least := req.MinKey()
	if least == nil {
		return reply(nil, wireErrorf(wire.StatusBadRequest, "a transaction without keys"))
	}
	flags, err := w.writeFlags(req.ClientID)
	if err != nil {
		return reply(nil, err)
	}
	check := func(lm *rsm.Meganode) error {
		for _, k := range keys {
			hp, err := w.descend(lm, k)
			if err != nil {
				return err
			}
			if !hp.next.IsNil() || hp.lm.Ptr().Region() != lm.Ptr().Region() {
				return wireErrorf(wire.StatusTxnSpansRegions, "key %q is not in region %d of key %q (multi-region transactions are not built yet)", k, lm.Ptr().Region(), least)
			}
		}
		return nil
	}
	return w.writeChecked(req.Ptr, req.Epoch, least, "transaction", check, func(lm *rsm.Meganode) []byte {
		w.val = rsm.AppendTxnBody(w.val[:0], txnBody(req))
		w.rec = rsm.AppendRecord(w.rec[:0], &rsm.Record{Kind: rsm.KindTxn, Flags: flags, Meganode: lm.Ptr(), ClientID: req.ClientID, Seq: req.Seq, Value: w.val})
		return w.rec
	})
}

// txnBody is the txn record body of a TxnRequest: the same reads, ranges
// and writes in rsm's types (rsm imports no wire type).
func txnBody(req *wire.TxnRequest) *rsm.TxnBody {
	b := &rsm.TxnBody{
		Reads:  make([]rsm.TxnRead, len(req.Reads)),
		Ranges: make([]rsm.TxnRange, len(req.Ranges)),
		Writes: make([]rsm.TxnWrite, len(req.Writes)),
	}
	for i, r := range req.Reads {
		b.Reads[i] = rsm.TxnRead{Key: r.Key, Version: r.Version}
	}
	for i, r := range req.Ranges {
		b.Ranges[i] = rsm.TxnRange{Start: r.Start, End: r.End, Limit: r.Limit, Count: r.Count, Hash: r.Hash}
	}
	for i, wr := range req.Writes {
		b.Writes[i] = rsm.TxnWrite{Op: rsm.TxnWriteOp(wr.Op), Key: wr.Key, Value: wr.Value}
	}
	return b
}

// write is the searching state: it descends to the leaf meganode of key
// and proposes the record rec builds for it.
func (w *worker) write(p blink.Ptr, epoch uint64, key []byte, what string, rec func(*rsm.Meganode) []byte) handled {
	return w.writeChecked(p, epoch, key, what, nil, rec)
}

// writeChecked is write that, when check is not nil, checks the leaf
// meganode of key with it before proposing.
func (w *worker) writeChecked(p blink.Ptr, epoch uint64, key []byte, what string, check func(*rsm.Meganode) error, rec func(*rsm.Meganode) []byte) handled {
	s := w.s
	gen := s.splits.wake.generation()
	hp, err := w.leafFor(p, epoch, key, what)
	if err != nil {
		return reply(nil, err)
	}
	if check != nil {
		if err := check(hp.lm); err != nil {
			return reply(nil, err)
		}
	}
	rep, err := s.holder(hp.lm)
	if err != nil {
		return reply(nil, err)
	}
	if s.opts.TestingKnobs.AckBeforeCommit {
		// Answered now, proposed a while later: a kill in between
		// loses the write.
		r := bytes.Clone(rec(hp.lm))
		time.AfterFunc(ackBeforeCommitDelay, func() { _, _ = rep.settle(rep.proposeAsync(r)) })
		return reply(nil, nil)
	}
	start := time.Now()
	f := rep.proposeAsync(rec(hp.lm))
	return handled{proposed: true, p: proposal{f: f, start: start, rep: rep, lm: hp.lm, gen: gen, op: w.job.f.Header.Op}}
}

// settleWrite is the proposed state of queued job j, which a worker
// started at start: it waits for p's outcome, then answers the request,
// requeues it or parks it (afterApply).
func (rs *rpcServer) settleWrite(j job, p proposal, start time.Time) {
	s := rs.s
	res, err := p.rep.settle(p.f)
	s.metrics.proposals.Observe(time.Since(p.start).Seconds())
	dl, _ := j.f.Header.Deadline(j.arrived)
	step, err := rs.afterApply(&j, p.lm, err, dl)
	switch step {
	case writeAgain:
		rs.requeue(j)
		return
	case writeWait:
		if rs.park(j, p.gen) {
			return
		}
		err = wireErrorf(wire.StatusUnavailable, "server stopping")
	}
	if err == nil && p.op == wire.OpDelete && !res.Found {
		err = wire.ErrNotFound
	}
	var msg wire.Message
	switch {
	case err != nil:
	case p.op == wire.OpCondWrite:
		msg = &wire.CondReply{Succeeded: !res.CondFailed, Version: res.Version}
	case p.op == wire.OpTxn:
		msg = &wire.TxnReply{Committed: res.TxnCause == 0, Cause: wire.TxnCause(res.TxnCause), Version: res.Version}
	default:
		msg = &wire.WriteReply{Version: res.Version}
	}
	rs.answer(j, msg, err, start.Sub(j.arrived), time.Since(start))
}

// writeStep is what a write does after its record's outcome.
type writeStep uint8

const (
	writeDone  writeStep = iota // answered with the outcome
	writeAgain                  // requeued: search again at once (the key moved)
	writeWait                   // parked: wait for the split to move on, then search again
)

// afterApply decides a write's next step from its record's outcome, and
// counts its waits in j. A full meganode counts as one of the write's
// maxFullWaits only once a split of that meganode ran since the write
// last found it full: waking up for another meganode's split is no reason
// to give up (the write's wait bound still ends it).
func (rs *rpcServer) afterApply(j *job, lm *rsm.Meganode, err error, deadline time.Time) (writeStep, error) {
	s := rs.s
	switch {
	case err == nil:
		s.splits.maybeRequestSplit(lm)
		return writeDone, nil
	case errors.Is(err, blink.ErrKeyOutOfRange) && j.moves < maxMoves:
		j.moves++
		return writeAgain, nil
	case errors.Is(err, blink.ErrFrozen):
		s.metrics.waits.WithLabelValues("frozen").Inc()
	case errors.Is(err, blink.ErrNeedsSplit) && !s.opts.DisableSplits && j.fullWaits < maxFullWaits:
		var full *rsm.FullError
		if errors.As(err, &full) {
			if fl := s.servedMeganode(full.Meganode); fl != nil {
				lm = fl // a transaction's write into another meganode than its record's
			}
		}
		if runs := lm.Splits.Runs.Load(); j.full != lm || j.fullRuns != runs {
			j.fullWaits++
			j.full, j.fullRuns = lm, runs
		}
		s.metrics.waits.WithLabelValues("full").Inc()
		s.splits.requestSplit(lm, true)
	default:
		return writeDone, err
	}
	if j.waitUntil.IsZero() {
		j.waitUntil = time.Now().Add(s.opts.MaxSplitWait)
		if !deadline.IsZero() && deadline.Before(j.waitUntil) {
			j.waitUntil = deadline
		}
	}
	if !time.Now().Before(j.waitUntil) {
		return writeDone, wireErrorf(wire.StatusNeedsRetry, "a meganode split is in progress")
	}
	return writeWait, nil
}
