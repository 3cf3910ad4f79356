package rsm

import (
	"errors"
	"fmt"

	"github.com/cellstore/cell/blink"
)

// Result is what applying a record did.
type Result struct {
	// Found: a delete removed a key (false: the key was absent).
	Found bool
	// Version: the version a put gave its key (0 in a region without
	// versions), or, for a duplicate, the one its first application gave;
	// for a cond record whose condition failed, the key's current version
	// (0: absent).
	Version uint64
	// CondFailed: a cond record's condition did not hold; nothing
	// changed. A definite outcome, not an error.
	CondFailed bool
	// TxnCause: why a txn record did not commit (TxnVersion,
	// TxnPhantom); nothing changed. 0: it committed (Version is
	// then the version its puts got, 0 when it wrote no value).
	TxnCause uint8
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
	case r.Kind == KindPut, r.Kind == KindDelete, r.Kind == KindCond, r.Kind == KindTxn:
		lm := m.MeganodeAt(r.Meganode)
		if lm == nil || lm.Ptr() != r.Meganode || lm.Level != 0 {
			return Result{}, fmt.Errorf("rsm: record for %v, not a leaf meganode of region %d: %w", r.Meganode, m.id, ErrBadRecord)
		}
		switch r.Kind {
		case KindDelete:
			kind = "delete"
		case KindCond:
			kind = "cond"
		case KindTxn:
			kind = "txn"
		}
		if o, dup := m.state.Sessions.lookupOutcome(r.ClientID, r.Seq); dup && r.ClientID != 0 {
			kind += "_duplicate" // applied before: at most once
			res.Found, res.Version = o.found(), o.version()
			break
		}
		if err = m.state.Sessions.refusal(r.Flags, r.ClientID, r.Seq); err != nil {
			kind += "_unverifiable"
			break
		}
		switch r.Kind {
		case KindPut:
			res.Version, err = m.putLocked(lm, index, r.Key, r.Value)
		case KindDelete:
			res.Found, err = lm.T.Delete(r.Key)
		case KindCond:
			b, _ := DecodeCondBody(r.Value) // DecodeRecord checked it
			res, err = m.condLocked(lm, index, r.Key, &b)
			if res.CondFailed {
				kind += "_failed"
			}
		case KindTxn:
			b, _ := DecodeTxnBody(r.Value) // DecodeRecord checked it
			res, err = m.txnLocked(lm, index, &b)
			if res.TxnCause != 0 {
				kind += "_failed"
			}
		}
		if err == nil && !res.CondFailed && res.TxnCause == 0 && r.ClientID != 0 {
			m.state.Sessions.recordOutcome(r.ClientID, r.Seq, makeOutcome(res.Found, res.Version), index)
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
	case r.Kind == KindVersion:
		kind = "version"
		err = m.applyVersionLocked(index)
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

// putLocked puts key's value into leaf meganode lm as a record applied at
// index: with a version from the clock in a versioned region
// (docs/transactions.md §2.2), as before versions otherwise. The clock
// moves only when the put applied. REQUIRES: m.mu held.
func (m *Machine) putLocked(lm *Meganode, index uint64, key, value []byte) (uint64, error) {
	if !m.state.Versioned() {
		return 0, lm.T.Put(key, value)
	}
	v := max(index, m.state.Clock+1)
	if err := lm.T.PutWord(key, value, blink.MakeWord(v, false, false)); err != nil {
		return 0, err
	}
	m.state.Clock = v
	return v, nil
}

// applyVersionLocked applies the version record at index: from here on
// the region's keys have versions (docs/transactions.md §2.6). Every
// entry written before reads as version U = index; every tree switches to
// versioned leaves (a legacy leaf is rewritten when a record changes it).
// A second version record changes nothing. REQUIRES: m.mu held.
func (m *Machine) applyVersionLocked(index uint64) error {
	if m.state.Versioned() {
		return nil
	}
	if len(m.state.Splits) > 0 || len(m.targets) > 0 {
		return fmt.Errorf("rsm: version record during a split: %w", ErrVersionMode)
	}
	for n := range m.Meganodes() {
		if err := n.T.SetVersioning(index); err != nil {
			return err
		}
	}
	m.state.Legacy = index
	m.state.Clock = max(m.state.Clock, index)
	return nil
}

// condLocked applies a cond record for key in leaf meganode lm at index:
// it reads the key's entry (and, for a value compare, its record),
// evaluates the condition and, when it holds, writes as a put or delete
// does (docs/transactions.md §3). A condition that fails changes nothing
// and answers the key's current version. REQUIRES: m.mu held.
func (m *Machine) condLocked(lm *Meganode, index uint64, key []byte, b *CondBody) (Result, error) {
	if !m.state.Versioned() {
		return Result{}, ErrNotVersioned
	}
	value, word, err := lm.T.GetWord(key, m.condBuf[:0])
	m.condBuf = value[:0]
	present := err == nil
	if err != nil && !errors.Is(err, blink.ErrNotFound) {
		return Result{}, err
	}
	if !b.holds(present, value, word.Version()) {
		return Result{CondFailed: true, Version: word.Version()}, nil
	}
	if b.Op == CondDelete {
		found, err := lm.T.Delete(key)
		return Result{Found: found}, err
	}
	v, err := m.putLocked(lm, index, key, b.Value)
	return Result{Version: v}, err
}
