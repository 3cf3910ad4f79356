package rsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"

	"github.com/cellstore/cell/blink"
)

// applyTargetLocked applies one target record r with body b.
// REQUIRES: m.mu held.
func (m *Machine) applyTargetLocked(r *Record, b *TargetBody) (Result, error) {
	if b.Phase == TargetBegin {
		return m.beginTargetLocked(r, b)
	}
	y := m.MeganodeAt(r.Meganode)
	isTarget := y != nil && y.Ptr() == r.Meganode && y.T.Split().Target
	switch {
	case !isTarget && m.endedTarget(r.Meganode, b.Phase == TargetCommit):
		// Ended that way already: a retried end whose first reply was
		// lost changes nothing and succeeds.
		return Result{}, nil
	case !isTarget:
		return Result{}, fmt.Errorf("rsm: target %v record for %v, not a split target of region %d: %w", b.Phase, r.Meganode, m.id, ErrBadRecord)
	}
	switch b.Phase {
	case TargetAppend:
		inner, words, ents, err := DecodeEntries(b.Payload)
		if err != nil {
			return Result{}, err
		}
		if inner != (y.Level > 0) {
			return Result{}, fmt.Errorf("rsm: target append of inner=%v entries into a level %d meganode: %w", inner, y.Level, ErrBadRecord)
		}
		if !inner && words != m.state.Versioned() {
			// Keys move only between regions of one mode
			// (docs/transactions.md §2.6): a versioned region could not
			// give legacy entries versions, a legacy one could not keep
			// theirs.
			return Result{}, fmt.Errorf("rsm: target append with words=%v into a region with versioned=%v: %w", words, m.state.Versioned(), ErrVersionMode)
		}
		if err := y.T.AppendEntries(ents); err != nil {
			return Result{}, err
		}
		if ts := m.targets[y.Ptr()]; ts != nil {
			ts.appended = true
		}
		return Result{Root: y.T.Root()}, nil
	case TargetCommit:
		if len(b.Payload) > 0 {
			m.state.Sessions.merge(b.Payload, m.state.Applied)
		}
		if m.state.Versioned() {
			// The next write of a moved key gets a version above the
			// one it came with (docs/transactions.md §2.3).
			m.state.Clock = max(m.state.Clock, b.Clock)
		}
		delete(m.targets, y.Ptr())
		m.noteEnded(y.Ptr(), true)
		return Result{}, y.T.Thaw()
	case TargetAbort:
		m.noteEnded(y.Ptr(), false)
		return Result{}, m.dropTargetLocked(y)
	}
	return Result{}, fmt.Errorf("rsm: target phase %v: %w", b.Phase, ErrBadRecord)
}

// targetState is a remote split's target in this region, from its begin
// record to its commit or abort: the split it belongs to (the source
// meganode and the split key), and whether entries were appended to it.
// Kept by apply alone (m.targets, guarded by Machine.mu) and rebuilt by
// replaying the log: no snapshot is taken while a target is frozen
// (state.go), so every replica knows the same targets.
type targetState struct {
	source   blink.Ptr
	key      []byte
	appended bool
}

// beginTargetLocked applies a target begin record. A begin that repeats
// one whose target is still frozen and empty (the source retried after a
// lost reply) answers that target instead of making a second one, so a
// timed-out SplitBegin leaves no orphan; a frozen target of the same
// split that already received entries (the source started the split
// over) is dropped first. REQUIRES: m.mu held.
func (m *Machine) beginTargetLocked(r *Record, b *TargetBody) (Result, error) {
	if !r.Meganode.IsNil() {
		return Result{}, fmt.Errorf("rsm: target begin record names %v: apply chooses the meganode: %w", r.Meganode, ErrBadRecord)
	}
	for _, yp := range slices.Sorted(maps.Keys(m.targets)) {
		ts := m.targets[yp]
		if ts.source != b.Source || !bytes.Equal(ts.key, r.Key) {
			continue
		}
		y := m.MeganodeAt(yp)
		if y == nil || y.Ptr() != yp || !y.T.Split().Target {
			delete(m.targets, yp)
			continue
		}
		if !ts.appended && y.Level == int(b.Level) {
			return Result{New: yp}, nil
		}
		if err := m.dropTargetLocked(y); err != nil {
			return Result{}, err
		}
	}
	bounds := blink.Bounds{Min: r.Key, Max: b.Payload, MaxInf: b.MaxInf}
	yp, err := m.newMeganodeLocked(int(b.Level), bounds, func(y *blink.Tree) error {
		return y.BeginCopy(b.Right)
	})
	if err == nil {
		if m.targets == nil {
			m.targets = make(map[blink.Ptr]*targetState)
		}
		m.targets[yp] = &targetState{source: b.Source, key: bytes.Clone(r.Key)}
	}
	return Result{New: yp}, err
}

// endedTargets bounds the targets whose end a replica remembers, for
// retried ends.
const endedTargets = 64

// endedTarget is a target's end: committed, or aborted.
type endedTarget struct {
	ptr    blink.Ptr
	commit bool
}

// noteEnded remembers that target p ended (committed or aborted), the last
// endedTargets of them, in log order. Snapshots do not carry them: a
// replica restored from one answers a retried end BadRequest where the
// others answer OK, and neither changes anything, so the regions stay
// identical. REQUIRES: m.mu held.
func (m *Machine) noteEnded(p blink.Ptr, commit bool) {
	m.ended = append(m.ended, endedTarget{p, commit})
	if len(m.ended) > endedTargets {
		m.ended = slices.Delete(m.ended, 0, 1)
	}
}

// endedTarget reports whether target p's last end was commit's kind (a
// commit, or an abort): a retried end. REQUIRES: m.mu held.
func (m *Machine) endedTarget(p blink.Ptr, commit bool) bool {
	for i := len(m.ended) - 1; i >= 0; i-- {
		if m.ended[i].ptr == p {
			return m.ended[i].commit == commit
		}
	}
	return false
}

// dropTargetLocked drops frozen target y: its records (copies of the
// source's) and its meganode. REQUIRES: m.mu held.
func (m *Machine) dropTargetLocked(y *Meganode) error {
	delete(m.targets, y.Ptr())
	if err := y.T.DropRecords(); err != nil {
		return err
	}
	return m.dropMeganode(y.M.Slot())
}
