package rsm

import (
	"errors"
	"fmt"
	"iter"
	"sync/atomic"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
)

// Meganode is a meganode of the region: its slot in the region file, its
// tree, and its level in the global tree (fixed for its life).
type Meganode struct {
	M     *meganode.Meganode
	T     *blink.Tree
	Level int
	// Splits is what the server's split driver keeps of the meganode,
	// beside it so that it lives and goes with it. Apply never reads or
	// writes it.
	Splits SplitRequests
}

// SplitRequests is a meganode's split requests, as the server's split
// driver keeps them.
type SplitRequests struct {
	// Queued: a split request for the meganode is queued; Force: a
	// write found it full, split whatever its fill.
	Queued, Force atomic.Bool
	// Runs counts the splits of the meganode that ran to their end or
	// failed: writes waiting for it to make room count by it.
	Runs atomic.Uint64
}

// Ptr is the meganode's header pointer.
func (n *Meganode) Ptr() blink.Ptr { return n.M.Ptr() }

// meganodeTable holds the region's meganodes by slot. It is immutable once
// published: readers load it without a lock.
type meganodeTable struct {
	bySlot []*Meganode
}

// MeganodeAt returns the meganode holding the node at p, or nil when p is
// not a node of a meganode in use in the region.
func (m *Machine) MeganodeAt(p blink.Ptr) *Meganode {
	if p.Region() != m.id {
		return nil
	}
	r := m.Region()
	slot, ok := r.SlotOf(p)
	if !ok {
		return nil
	}
	tab := m.megas.Load()
	if slot >= len(tab.bySlot) || tab.bySlot[slot] == nil {
		return nil
	}
	n := tab.bySlot[slot]
	if (p.Offset()-n.M.Base())%uint64(m.nodeSize) != 0 {
		return nil
	}
	return n
}

// Meganodes yields the region's meganodes in slot order, as the table is
// now.
func (m *Machine) Meganodes() iter.Seq[*Meganode] {
	return func(yield func(*Meganode) bool) {
		for _, n := range m.megas.Load().bySlot {
			if n != nil && !yield(n) {
				return
			}
		}
	}
}

// addMeganodeLocked publishes mn in the meganode table. REQUIRES: m.megaMu
// held.
func (m *Machine) addMeganodeLocked(mn *meganode.Meganode) error {
	h, err := mn.Tree().Header()
	if err != nil {
		return fmt.Errorf("rsm: meganode %v: %w", mn.Ptr(), err)
	}
	old := m.megas.Load()
	bySlot := make([]*Meganode, max(len(old.bySlot), mn.Slot()+1))
	copy(bySlot, old.bySlot)
	bySlot[mn.Slot()] = &Meganode{M: mn, T: mn.Tree(), Level: h.Level}
	m.megas.Store(&meganodeTable{bySlot: bySlot})
	return nil
}

// dropMeganode unpublishes the meganode of slot and frees the slot.
func (m *Machine) dropMeganode(slot int) error {
	m.megaMu.Lock()
	defer m.megaMu.Unlock()
	old := m.megas.Load()
	bySlot := append([]*Meganode(nil), old.bySlot...)
	if slot < len(bySlot) {
		bySlot[slot] = nil
	}
	m.megas.Store(&meganodeTable{bySlot: bySlot})
	return m.region.FreeMeganode(slot)
}

// newMeganodeLocked formats a meganode in the lowest free slot (apply
// chooses it, so that replicas and replays choose the same one), runs
// fill on its tree and publishes it in the meganode table. On error the
// slot is freed again. It returns the new meganode's header pointer.
func (m *Machine) newMeganodeLocked(level int, b blink.Bounds, fill func(*blink.Tree) error) (blink.Ptr, error) {
	m.megaMu.Lock()
	defer m.megaMu.Unlock()
	mn, err := m.region.NewMeganode(level, b, m.treeOptions())
	if err != nil {
		return 0, err
	}
	if m.state.Versioned() {
		err = mn.Tree().SetVersioning(m.state.Legacy)
	}
	if err == nil {
		err = fill(mn.Tree())
	}
	if err == nil {
		err = m.addMeganodeLocked(mn)
	}
	if err != nil {
		return 0, errors.Join(err, m.region.FreeMeganode(mn.Slot()))
	}
	return mn.Ptr(), nil
}

// treeOptions are the run-time options of the region's trees.
func (m *Machine) treeOptions() blink.Options {
	return blink.Options{NodeSize: m.nodeSize}
}

// frozenLocked returns a meganode in the frozen part of a split (0 when
// none): a source before its last free record, or a target before its
// commit. REQUIRES: m.mu held.
func (m *Machine) frozenLocked() blink.Ptr {
	for n := range m.Meganodes() {
		if info := n.T.Split(); info.Source || info.Target {
			return n.Ptr()
		}
	}
	return 0
}
