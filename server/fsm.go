package server

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/server/rsm"
)

// fsm is a replica seen as its raft group's state machine: an adapter
// from raft to the replica's rsm.Machine, which holds the region and the
// replicated state and applies records (package rsm). What is raft's or
// the server's stays here: the outcome a proposer waits for, the bytes of
// log since the last snapshot, the snapshot's logs and metrics, and
// stopping serving a region about to be restored.
type fsm replica

var _ raft.FSM = (*fsm)(nil)

// applyOutcome is what FSM.Apply returns for a record, the response of
// its raft.ApplyFuture.
type applyOutcome struct {
	res rsm.Result
	err error
}

// Apply applies one committed record.
func (f *fsm) Apply(l *raft.Log) any {
	f.logBytes.Add(uint64(len(l.Data)))
	res, err := f.sm.Apply(l.Index, l.Data)
	return applyOutcome{res: res, err: err}
}

// Snapshot captures the region's state at the last applied index: raft
// calls it between two Applies, so the capture is consistent
// (rsm.Machine.Snapshot); the image is written by Persist while the
// group applies on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	rep := (*replica)(f)
	snap, err := rep.sm.Snapshot()
	if err != nil {
		return nil, err
	}
	rep.logBytes.Store(0) // raft calls Snapshot between Applies
	rep.srv.metrics.snapshotPause.Observe(snap.Pause.Seconds())
	rep.srv.log.Info("server: region snapshot taken", slog.Uint64("region", uint64(rep.regionID)), slog.Uint64("applied", snap.Applied()),
		slog.Duration("pause", snap.Pause))
	return &regionSnapshot{rep: rep, snap: snap}, nil
}

// Restore replaces the region with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	rep := (*replica)(f)
	if srv := rep.srv; srv.hosting.unserve(rep) {
		// A leader that lost its group is sent a snapshot: the region
		// it served is about to be replaced.
		srv.log.Warn("server: a region we served is restored from its new leader's snapshot; stopped serving it", slog.Uint64("region", uint64(rep.regionID)))
	}
	if err := rep.sm.Restore(rc); err != nil {
		return err
	}
	rep.logBytes.Store(0)
	return nil
}

// regionSnapshot is a snapshot taken by Snapshot, written out by Persist
// while the group applies on.
type regionSnapshot struct {
	rep  *replica
	snap *rsm.Snapshot
}

func (r *regionSnapshot) Persist(sink raft.SnapshotSink) error {
	rep := r.rep
	start := time.Now()
	st, err := r.snap.Write(sink)
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("server: snapshot of region %d: %w", rep.regionID, err)
	}
	rep.srv.metrics.snapshotBytes.Set(float64(st.Bytes))
	rep.srv.metrics.snapshotSaved.Set(float64(st.SavedBytes))
	rep.srv.log.Info("server: region snapshot written", slog.Uint64("region", uint64(rep.regionID)), slog.Uint64("applied", r.snap.Applied()),
		slog.Uint64("bytes", st.Bytes), slog.Uint64("pages", st.Pages), slog.Uint64("saved_pages", st.SavedPages), slog.Uint64("saved_bytes", st.SavedBytes),
		slog.Duration("took", time.Since(start)))
	return sink.Close()
}

func (r *regionSnapshot) Release() { r.snap.Release() }
