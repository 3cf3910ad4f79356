package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/server/rsm"
)

// Recovery of interrupted splits (docs/design.md §9: "a new leader resumes or
// undoes every split its applied state shows in progress"). The applied
// log says where each split stopped (rsm.State.Splits), and the
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
// A root meganode made and not published (rsm.State.NewRoot) is published
// when the region table names it, and dropped otherwise, before the splits
// are resumed: the split that made it is one of them.

// resumeSplits resumes or undoes every split in progress in rep's region
// and settles an unpublished root. The split loop runs it first for the
// server's own region, and for a region the server takes over
// (failover.go) when it starts serving it.
func (sp *splitter) resumeSplits(rep *replica) {
	s := sp.s
	splits, newRoot := rep.sm.Progress()
	if len(splits) == 0 && newRoot.IsNil() {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	defer s.splitEvent()
	// The root first: a split of the root's level that grew it is
	// resumed over the root the table names, and it grows another only
	// once no root is left unpublished (apply refuses a second).
	if np := newRoot; !np.IsNil() {
		if err := sp.settleNewRootLocked(rep, np); err != nil {
			s.log.Error("server: an unpublished root meganode could not be settled", slog.String("meganode", np.String()), slog.Any("err", err))
		}
	}
	for _, p := range splits {
		if err := sp.resumeSplitLocked(p); err != nil {
			s.log.Error("server: an interrupted split could not be resumed", slog.String("meganode", p.X.String()),
				slog.String("new", p.Y.String()), slog.Any("err", err))
		}
	}
}

// resumeSplitLocked resumes or undoes one split, with a driver rebuilt
// from the applied state; a remainder of the same split this server still
// had queued (its separator) is dropped, the rebuilt driver doing it.
// REQUIRES: s.splits.mu held.
func (sp *splitter) resumeSplitLocked(p rsm.SplitProgress) error {
	d, err := sp.resumeDriver(p)
	if err != nil {
		return err
	}
	sp.pendingSeps = slices.DeleteFunc(sp.pendingSeps, func(q *splitDriver) bool { return q.x == d.x })
	return d.resume()
}

// resumeDriver rebuilds the driver of split p from what its applied
// records did.
func (sp *splitter) resumeDriver(p rsm.SplitProgress) (*splitDriver, error) {
	s := sp.s
	x := s.servedMeganode(p.X)
	if x == nil || x.Ptr() != p.X {
		return nil, fmt.Errorf("server: split of %v, not a meganode here: %w", p.X, blink.ErrCorruption)
	}
	d := &splitDriver{s: s, x: x, sep: bytes.Clone(p.Sep), y: p.Y, linked: p.Linked, freed: p.Freed, resumed: true, before: x.T.Usage()}
	if p.Y.Region() != p.X.Region() {
		d.tgt = &splitTarget{ptr: p.Y} // endRemoteTarget finds its host
	}
	return d, nil
}

// resume takes a rebuilt split to its end: one not linked is undone; one
// linked goes through the steps left of free, thaw, separator and end.
// Unlike the first driver it goes on past a thaw that failed: the target
// may have thawed Y before the crash and, restored from a snapshot since,
// refuse the repeated end, which changes nothing.
func (d *splitDriver) resume() error {
	log := d.s.log.With(slog.String("meganode", d.x.Ptr().String()), slog.String("new", d.y.String()), slog.String("sep", fmt.Sprintf("%q", d.sep)))
	if !d.linked {
		if err := d.abort(); err != nil {
			return err
		}
		log.Info("server: an interrupted split was undone (it had not linked)")
		return nil
	}
	if !d.freed {
		if err := d.free(); err != nil {
			return err
		}
	}
	if err := d.thawTarget(); err != nil {
		log.Warn("server: the interrupted split's remote target was not thawed", slog.Any("err", err))
	}
	if !d.separator() {
		return nil // retried in the background; the split's end waits for it
	}
	return d.end()
}

// settleNewRootLocked publishes root meganode np if the region table names
// it (the compare-and-set was done, its publish record was not) and drops
// it otherwise. REQUIRES: s.splits.mu held.
func (sp *splitter) settleNewRootLocked(rep *replica, np blink.Ptr) error {
	s := sp.s
	if blink.Ptr(s.root.Load()) == np {
		return s.publishRoot(rep, np)
	}
	_, err := rep.proposeRoot(rsm.RootDrop, np)
	return err
}
