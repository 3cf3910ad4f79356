package rsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cellstore/cell/meganode"
)

// A snapshot is the machine's state at one applied index: the State's
// encoding (state.go), then the region's image (meganode.Region's image
// format). Snapshot takes one; Restore replaces the machine's state and
// region with one.
//
// A snapshot is refused (ErrSnapshotLater) while a meganode split is
// between its start and its last free record, here or as a remote
// split's target: the freeze and the detached nodes of a split in
// progress live in the trees' memory (blink), not in the image. A split
// past its last free record (its separator not yet in the parent) is in
// State.

// Snapshot is the machine's state at one applied index, its region
// captured copy-on-write: the machine applies on while it is written.
type Snapshot struct {
	state   []byte
	capture *meganode.Capture
	applied uint64
	// Pause is how long the capture held the apply lock.
	Pause time.Duration
}

// Applied is the index the snapshot is at.
func (s *Snapshot) Applied() uint64 { return s.applied }

// Snapshot captures the machine's state at the last applied index. It
// holds writes only while it encodes the State and starts the capture of
// the region (meganode.Region.Capture); the image is written by WriteTo
// while the machine applies on, every page as it was at this index.
func (m *Machine) Snapshot() (*Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.frozenLocked(); !p.IsNil() {
		return nil, fmt.Errorf("rsm: meganode %v is splitting; the snapshot waits for the split: %w", p, ErrSnapshotLater)
	}
	start := time.Now()
	c, err := m.region.Capture()
	if err != nil {
		return nil, fmt.Errorf("rsm: snapshot of region %d: %w", m.id, err)
	}
	s := &Snapshot{state: m.state.encode(), capture: c, applied: m.state.Applied, Pause: time.Since(start)}
	if m.onSnapshot != nil {
		m.onSnapshot(m.region)
	}
	return s, nil
}

// SnapshotStats is what writing a snapshot took.
type SnapshotStats struct {
	Bytes      uint64 // the snapshot's size
	Pages      uint64 // the image's pages written
	SavedPages uint64 // pages the machine's writes saved for the capture
	SavedBytes uint64
}

// Write writes the snapshot to w and releases it.
func (s *Snapshot) Write(w io.Writer) (SnapshotStats, error) {
	defer s.capture.Close()
	if _, err := w.Write(s.state); err != nil {
		return SnapshotStats{}, err
	}
	st, err := s.capture.WriteImage(w)
	saved, savedBytes := s.capture.Saved()
	if err != nil {
		return SnapshotStats{}, err
	}
	return SnapshotStats{Bytes: uint64(len(s.state)) + st.Bytes, Pages: st.Pages, SavedPages: saved, SavedBytes: savedBytes}, nil
}

// Release releases a snapshot that will not be written.
func (s *Snapshot) Release() { s.capture.Close() }

// Restore replaces the machine's state and region with a snapshot's:
// the State, then a new region file made from the image, its meganodes
// opened. A torn or corrupt image leaves the machine as it was (or, for a
// region nothing was applied to, empty as before).
func (m *Machine) Restore(r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	st, err := ReadState(br)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	reg, err := m.restoreRegionLocked(br, st.Applied)
	if err != nil {
		return err
	}
	if err := m.adoptLocked(reg); err != nil {
		return err
	}
	m.state = st
	m.targets = nil // a snapshot is never taken while a target is frozen
	m.ended = nil
	m.applied.Store(st.Applied)
	m.log.Info("rsm: region restored from a snapshot", slog.Uint64("region", uint64(m.id)), slog.Uint64("applied", st.Applied),
		slog.Int("meganodes", len(reg.Meganodes())), slog.Duration("took", time.Since(start)))
	return nil
}

// checkImageIndex checks that a restored region is at the snapshot's
// applied index: the region records the index of the last record applied
// to it, and the snapshot's head the same, written together. A region
// from an image older than the index in the region (version 1, index 0)
// is given the snapshot's.
func checkImageIndex(r *meganode.Region, applied uint64) error {
	switch got := r.Applied(); {
	case got == 0:
		r.SetApplied(applied)
	case got != applied:
		return fmt.Errorf("rsm: snapshot of region %d at applied index %d holds an image at index %d: %w", r.ID(), applied, got, meganode.ErrCorruption)
	}
	return nil
}

// restoreRegionLocked makes the region anew from an image at log index
// applied (checkImageIndex): read into a file apart first
// (Files.ReadImage), so that a torn or corrupt image leaves the region as
// it was, then put in the region's place (Files.Install).
//
// A region nothing was applied to yet (a restart's, a new follower's) has
// nothing to keep: it is discarded before the image is read, so that the
// two never hold memory together (a prefaulted region, or one on
// hugetlbfs, whose pages are reserved when it is mapped, holds its whole
// size). If the image then fails, an empty region of the same layout
// takes its place again. REQUIRES: m.mu held.
func (m *Machine) restoreRegionLocked(img io.Reader, applied uint64) (_ *meganode.Region, err error) {
	pristine := m.pristineLocked()
	if pristine {
		empty := LayoutOf(m.region)
		if err := m.discardLocked(); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				m.remakeEmptyLocked(empty)
			}
		}()
	}
	r, err := m.files.ReadImage(m.id, img)
	if err != nil {
		return nil, fmt.Errorf("rsm: restore region %d: %w", m.id, err)
	}
	if err := checkImageIndex(r, applied); err != nil {
		return nil, errors.Join(err, r.Close(), r.Remove())
	}
	if !pristine {
		if err := m.discardLocked(); err != nil {
			return nil, errors.Join(err, r.Close(), r.Remove())
		}
	}
	r, err = m.files.Install(m.id, r)
	if err != nil {
		return nil, fmt.Errorf("rsm: restore region %d: %w", m.id, err)
	}
	return r, nil
}

// pristineLocked reports whether nothing was ever applied to the region:
// it is as its replica made it, empty. REQUIRES: m.mu held.
func (m *Machine) pristineLocked() bool {
	return m.applied.Load() == 0 && len(m.region.Meganodes()) == 0
}

// remakeEmptyLocked puts an empty region of layout l in the place of a
// pristine one discarded for an image that then failed, so that the
// machine is whole for raft to try again. Failing that, the machine keeps
// the closed region (whose uses fail with meganode.ErrClosed) and the
// failure is logged. REQUIRES: m.mu held.
func (m *Machine) remakeEmptyLocked(l Layout) {
	r, err := m.files.Create(m.id, l)
	if err != nil {
		m.log.Error("rsm: could not make the region's empty file again after a failed restore", slog.Uint64("region", uint64(m.id)), slog.Any("err", err))
		return
	}
	if err := m.adoptLocked(r); err != nil {
		m.log.Error("rsm: could not open the region's empty file after a failed restore", slog.Uint64("region", uint64(m.id)), slog.Any("err", err))
	}
}
