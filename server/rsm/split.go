package rsm

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cellstore/cell/blink"
)

// Applying split records (record.go has their format; the server's split
// driver proposes them). REQUIRES: m.mu held, for every function here.

// applySplitLocked applies one split record r with body b, and keeps the
// splits in progress of the replicated state (state.go) up to date.
func (m *Machine) applySplitLocked(r *Record, b *SplitBody) (Result, error) {
	res, err := m.applySplitStepLocked(r, b)
	if err != nil {
		return res, err
	}
	st := &m.state
	switch b.Phase {
	case PhaseStart:
		y := b.New
		if y.IsNil() {
			y = res.New
		}
		st.Splits = append(st.Splits, SplitProgress{X: r.Meganode, Y: y, Sep: bytes.Clone(r.Key)})
	case PhaseLink:
		if p := st.SplitOf(r.Meganode); p != nil {
			p.Linked = true
		}
	case PhaseFree:
		if p := st.SplitOf(r.Meganode); p != nil && res.Done {
			p.Freed = true
		}
	case PhaseEnd:
		st.endSplit(r.Meganode)
	case PhaseAbort:
		if p := st.SplitOf(r.Meganode); p != nil && p.Y == b.New {
			st.endSplit(r.Meganode)
		}
	}
	return res, nil
}

// applySplitStepLocked applies one split record r with body b to the
// region.
func (m *Machine) applySplitStepLocked(r *Record, b *SplitBody) (Result, error) {
	x := m.MeganodeAt(r.Meganode)
	if x == nil || x.Ptr() != r.Meganode {
		return Result{}, fmt.Errorf("rsm: split record for %v, not a meganode of region %d: %w", r.Meganode, m.id, ErrBadRecord)
	}
	remote := b.New.Region() != m.id
	switch b.Phase {
	case PhaseStart:
		switch {
		case b.New.IsNil():
			yp, err := m.startSplitLocked(x, r.Key)
			return Result{New: yp}, err
		case remote:
			return Result{}, x.T.Freeze(r.Key)
		}
		return Result{}, fmt.Errorf("rsm: start record names %v: a local split's meganode is chosen by apply: %w", b.New, ErrBadRecord)
	case PhaseRoot:
		if !b.New.IsNil() {
			return Result{}, fmt.Errorf("rsm: root record names %v: the root's meganode is chosen by apply: %w", b.New, ErrBadRecord)
		}
		np, err := m.makeRootLocked(x, b.Cursor)
		return Result{New: np}, err
	case PhaseAbort:
		return Result{}, m.abortSplitLocked(x, b.New)
	}
	var y *Meganode
	if !remote {
		y = m.MeganodeAt(b.New)
		if y == nil || y.Ptr() != b.New || y.Level != x.Level {
			return Result{}, fmt.Errorf("rsm: %v record names %v, not a meganode at level %d: %w", b.Phase, b.New, x.Level, ErrBadRecord)
		}
	}
	info := x.T.Split()
	if b.Phase != PhaseEnd && (!info.Source || !bytes.Equal(info.Sep, r.Key)) {
		return Result{}, fmt.Errorf("rsm: %v record for %v at %q, which is not splitting there: %w", b.Phase, x.Ptr(), r.Key, ErrBadRecord)
	}
	switch b.Phase {
	case PhaseCopy:
		if remote {
			return Result{}, fmt.Errorf("rsm: copy record of a remote split: %w", ErrBadRecord)
		}
		next, err := blink.CopyRight(x.T, y.T, b.Cursor, int(b.Batch))
		return Result{Next: next}, err
	case PhaseLink:
		if remote {
			if len(b.Cursor) != 8 {
				return Result{}, fmt.Errorf("rsm: link record of a remote split without Y's root: %w", ErrBadRecord)
			}
			root := blink.Ptr(le.Uint64(b.Cursor))
			if root.Region() != b.New.Region() {
				return Result{}, fmt.Errorf("rsm: link record: Y's root %v is not in Y's region: %w", root, ErrBadRecord)
			}
			return Result{}, x.T.LinkRight(root)
		}
		return Result{}, x.T.LinkRight(y.T.Root())
	case PhaseFree:
		done, err := x.T.FreeRight(int(b.Batch))
		if err == nil && done {
			err = x.T.Thaw()
			if y != nil {
				err = errors.Join(err, y.T.Thaw())
			}
		}
		return Result{Done: done}, err
	case PhaseEnd:
		if y != nil && y.T.Split().Target {
			return Result{}, fmt.Errorf("rsm: end of the split of %v before its right half was freed: %w", x.Ptr(), ErrBadRecord)
		}
		return Result{}, nil
	}
	return Result{}, fmt.Errorf("rsm: split phase %v: %w", b.Phase, ErrBadRecord)
}

// startSplitLocked freezes x at sep and formats y, the right half's
// meganode, in the lowest free slot; it returns y's header pointer.
func (m *Machine) startSplitLocked(x *Meganode, sep []byte) (blink.Ptr, error) {
	if err := x.T.Freeze(sep); err != nil {
		return 0, err
	}
	h, err := x.T.Header()
	var yp blink.Ptr
	if err == nil {
		yp, err = m.newMeganodeLocked(x.Level, blink.Bounds{Min: sep, Max: h.Bounds.Max, MaxInf: h.Bounds.MaxInf}, func(y *blink.Tree) error {
			return y.BeginCopy(x.T.Right())
		})
	}
	if err != nil {
		return 0, errors.Join(err, x.T.Thaw())
	}
	return yp, nil
}

// makeRootLocked formats a new root meganode one level above x's, with
// the entries the root record lists: one per meganode of x's level, left
// to right, keyed by its min key ("\x00" stands for -inf: leaf entries
// have non-empty keys, no key is below it). It is the unpublished root
// until a root publish record (or an abort) ends it.
func (m *Machine) makeRootLocked(x *Meganode, body []byte) (blink.Ptr, error) {
	ents, err := DecodeRootEntries(body)
	if err != nil {
		return 0, err
	}
	if !m.state.NewRoot.IsNil() {
		return 0, fmt.Errorf("rsm: root record while %v is unpublished: %w", m.state.NewRoot, ErrBadRecord)
	}
	np, err := m.newMeganodeLocked(x.Level+1, blink.Full, func(n *blink.Tree) error {
		for _, e := range ents {
			if err := n.InsertChild(e.Key, e.Ptr); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		m.state.NewRoot = np
	}
	return np, err
}

// abortSplitLocked undoes a split of x before its link: x is thawed and
// the unreachable new meganode np (the right half's, or an unpublished
// root) is dropped. The records np's entries share stay x's.
func (m *Machine) abortSplitLocked(x *Meganode, np blink.Ptr) error {
	info := x.T.Split()
	if info.Linked {
		return fmt.Errorf("rsm: abort of the split of %v after its link: %w", x.Ptr(), ErrBadRecord)
	}
	n := m.MeganodeAt(np)
	if n != nil && n.Ptr() != np {
		n = nil
	}
	// Only a meganode nobody can reach may go: the target of x's split,
	// or one level above x while x is the root (an unpublished root).
	target := n != nil && info.Source && n.Level == x.Level && n.T.Split().Target
	rootCandidate := n != nil && n.Level == x.Level+1 && m.state.NewRoot == np
	if n != nil && !target && !rootCandidate {
		return fmt.Errorf("rsm: abort record for %v would drop %v, which may be reachable: %w", x.Ptr(), np, ErrBadRecord)
	}
	var errs []error
	if info.Source {
		errs = append(errs, x.T.Thaw())
	}
	if n != nil {
		errs = append(errs, m.dropMeganode(n.M.Slot()))
	}
	if rootCandidate {
		m.state.NewRoot = 0
	}
	return errors.Join(errs...)
}
