package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
)

// The region's raft group applies records through fsm, a raft.FSM over the
// server's apply path (apply.go). Its state is the region image plus
// replState, the replicated state that is not in the image. Both are
// changed only by apply, on raft's FSM goroutine, in log order.
//
// A snapshot is that state at one applied index: the replState encoding
// below, then the region's image (meganode.Region.WriteImage). Restore
// replaces the region with a snapshot's. The wal's snapshot store
// checksums the stream and never offers a torn one.
//
// A snapshot is refused while a meganode split is between its start and
// its last free record, here or as a remote split's target: the freeze
// and the detached nodes of a split in progress live in the trees' memory
// (blink), not in the image. raft tries again at its next snapshot
// interval; the log keeps everything until then. A split past its last
// free record (its separator not yet in the parent) is in replState.
//
// replState's encoding, little-endian:
//
//	0  magic u32 "CELS"   4 version u32 (3; 1 and 2 read too)   8 flags u32 (bit0 formatted)
//	12 split count u32    16 applied index u64   24 unpublished root Ptr u64
//	32 splits in progress, each:
//	   0 X Ptr u64   8 Y Ptr u64   16 flags u32 (bit0 linked, bit1 freed)
//	   20 split key length u32   24 split key
//	then the session table (session.go), then the region image
const (
	replMagic      = 0x534c4543 // "CELS" little-endian
	replVersion    = 3          // 1: sessions without floors and evicted filter; 2: a legacy filter
	replStateSize  = 32
	replFormatted  = 1 << 0
	splitEntrySize = 24
	maxReplSplits  = 1 << 16

	progressLinked = 1 << 0
	progressFreed  = 1 << 1
)

// replState is the replicated state of the region beside its image.
// Guarded by applyMu (written only by apply).
type replState struct {
	// Formatted: the region record was applied (apply.go).
	Formatted bool
	// Applied is the index of the last log entry applied.
	Applied uint64
	// NewRoot is a root meganode formatted and not yet published (0 when
	// none): the only meganode above the root level an abort may drop.
	NewRoot blink.Ptr
	// Splits are the meganode splits of this region's meganodes started
	// and not yet ended or aborted, in start order: what a new leader or
	// a restarted server resumes or undoes (recover.go).
	Splits []splitProgress
	// Sessions is the at-most-once table of client writes (session.go).
	Sessions sessions
}

// splitProgress is a split in progress as the log left it.
type splitProgress struct {
	X, Y   blink.Ptr // the meganode split, and its new right half (any region)
	Sep    []byte
	Linked bool // the link record applied: the split must be finished
	Freed  bool // the last free record applied: the separator is next
}

// splitOf returns the split in progress of meganode x, or nil.
func (st *replState) splitOf(x blink.Ptr) *splitProgress {
	for i := range st.Splits {
		if st.Splits[i].X == x {
			return &st.Splits[i]
		}
	}
	return nil
}

// endSplit forgets the split of x.
func (st *replState) endSplit(x blink.Ptr) {
	st.Splits = slices.DeleteFunc(st.Splits, func(p splitProgress) bool { return p.X == x })
}

// clone returns a deep copy, for readers outside apply.
func (st *replState) clone() replState {
	c := *st
	c.Sessions = st.Sessions.clone()
	c.Splits = slices.Clone(st.Splits)
	for i := range c.Splits {
		c.Splits[i].Sep = bytes.Clone(c.Splits[i].Sep)
	}
	return c
}

func (st *replState) encode() []byte {
	b := make([]byte, replStateSize, replStateSize+len(st.Splits)*(splitEntrySize+16))
	le.PutUint32(b, replMagic)
	le.PutUint32(b[4:], replVersion)
	if st.Formatted {
		le.PutUint32(b[8:], replFormatted)
	}
	le.PutUint32(b[12:], uint32(len(st.Splits)))
	le.PutUint64(b[16:], st.Applied)
	le.PutUint64(b[24:], uint64(st.NewRoot))
	for _, p := range st.Splits {
		var flags uint32
		if p.Linked {
			flags |= progressLinked
		}
		if p.Freed {
			flags |= progressFreed
		}
		b = le.AppendUint64(b, uint64(p.X))
		b = le.AppendUint64(b, uint64(p.Y))
		b = le.AppendUint32(b, flags)
		b = le.AppendUint32(b, uint32(len(p.Sep)))
		b = append(b, p.Sep...)
	}
	return st.Sessions.appendTo(b)
}

// readReplState decodes a replState from the head of a snapshot.
func readReplState(r io.Reader) (replState, error) {
	corrupt := func(what string) (replState, error) {
		return replState{}, fmt.Errorf("server: snapshot state %s: %w", what, meganode.ErrCorruption)
	}
	b := make([]byte, replStateSize)
	if _, err := io.ReadFull(r, b); err != nil {
		return corrupt(err.Error())
	}
	version := le.Uint32(b[4:])
	if le.Uint32(b) != replMagic || version < 1 || version > replVersion || le.Uint32(b[8:])&^replFormatted != 0 {
		return corrupt("header")
	}
	st := replState{Formatted: le.Uint32(b[8:])&replFormatted != 0, Applied: le.Uint64(b[16:]), NewRoot: blink.Ptr(le.Uint64(b[24:]))}
	n := le.Uint32(b[12:])
	if n > maxReplSplits {
		return corrupt(fmt.Sprintf("with %d splits", n))
	}
	for range n {
		var e [splitEntrySize]byte
		if _, err := io.ReadFull(r, e[:]); err != nil {
			return corrupt("split entry")
		}
		flags, kl := le.Uint32(e[16:]), le.Uint32(e[20:])
		if flags&^(progressLinked|progressFreed) != 0 || kl == 0 || int(kl) > blink.MaxKeySize(blink.MaxNodeSize) {
			return corrupt("split entry fields")
		}
		p := splitProgress{X: blink.Ptr(le.Uint64(e[:])), Y: blink.Ptr(le.Uint64(e[8:])), Linked: flags&progressLinked != 0, Freed: flags&progressFreed != 0,
			Sep: make([]byte, kl)}
		if _, err := io.ReadFull(r, p.Sep); err != nil {
			return corrupt("split key")
		}
		st.Splits = append(st.Splits, p)
	}
	var err error
	st.Sessions, err = readSessions(r, version)
	return st, err
}

// fsm is a replica seen as its raft group's state machine.
type fsm replica

var _ raft.FSM = (*fsm)(nil)

// applyOutcome is what FSM.Apply returns for a record, the response of
// its raft.ApplyFuture.
type applyOutcome struct {
	res applyResult
	err error
}

// Apply applies one committed record.
func (f *fsm) Apply(l *raft.Log) any {
	f.logBytes.Add(uint64(len(l.Data)))
	res, err := (*replica)(f).apply(l.Index, l.Data)
	return applyOutcome{res: res, err: err}
}

// Snapshot captures the region's state at the last applied index: raft
// calls it between two Applies, so the capture is consistent. It holds
// writes only while it encodes the replicated state and starts a
// copy-on-write capture of the region (meganode.Region.Capture); the
// image is written by Persist while the group applies on, every page as
// it was at this index (a writer saves a page before its first change).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	rep := (*replica)(f)
	rep.applyMu.Lock()
	defer rep.applyMu.Unlock()
	if p := rep.frozenLocked(); !p.IsNil() {
		return nil, fmt.Errorf("server: meganode %v is splitting; the snapshot waits for the split: %w", p, errSnapshotLater)
	}
	start := time.Now()
	c, err := rep.region.Capture()
	if err != nil {
		return nil, fmt.Errorf("server: snapshot of region %d: %w", rep.regionID, err)
	}
	snap := &regionSnapshot{rep: rep, state: rep.repl.encode(), capture: c, applied: rep.repl.Applied}
	rep.logBytes.Store(0) // raft calls Snapshot between Applies
	d := time.Since(start)
	rep.srv.metrics.snapshotPause.Observe(d.Seconds())
	rep.srv.log.Info("server: region snapshot taken", slog.Uint64("region", uint64(rep.regionID)), slog.Uint64("applied", rep.repl.Applied),
		slog.Duration("pause", d))
	if k := rep.srv.opts.TestingKnobs.OnSnapshot; k != nil {
		k(rep.region)
	}
	return snap, nil
}

// errSnapshotLater: a snapshot cannot be taken now (a split is in
// progress); raft tries again later.
var errSnapshotLater = errors.New("server: no snapshot now")

// frozenLocked returns a meganode in the frozen part of a split (0 when
// none): a source before its last free record, or a target before its
// commit. REQUIRES: rep.applyMu held.
func (rep *replica) frozenLocked() blink.Ptr {
	for _, lm := range rep.megas.Load().bySlot {
		if lm == nil {
			continue
		}
		if info := lm.t.Split(); info.Source || info.Target {
			return lm.m.Ptr()
		}
	}
	return 0
}

// Restore replaces the region with a snapshot's: the replicated state,
// then a new region file made from the image, its meganodes opened.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	rep := (*replica)(f)
	br := bufio.NewReaderSize(rc, 1<<20)
	st, err := readReplState(br)
	if err != nil {
		return err
	}
	if srv := rep.srv; srv.unserve(rep) {
		// A leader that lost its group is sent a snapshot: the region
		// it served is about to be replaced.
		srv.log.Warn("server: a region we served is restored from its new leader's snapshot; stopped serving it", slog.Uint64("region", uint64(rep.regionID)))
	}
	rep.applyMu.Lock()
	defer rep.applyMu.Unlock()
	start := time.Now()
	r, err := rep.restoreRegionLocked(br, st.Applied)
	if err != nil {
		return err
	}
	if err := rep.adoptRegionLocked(r); err != nil {
		return err
	}
	rep.repl = st
	rep.logBytes.Store(0)
	rep.targets = nil // a snapshot is never taken while a target is frozen
	rep.ended = nil
	rep.applied.Store(st.Applied)
	rep.srv.log.Info("server: region restored from a snapshot", slog.Uint64("region", uint64(rep.regionID)), slog.Uint64("applied", st.Applied),
		slog.Int("meganodes", len(r.Meganodes())), slog.Duration("took", time.Since(start)))
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
		return fmt.Errorf("server: snapshot of region %d at applied index %d holds an image at index %d: %w", r.ID(), applied, got, meganode.ErrCorruption)
	}
	return nil
}

// restoreRegionLocked makes the region anew from an image at log index
// applied (checkImageIndex): restored under
// a temporary name first, so that a torn or corrupt image leaves the
// region as it was, then put in the region's place.
//
// A region nothing was applied to yet (a restart's, a new follower's) has
// nothing to keep: it is dropped before the image is read, so that the
// two never hold memory together (with Options.Prefault, or on
// hugetlbfs, whose pages are reserved when a region is mapped, each holds
// its whole size). If the image then fails, an empty region of the same
// layout takes its place again. REQUIRES: rep.applyMu held.
func (rep *replica) restoreRegionLocked(img io.Reader, applied uint64) (_ *meganode.Region, err error) {
	final := rep.srv.dir.regionFileName(rep.regionID)
	opts := rep.regionOptions(rep.regionID, regionBody{}) // sizes from the image
	opts.Name = final + ".restoring"
	if err := rep.srv.removeRegionFileNamed(opts.Name); err != nil {
		return nil, err
	}
	pristine := rep.pristineLocked()
	if pristine {
		empty := rep.regionOptions(rep.regionID, layoutBody(rep.region.Layout()))
		if err := rep.dropRegionLocked(); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				rep.remakeEmptyLocked(empty)
			}
		}()
	}
	if k := rep.srv.opts.TestingKnobs.BeforeRestoreImage; k != nil {
		k(rep.regionID)
	}
	r, rerr := meganode.RestoreImage(opts, img)
	if rerr != nil {
		return nil, fmt.Errorf("server: restore region %d: %w", rep.regionID, rerr)
	}
	if err := checkImageIndex(r, applied); err != nil {
		_ = r.Close()
		_ = r.Remove()
		return nil, err
	}
	tmp := r.Path()
	if err := r.Close(); err != nil {
		_ = r.Remove()
		return nil, fmt.Errorf("server: restore region %d: %w", rep.regionID, err)
	}
	if !pristine {
		if err := rep.dropRegionLocked(); err != nil {
			_ = os.Remove(tmp)
			return nil, err
		}
	}
	path := filepath.Join(filepath.Dir(tmp), final)
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("server: restore region %d: %w", rep.regionID, err)
	}
	r, err = meganode.Open(path, meganode.OpenOptions{Logger: rep.srv.log})
	if err != nil {
		return nil, fmt.Errorf("server: open restored region %d: %w", rep.regionID, err)
	}
	return r, nil
}

// pristineLocked reports whether nothing was ever applied to the region
// nor served from it: it is as the replica made it, empty. REQUIRES:
// rep.applyMu held.
func (rep *replica) pristineLocked() bool {
	return rep.applied.Load() == 0 && !rep.wasServed.Load() && len(rep.region.Meganodes()) == 0
}

// remakeEmptyLocked puts an empty region of the given options in the
// place of a pristine one dropped for an image that then failed, so that
// the replica is whole for raft to try again. Failing that, the replica
// keeps the closed region (whose uses fail with meganode.ErrClosed) and
// the failure is logged. REQUIRES: rep.applyMu held.
func (rep *replica) remakeEmptyLocked(opts meganode.Options) {
	// A restored image renamed into place but not opened.
	if err := rep.srv.removeRegionFileNamed(opts.Name); err != nil {
		rep.srv.log.Error("server: could not remove a region file after a failed restore", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		return
	}
	r, err := meganode.Create(opts)
	if err != nil {
		rep.srv.log.Error("server: could not make region's empty file again after a failed restore", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		return
	}
	rep.setRegion(r)
}

// regionSnapshot is a snapshot taken by Snapshot: the replicated state's
// encoding and the capture of the region's image, written out by Persist
// while the group applies on.
type regionSnapshot struct {
	rep     *replica
	state   []byte
	capture *meganode.Capture
	applied uint64
}

func (r *regionSnapshot) Persist(sink raft.SnapshotSink) error {
	rep := r.rep
	start := time.Now()
	if _, err := sink.Write(r.state); err != nil {
		_ = sink.Cancel()
		return err
	}
	st, err := r.capture.WriteImage(sink)
	saved, savedBytes := r.capture.Saved()
	r.capture.Close()
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("server: snapshot of region %d: %w", rep.regionID, err)
	}
	size := uint64(len(r.state)) + st.Bytes
	rep.srv.metrics.snapshotBytes.Set(float64(size))
	rep.srv.metrics.snapshotSaved.Set(float64(savedBytes))
	rep.srv.log.Info("server: region snapshot written", slog.Uint64("region", uint64(rep.regionID)), slog.Uint64("applied", r.applied),
		slog.Uint64("bytes", size), slog.Uint64("pages", st.Pages), slog.Uint64("saved_pages", saved), slog.Uint64("saved_bytes", savedBytes), slog.Duration("took", time.Since(start)))
	return sink.Close()
}

func (r *regionSnapshot) Release() { r.capture.Close() }
