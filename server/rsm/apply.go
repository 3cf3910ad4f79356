package rsm

import (
	"fmt"

	"github.com/cellstore/cell/blink"
)

// Result is what applying a record did.
type Result struct {
	// Found: a delete removed a key (false: the key was absent).
	Found bool
	// Next: a split copy's cursor for the next batch (nil: copy done).
	Next []byte
	// Done: a split free batch freed the last node of the right half.
	Done bool
	// Root: a target append's meganode's local root after the append.
	Root blink.Ptr
	// New: the meganode a record formatted (a local split's start, a
	// split's root, a target begin, a root format), in the slot apply
	// chose.
	New blink.Ptr
}

// Apply applies an encoded write record, the log entry at index, to the
// region. It is the only writer of region memory, and runs only on the
// region's raft group's FSM goroutine, in log order, or in tests that
// replay a log. Every error it returns is part of the record's
// deterministic outcome: every replica gets the same one.
func (m *Machine) Apply(index uint64, rec []byte) (Result, error) {
	r, err := DecodeRecord(rec)
	if err != nil {
		return Result{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied.Store(index)
	m.state.Applied = index
	// The index in the region too, whatever the outcome, in the region
	// the record leaves (a region record may make it anew): its image
	// then says which log index it is at.
	defer func() { m.region.SetApplied(index) }()
	var res Result
	kind := "put"
	if !m.state.Formatted && r.Kind != KindRegion {
		err = fmt.Errorf("rsm: %v record before the region record: %w", r.Kind, ErrBadRecord)
	}
	switch {
	case err != nil:
	case r.Kind == KindPut, r.Kind == KindDelete:
		lm := m.MeganodeAt(r.Meganode)
		if lm == nil || lm.Ptr() != r.Meganode || lm.Level != 0 {
			return Result{}, fmt.Errorf("rsm: record for %v, not a leaf meganode of region %d: %w", r.Meganode, m.id, ErrBadRecord)
		}
		if r.Kind == KindDelete {
			kind = "delete"
		}
		if found, dup := m.state.Sessions.lookup(r.ClientID, r.Seq); dup && r.ClientID != 0 {
			kind += "_duplicate" // applied before: at most once
			res.Found = found
			break
		}
		if err = m.state.Sessions.refusal(r.Flags, r.ClientID, r.Seq); err != nil {
			kind += "_unverifiable"
			break
		}
		if r.Kind == KindPut {
			err = lm.T.Put(r.Key, r.Value)
		} else {
			res.Found, err = lm.T.Delete(r.Key)
		}
		if err == nil && r.ClientID != 0 {
			m.state.Sessions.record(r.ClientID, r.Seq, res.Found, index)
		}
	case r.Kind == KindChild:
		kind = "child"
		lm := m.MeganodeAt(r.Meganode)
		if lm == nil || lm.Ptr() != r.Meganode || lm.Level == 0 {
			return Result{}, fmt.Errorf("rsm: child record for %v, not an inner meganode of region %d: %w", r.Meganode, m.id, ErrBadRecord)
		}
		err = lm.T.InsertChild(r.Key, blink.Ptr(le.Uint64(r.Value)))
	case r.Kind == KindSplit:
		b, _ := DecodeSplitBody(r.Value) // DecodeRecord checked it
		kind = "split_" + b.Phase.String()
		res, err = m.applySplitLocked(&r, &b)
	case r.Kind == KindTarget:
		b, _ := DecodeTargetBody(r.Value) // DecodeRecord checked it
		kind = "target_" + b.Phase.String()
		res, err = m.applyTargetLocked(&r, &b)
	case r.Kind == KindRegion:
		kind = "region"
		b, _ := DecodeRegionBody(r.Value)
		err = m.applyRegionLocked(b)
	case r.Kind == KindRoot:
		p, _ := DecodeRootBody(r.Value)
		kind = "root_" + p.String()
		res, err = m.applyRootLocked(p, r.Meganode)
	}
	if m.onApply != nil {
		m.onApply(index, rec, kind, err)
	}
	return res, err
}

// applyRegionLocked applies the region record: the first of the log,
// which pins the region's layout. A region made with other sizes (this
// server's flags differ from those the region was made with), or with
// another extent allocator (a log written before size classes, flag 0,
// replayed by a server that makes regions with them, or the other way),
// is made again, empty, with the record's.
func (m *Machine) applyRegionLocked(b Layout) error {
	if m.state.Formatted {
		return fmt.Errorf("rsm: a second region record: %w", ErrBadRecord)
	}
	lay := m.region.Layout()
	if lay.Size != b.Size || lay.MeganodeSize != b.MeganodeSize || lay.NodeSize != uint64(b.NodeSize) || m.region.SizeClasses() != b.SizeClasses {
		if err := m.remakeLocked(b); err != nil {
			return err
		}
	}
	m.state.Formatted = true
	return nil
}

// applyRootLocked applies a root record (phase p, for meganode mp).
func (m *Machine) applyRootLocked(p RootPhase, mp blink.Ptr) (Result, error) {
	switch p {
	case RootFormat:
		if !mp.IsNil() || !m.state.NewRoot.IsNil() {
			return Result{}, fmt.Errorf("rsm: root format record for %v while %v is unpublished: %w", mp, m.state.NewRoot, ErrBadRecord)
		}
		np, err := m.newMeganodeLocked(0, blink.Full, func(*blink.Tree) error { return nil })
		if err != nil {
			return Result{}, err
		}
		m.state.NewRoot = np
		return Result{New: np}, nil
	case RootPublish:
		if lm := m.MeganodeAt(mp); lm == nil || lm.Ptr() != mp {
			return Result{}, fmt.Errorf("rsm: root publish record for %v, not a meganode here: %w", mp, ErrBadRecord)
		}
		m.region.SetRoot(mp)
		if m.state.NewRoot == mp {
			m.state.NewRoot = 0
		}
		return Result{}, nil
	case RootDrop:
		lm := m.MeganodeAt(mp)
		if mp.IsNil() || m.state.NewRoot != mp || lm == nil || lm.Ptr() != mp {
			return Result{}, fmt.Errorf("rsm: root drop record for %v, not the unpublished root %v: %w", mp, m.state.NewRoot, ErrBadRecord)
		}
		m.state.NewRoot = 0
		return Result{}, m.dropMeganode(lm.M.Slot())
	}
	return Result{}, fmt.Errorf("rsm: root phase %v: %w", p, ErrBadRecord)
}
