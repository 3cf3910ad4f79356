package server

import (
	"fmt"
	"log/slog"

	"github.com/cellstore/cell/blink"
)

// Recovery of interrupted splits (DESIGN §9: "a new leader resumes or
// undoes every split its applied state shows in progress"). The applied
// log says where each split stopped (replState.Splits, fsm.go), and the
// trees' split state was rebuilt by replaying its records, since no
// snapshot is taken while a split holds a freeze:
//
//   - started, not linked: undo. An abort record thaws X and drops Y
//     (whose entries only share X's records); a remote Y is dropped by its
//     server (SplitEnd without commit).
//   - linked, not freed: finish. Free records free what is left of X's
//     old right half and thaw X; a remote Y is thawed (SplitEnd commit).
//   - freed, not ended: the separator goes into the parent (or the split
//     loop retries it later), then the end record.
//
// A root meganode made and not published (replState.NewRoot) is published
// when the region table names it, and dropped otherwise.

// resumeSplits resumes or undoes every split in progress in rep's region
// and settles an unpublished root. The split loop runs it first for the
// server's own region, and for a region the server takes over
// (failover.go) when it starts serving it.
func (s *Server) resumeSplits(rep *replica) {
	rep.applyMu.Lock()
	st := rep.repl.clone()
	rep.applyMu.Unlock()
	if len(st.Splits) == 0 && st.NewRoot.IsNil() {
		return
	}
	s.splitMu.Lock()
	defer s.splitMu.Unlock()
	defer s.splitEvent()
	for _, p := range st.Splits {
		if err := s.resumeSplitLocked(p); err != nil {
			s.log.Error("server: an interrupted split could not be resumed", slog.String("meganode", p.X.String()),
				slog.String("new", p.Y.String()), slog.Any("err", err))
		}
	}
	if np := st.NewRoot; !np.IsNil() {
		if err := s.settleNewRootLocked(rep, np); err != nil {
			s.log.Error("server: an unpublished root meganode could not be settled", slog.String("meganode", np.String()), slog.Any("err", err))
		}
	}
}

// resumeSplitLocked resumes or undoes one split. REQUIRES: s.splitMu held.
func (s *Server) resumeSplitLocked(p splitProgress) error {
	x := s.meganodeAt(p.X)
	if x == nil || x.m.Ptr() != p.X {
		return fmt.Errorf("server: split of %v, not a meganode here: %w", p.X, blink.ErrCorruption)
	}
	var tgt *splitTarget
	if p.Y.Region() != x.rep.regionID {
		tgt = &splitTarget{ptr: p.Y} // endRemoteTarget finds its host
	}
	log := s.log.With(slog.String("meganode", p.X.String()), slog.String("new", p.Y.String()), slog.String("sep", fmt.Sprintf("%q", p.Sep)))
	if !p.Linked {
		_, err := s.applySplit(x, p.Sep, splitBody{Phase: phaseAbort, New: p.Y})
		if tgt != nil {
			if terr := s.endRemoteTarget(tgt, false); terr != nil {
				log.Warn("server: the interrupted split's remote target was not dropped", slog.Any("err", terr))
			}
		}
		if err == nil {
			s.metrics.splits.WithLabelValues("aborted").Inc()
			log.Info("server: an interrupted split was undone (it had not linked)")
		}
		return err
	}
	if !p.Freed {
		for {
			res, err := s.applySplit(x, p.Sep, splitBody{Phase: phaseFree, New: p.Y, Batch: uint32(s.opts.SplitFreeBatch)})
			if err != nil {
				return err
			}
			if res.Done {
				break
			}
		}
		s.splitEvent()
	}
	if tgt != nil {
		// The target may have thawed Y already (its commit was applied
		// before the crash): a refusal then changes nothing.
		if err := s.endRemoteTarget(tgt, true); err != nil {
			log.Warn("server: the interrupted split's remote target was not thawed", slog.Any("err", err))
		}
	}
	if err := s.insertSeparatorLocked(x.level, p.Sep, p.Y, 0); err != nil {
		log.Warn("server: the interrupted split's separator is not in place yet; retrying in the background", slog.Any("err", err))
		s.pendingSeps = append(s.pendingSeps, pendingSep{x: x, sep: p.Sep, y: p.Y})
		return nil
	}
	if _, err := s.applySplit(x, p.Sep, splitBody{Phase: phaseEnd, New: p.Y}); err != nil {
		return err
	}
	s.metrics.splits.WithLabelValues("done").Inc()
	log.Info("server: an interrupted split was finished")
	return nil
}

// settleNewRootLocked publishes root meganode np if the region table names
// it (the compare-and-set was done, its publish record was not) and drops
// it otherwise. REQUIRES: s.splitMu held.
func (s *Server) settleNewRootLocked(rep *replica, np blink.Ptr) error {
	if blink.Ptr(s.root.Load()) == np {
		return s.publishRoot(rep, np)
	}
	_, err := rep.proposeRoot(rootDrop, np)
	return err
}
