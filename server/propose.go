package server

import (
	"bytes"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// Proposals. Every record is proposed to the region's raft group and
// applied by its FSM once committed (fsm.go, package rsm). A caller learns the
// record's outcome (apply's result and error) from the future; an error
// of raft's own says whether the record may still commit (proposalError).
// A client's write goes through them as a state machine of its own
// (write.go). Group commit comes from raft (BatchApplyCh: the records
// proposed meanwhile share one append and one sync).

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
