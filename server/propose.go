package server

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// Proposals. Every record is proposed to the region's raft group and
// applied by its FSM once committed (fsm.go, package rsm). A caller learns the
// record's outcome (apply's result and error) from the future; an error
// of raft's own says whether the record may still commit (proposalError).
//
// A worker does not hold its slot through the round trip (the log's sync
// is the slow part, and one worker per core would otherwise allow one
// sync at a time): worker.write proposes and returns errProposed, and a
// goroutine per proposal (awaitWrite) waits for the outcome and answers
// the request, or, when the write met a split (apply said frozen, full,
// or the key moved), runs it again from its search: queued again at
// once, or parked until the split moves on (park.go). Group commit comes
// from raft (BatchApplyCh: the records proposed meanwhile share one
// append and one sync).

// errProposed is what worker.write returns when it proposed its record
// and left the answer to awaitWrite.
var errProposed = errors.New("server: the write was proposed; its outcome answers it")

// proposal is a write in flight: its future, and what awaitWrite needs
// to settle it.
type proposal struct {
	f     raft.ApplyFuture
	start time.Time     // when it was proposed
	rep   *replica      // the replica it was proposed to
	lm    *rsm.Meganode // the leaf meganode the record is for
	gen   uint64        // the split generation when it was searched
	op    wire.Op
}

// proposals gate a replica's proposals, so that its group can be shut
// down without leaving one unanswered: with raft's buffered proposal
// queue (Config.BatchApplyCh), a record queued when the group shuts down
// is never answered, and one proposed after Shutdown may still be queued.
// stop refuses new proposals, waits for those in flight to settle (a group
// that stepped down answers queued ones ErrNotLeader), and only then may
// the group shut down.
type proposals struct {
	mu       sync.RWMutex
	stopped  bool
	inflight sync.WaitGroup
}

// stop refuses new proposals and waits up to wait for those in flight.
func (p *proposals) stop(wait time.Duration) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// refused is the future of a proposal made after stop.
type refused struct{}

func (refused) Error() error  { return raft.ErrRaftShutdown }
func (refused) Index() uint64 { return 0 }
func (refused) Response() any { return nil }

// proposeAsync proposes rec (copied: raft keeps the slice) and returns
// its future at once. Every future it returns must be settled (settle).
func (rep *replica) proposeAsync(rec []byte) raft.ApplyFuture {
	p := &rep.props
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.stopped {
		return refused{}
	}
	p.inflight.Add(1)
	return rep.raft.Apply(bytes.Clone(rec), rep.srv.opts.ProposalTimeout)
}

// propose proposes rec and waits for its outcome.
func (rep *replica) propose(rec []byte) (rsm.Result, error) {
	start := time.Now()
	res, err := rep.settle(rep.proposeAsync(rec))
	rep.srv.metrics.proposals.Observe(time.Since(start).Seconds())
	return res, err
}

// settle waits for the outcome of a future proposeAsync returned.
func (rep *replica) settle(f raft.ApplyFuture) (rsm.Result, error) {
	if _, ok := f.(refused); ok {
		return rsm.Result{}, proposalError(f.Error())
	}
	defer rep.props.inflight.Done()
	if err := f.Error(); err != nil {
		return rsm.Result{}, proposalError(err)
	}
	out, ok := f.Response().(applyOutcome)
	if !ok {
		return rsm.Result{}, wireErrorf(wire.StatusInternal, "proposal answered %T", f.Response())
	}
	return out.res, out.err
}

// writeStep is what a write does after its record's outcome.
type writeStep uint8

const (
	writeDone  writeStep = iota // answer with the outcome
	writeAgain                  // search again at once (the key moved)
	writeWait                   // wait for the split to move on, then search again
)

// afterApply decides a write's next step from its record's outcome
// (worker.write's doc), and counts its waits in j. A full meganode counts
// as one of the write's maxFullWaits only once a split of that meganode
// ran since the write last found it full: waking up for another
// meganode's split is no reason to give up (the write's wait bound still
// ends it).
func (s *Server) afterApply(j *job, lm *rsm.Meganode, err error, deadline time.Time) (writeStep, error) {
	switch {
	case err == nil:
		s.maybeRequestSplit(lm)
		return writeDone, nil
	case errors.Is(err, blink.ErrKeyOutOfRange) && j.moves < maxMoves:
		j.moves++
		return writeAgain, nil
	case errors.Is(err, blink.ErrFrozen):
		s.metrics.waits.WithLabelValues("frozen").Inc()
	case errors.Is(err, blink.ErrNeedsSplit) && !s.opts.DisableSplits && j.fullWaits < maxFullWaits:
		if runs := lm.Splits.Runs.Load(); j.full != lm || j.fullRuns != runs {
			j.fullWaits++
			j.full, j.fullRuns = lm, runs
		}
		s.metrics.waits.WithLabelValues("full").Inc()
		s.requestSplit(lm, true)
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

// awaitWrite settles the proposal of queued job j, which a worker started
// at start: it answers the request, or runs it again (writeStep).
func (s *Server) awaitWrite(j job, p proposal, start time.Time) {
	res, err := p.rep.settle(p.f)
	s.metrics.proposals.Observe(time.Since(p.start).Seconds())
	dl, _ := j.f.Header.Deadline(j.arrived)
	step, err := s.afterApply(&j, p.lm, err, dl)
	switch step {
	case writeAgain:
		s.requeue(j)
		return
	case writeWait:
		if s.park(j, p.gen) {
			return
		}
		err = wireErrorf(wire.StatusUnavailable, "server stopping")
	}
	if err == nil && p.op == wire.OpDelete && !res.Found {
		err = wire.ErrNotFound
	}
	s.answer(j, nil, err, start.Sub(j.arrived), time.Since(start))
}
