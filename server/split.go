package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
)

// Local meganode splits (paper §2.2, DESIGN §4; the protocol is drawn in
// doc.go, "Meganode splits"). One goroutine, splitLoop, runs the server's
// splits one at a time; writes trigger them (requestSplit) and wait for
// them when they meet a frozen range or a full meganode (worker.write).
// Every step is a split record through apply, so the log holds the split.

// Failpoints evaluated by the split after each of its steps. A hook may
// block to pause the split there. An error from a hook before the link
// aborts the split; after the link it is logged and ignored (the split
// must finish).
const (
	FailpointSplitChose       = "server/split/chose"       // split key chosen, nothing changed yet
	FailpointSplitFroze       = "server/split/froze"       // X frozen at sep, Y formatted (empty)
	FailpointSplitCopied      = "server/split/copied"      // X's right half copied into Y
	FailpointSplitLinked      = "server/split/linked"      // X's boundary links to Y's root
	FailpointSplitInvalidated = "server/split/invalidated" // X's old right half freed, X and Y thawed
	FailpointSplitParent      = "server/split/parent"      // separator in the parent (or new root published)
)

// splitSignal wakes the writes waiting for a split: a write reads the
// generation before it applies, and after ErrFrozen or ErrNeedsSplit waits
// for the channel of that generation, which the next broadcast closes.
type splitSignal struct {
	gen atomic.Uint64
	mu  sync.Mutex
	ch  chan struct{}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (g *splitSignal) generation() uint64 { return g.gen.Load() }

// after returns a channel closed by the first broadcast after generation
// gen (at once if there was one).
func (g *splitSignal) after(gen uint64) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gen.Load() != gen {
		return closedChan
	}
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

func (g *splitSignal) broadcast() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen.Add(1)
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

// requestSplit asks the split loop to split lm: when its fill reaches
// Options.SplitFill, or in any case with force (a write met ErrNeedsSplit).
// It never blocks; a meganode already queued is not queued twice.
func (s *Server) requestSplit(lm *localMeganode, force bool) {
	if s.opts.DisableSplits {
		return
	}
	if force {
		lm.splitForce.Store(true)
	}
	if !lm.splitQueued.CompareAndSwap(false, true) {
		return
	}
	select {
	case s.splitReqs <- lm.m.Ptr():
	default:
		lm.splitQueued.Store(false) // full: a later write asks again
	}
}

// maybeRequestSplit requests a split of lm once its fill reached the
// threshold; a cheap lock-free check for the write path.
func (s *Server) maybeRequestSplit(lm *localMeganode) {
	if !s.opts.DisableSplits && lm.t.Fill() >= s.opts.SplitFill {
		s.requestSplit(lm, false)
	}
}

// splitLoop runs the requested splits until the server stops. A split in
// progress when Close begins is finished first: it only needs the region.
func (s *Server) splitLoop() {
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case p := <-s.splitReqs:
			s.serveSplit(p)
		}
	}
}

func (s *Server) serveSplit(p blink.Ptr) {
	lm := s.meganodeAt(p)
	if lm == nil || lm.m.Ptr() != p {
		return
	}
	lm.splitQueued.Store(false)
	// A write that found the meganode full forces a split, unless a split
	// made room since.
	force := lm.splitForce.Swap(false) && lm.t.NeedsSplit()
	if !force && lm.t.Fill() < s.opts.SplitFill {
		return
	}
	s.runSplit(lm)
}

// runSplit splits lm now, wakes the writes waiting for it, and requests
// further splits of the two halves if they are still above the fill
// threshold (an unbalanced split). It reports whether the split was done.
func (s *Server) runSplit(lm *localMeganode) bool {
	s.splitMu.Lock()
	y, err := s.splitLocked(lm, 0)
	s.splitMu.Unlock()
	s.splitEvent()
	if err != nil {
		s.log.Warn("server: meganode split failed", slog.String("meganode", lm.m.Ptr().String()), slog.Any("err", err))
		return false
	}
	s.maybeRequestSplit(lm)
	s.maybeRequestSplit(y)
	return true
}

// failpointAfterLink evaluates a failpoint past a split's point of no
// return: an error is logged and the split goes on.
func (s *Server) failpointAfterLink(name string) {
	if err := failpoint.Eval(name); err != nil {
		s.log.Warn("server: failpoint after a split's link ignored", slog.String("failpoint", name), slog.Any("err", err))
	}
}

// splitLocked splits meganode x into x and a new meganode y of this region
// and inserts the separator above (splitting the parent first if it is
// full, depth counting those nested splits). REQUIRES: s.splitMu held.
func (s *Server) splitLocked(x *localMeganode, depth int) (y *localMeganode, err error) {
	if depth > maxHops {
		return nil, fmt.Errorf("server: %d nested meganode splits: %w", depth, blink.ErrCorruption)
	}
	start := time.Now()
	sep, err := x.t.SplitKey()
	if err != nil {
		return nil, fmt.Errorf("server: split %v: %w", x.m.Ptr(), err)
	}
	if err := failpoint.Eval(FailpointSplitChose); err != nil {
		return nil, err
	}
	yp, err := s.nextMeganodePtr()
	if err != nil {
		return nil, err
	}
	if _, err := s.applySplit(x, sep, splitBody{Phase: phaseStart, New: yp}); err != nil {
		return nil, err
	}
	before := x.t.Usage()
	s.log.Info("server: meganode split started", slog.String("meganode", x.m.Ptr().String()), slog.Int("level", x.level),
		slog.String("sep", fmt.Sprintf("%q", sep)), slog.String("new", yp.String()), slog.Float64("fill", before.Fill()))
	linked := false
	defer func() {
		if err == nil || linked {
			return
		}
		if _, aerr := s.applySplit(x, sep, splitBody{Phase: phaseAbort, New: yp}); aerr != nil {
			s.log.Error("server: abort of a meganode split failed", slog.String("meganode", x.m.Ptr().String()), slog.Any("err", aerr))
		}
		s.metrics.splits.WithLabelValues("aborted").Inc()
	}()
	if err := failpoint.Eval(FailpointSplitFroze); err != nil {
		return nil, err
	}
	for cursor := sep; cursor != nil; {
		res, err := s.applySplit(x, sep, splitBody{Phase: phaseCopy, New: yp, Batch: uint32(s.opts.SplitCopyBatch), Cursor: cursor})
		if err != nil {
			return nil, err
		}
		cursor = res.Next
		runtime.Gosched() // writes to the left half go on between batches
	}
	if err := failpoint.Eval(FailpointSplitCopied); err != nil {
		return nil, err
	}
	if _, err := s.applySplit(x, sep, splitBody{Phase: phaseLink, New: yp}); err != nil {
		return nil, err
	}
	linked = true
	y = s.meganodeAt(yp)
	defer func() {
		if err != nil {
			s.metrics.splits.WithLabelValues("failed").Inc()
		}
	}()
	s.failpointAfterLink(FailpointSplitLinked)
	for {
		res, err := s.applySplit(x, sep, splitBody{Phase: phaseFree, New: yp, Batch: uint32(s.opts.SplitFreeBatch)})
		if err != nil {
			return y, err
		}
		if res.Done {
			break
		}
		runtime.Gosched()
	}
	s.splitEvent() // writes to [sep, X.max) go on, in Y
	s.failpointAfterLink(FailpointSplitInvalidated)
	if err := s.insertSeparatorLocked(x, sep, y, depth); err != nil {
		return y, err
	}
	s.failpointAfterLink(FailpointSplitParent)
	if _, err := s.applySplit(x, sep, splitBody{Phase: phaseEnd, New: yp}); err != nil {
		return y, err
	}
	d := time.Since(start)
	s.metrics.splits.WithLabelValues("done").Inc()
	s.metrics.splitTime.Observe(d.Seconds())
	s.log.Info("server: meganode split done", slog.String("meganode", x.m.Ptr().String()), slog.String("new", yp.String()),
		slog.String("sep", fmt.Sprintf("%q", sep)), slog.Int("nodes_before", before.Nodes),
		slog.Int("nodes_left", x.t.Usage().Nodes), slog.Int("nodes_right", y.t.Usage().Nodes), slog.Duration("took", d))
	return y, nil
}

// applySplit applies one split record for meganode x.
func (s *Server) applySplit(x *localMeganode, sep []byte, b splitBody) (applyResult, error) {
	rec := appendRecord(nil, &writeRecord{Kind: recSplit, Meganode: x.m.Ptr(), Key: sep, Value: appendSplitBody(nil, &b)})
	res, err := s.apply(rec)
	if err != nil {
		return res, fmt.Errorf("server: split %v at %q, %v step: %w", x.m.Ptr(), sep, b.Phase, err)
	}
	return res, nil
}

// nextMeganodePtr returns the header pointer of the meganode the next
// NewMeganode will format: the lowest free slot (meganode.Region's rule).
// Split records name it, and apply checks it got that one.
func (s *Server) nextMeganodePtr() (blink.Ptr, error) {
	slot := 0
	for _, used := range s.region.Meganodes() {
		if used != slot {
			break
		}
		slot++
	}
	lay := s.region.Layout()
	if uint64(slot) >= lay.Slots {
		return 0, fmt.Errorf("server: split needs a meganode: region %d: %w", s.regionID, meganode.ErrRegionFull)
	}
	return blink.MakePtr(s.regionID, lay.SlotBase(slot)), nil
}

// insertSeparatorLocked makes y known above x: the separator goes into the
// parent meganode as a decoupled insert (the parent is split first when it
// is full), or, when x's level is the root's, a new root meganode is made
// over that level and published. Until then readers reach y through x's
// right links. REQUIRES: s.splitMu held.
func (s *Server) insertSeparatorLocked(x *localMeganode, sep []byte, y *localMeganode, depth int) error {
	child := le.AppendUint64(nil, uint64(y.m.Ptr()))
	for attempt := 0; attempt < 8; attempt++ {
		root := s.meganodeAt(blink.Ptr(s.root.Load()))
		switch {
		case root == nil:
			return fmt.Errorf("server: the root meganode %v is not on this server (remote splits come later)", blink.Ptr(s.root.Load()))
		case root.level == x.level:
			err := s.growRootLocked(root, sep)
			if errors.Is(err, regiontable.ErrConflict) {
				continue // the table had a newer root, now ours: look again
			}
			return err
		case root.level < x.level:
			return fmt.Errorf("server: root meganode at level %d below meganode %v at %d: %w", root.level, x.m.Ptr(), x.level, blink.ErrCorruption)
		}
		p, err := s.parentOf(root, sep, x.level+1)
		if err != nil {
			return err
		}
		_, err = s.apply(appendRecord(nil, &writeRecord{Kind: recChild, Meganode: p.m.Ptr(), Key: sep, Value: child}))
		switch {
		case err == nil:
			s.maybeRequestSplit(p)
			return nil
		case errors.Is(err, blink.ErrNeedsSplit):
			if _, err := s.splitLocked(p, depth+1); err != nil {
				return fmt.Errorf("server: split parent %v: %w", p.m.Ptr(), err)
			}
			s.splitEvent()
		case errors.Is(err, blink.ErrKeyOutOfRange), errors.Is(err, blink.ErrFrozen):
			// The parent moved under us: search again.
		default:
			return fmt.Errorf("server: insert separator %q into %v: %w", sep, p.m.Ptr(), err)
		}
	}
	return fmt.Errorf("server: separator %q found no parent: %w", sep, blink.ErrRestart)
}

// parentOf finds, from the root meganode down, the meganode at level that
// covers key (following right links along that level).
func (s *Server) parentOf(root *localMeganode, key []byte, level int) (*localMeganode, error) {
	lm := root
	for range maxHops {
		if lm.level < level {
			return nil, fmt.Errorf("server: search for level %d reached meganode %v at level %d: %w", level, lm.m.Ptr(), lm.level, blink.ErrCorruption)
		}
		res, err := lm.t.Search(key)
		if err != nil {
			return nil, err
		}
		next := res.Next
		if next.IsNil() {
			if lm.level == level {
				return lm, nil
			}
			next = res.Child
		}
		nl := s.meganodeAt(next)
		if nl == nil {
			return nil, fmt.Errorf("server: meganode %v on the path to level %d is not on this server (remote splits come later)", next, level)
		}
		lm = nl
	}
	return nil, fmt.Errorf("server: search for level %d crossed %d meganodes: %w", level, maxHops, blink.ErrCorruption)
}

// growRootLocked makes a new root meganode one level above root, with an
// entry for every meganode of root's level (root and those its right links
// reach), and publishes it: the region table's root first (compare-and-set
// from root), then the server's and offset 0 of the region. Readers that
// still start at the old root reach everything through right links. On
// failure the unpublished meganode is dropped. REQUIRES: s.splitMu held.
func (s *Server) growRootLocked(root *localMeganode, sep []byte) error {
	np, err := s.nextMeganodePtr()
	if err != nil {
		return err
	}
	if _, err := s.applySplit(root, sep, splitBody{Phase: phaseRoot, New: np}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cur, err := s.opts.Store.SetRoot(ctx, root.m.Ptr(), np); err != nil {
		if _, aerr := s.applySplit(root, sep, splitBody{Phase: phaseAbort, New: np}); aerr != nil {
			s.log.Error("server: drop the unpublished root meganode", slog.String("meganode", np.String()), slog.Any("err", aerr))
		}
		if errors.Is(err, regiontable.ErrConflict) && !cur.IsNil() {
			// Our root was stale (the table's follower had not caught
			// up): adopt the table's, the caller looks again.
			s.learnRoot(cur)
		}
		return fmt.Errorf("server: publish the new root meganode %v: %w", np, err)
	}
	s.root.Store(uint64(np))
	s.region.SetRoot(np)
	s.log.Info("server: new root meganode", slog.String("root", np.String()), slog.String("old_root", root.m.Ptr().String()), slog.Int("level", root.level+1))
	return nil
}

// ---- Applying split records (apply.go). REQUIRES: s.applyMu held. ----

// applySplitLocked applies one split record r with body b.
func (s *Server) applySplitLocked(r *writeRecord, b *splitBody) (applyResult, error) {
	x := s.meganodeAt(r.Meganode)
	if x == nil || x.m.Ptr() != r.Meganode {
		return applyResult{}, fmt.Errorf("server: split record for %v, not a meganode of region %d: %w", r.Meganode, s.regionID, ErrBadRecord)
	}
	switch b.Phase {
	case phaseStart:
		return applyResult{}, s.startSplitLocked(x, r.Key, b.New)
	case phaseRoot:
		if blink.Ptr(s.root.Load()) != x.m.Ptr() {
			return applyResult{}, fmt.Errorf("server: root record for %v, which is not the root: %w", x.m.Ptr(), ErrBadRecord)
		}
		return applyResult{}, s.makeRootLocked(x, b.New)
	case phaseAbort:
		return applyResult{}, s.abortSplitLocked(x, b.New)
	}
	y := s.meganodeAt(b.New)
	if y == nil || y.m.Ptr() != b.New || y.level != x.level {
		return applyResult{}, fmt.Errorf("server: %v record names %v, not a meganode at level %d: %w", b.Phase, b.New, x.level, ErrBadRecord)
	}
	info := x.t.Split()
	if b.Phase != phaseEnd && (!info.Source || !bytes.Equal(info.Sep, r.Key)) {
		return applyResult{}, fmt.Errorf("server: %v record for %v at %q, which is not splitting there: %w", b.Phase, x.m.Ptr(), r.Key, ErrBadRecord)
	}
	switch b.Phase {
	case phaseCopy:
		next, err := blink.CopyRight(x.t, y.t, b.Cursor, int(b.Batch))
		return applyResult{Next: next}, err
	case phaseLink:
		return applyResult{}, x.t.LinkRight(y.t.Root())
	case phaseFree:
		done, err := x.t.FreeRight(int(b.Batch))
		if err == nil && done {
			err = errors.Join(x.t.Thaw(), y.t.Thaw())
		}
		return applyResult{Done: done}, err
	case phaseEnd:
		if info.Source || y.t.Split().Target {
			return applyResult{}, fmt.Errorf("server: end of the split of %v before its right half was freed: %w", x.m.Ptr(), ErrBadRecord)
		}
		return applyResult{}, nil
	}
	return applyResult{}, fmt.Errorf("server: split phase %v: %w", b.Phase, ErrBadRecord)
}

// startSplitLocked freezes x at sep and formats y, the right half's
// meganode, in the slot the record names.
func (s *Server) startSplitLocked(x *localMeganode, sep []byte, yp blink.Ptr) error {
	if err := x.t.Freeze(sep); err != nil {
		return err
	}
	h, err := x.t.Header()
	if err == nil {
		err = s.newMeganodeLocked(yp, x.level, blink.Bounds{Min: sep, Max: h.Bounds.Max, MaxInf: h.Bounds.MaxInf}, func(y *blink.Tree) error {
			return y.BeginCopy(x.t.Right())
		})
	}
	if err != nil {
		return errors.Join(err, x.t.Thaw())
	}
	return nil
}

// makeRootLocked formats the new root meganode np one level above root,
// with an entry for each meganode of root's level, left to right. The
// entry of a meganode whose min is -inf has the smallest key, "\x00"
// (leaf entries have non-empty keys; no key is below it).
func (s *Server) makeRootLocked(root *localMeganode, np blink.Ptr) error {
	var level []*localMeganode
	for lm := root; ; {
		level = append(level, lm)
		next := lm.t.Right()
		if next.IsNil() {
			break
		}
		if lm = s.meganodeAt(next); lm == nil {
			return fmt.Errorf("server: meganode of the root's level at %v is not on this server (remote splits come later)", next)
		}
		if len(level) > maxHops {
			return fmt.Errorf("server: the root's level has over %d meganodes: %w", maxHops, blink.ErrCorruption)
		}
	}
	return s.newMeganodeLocked(np, root.level+1, blink.Full, func(n *blink.Tree) error {
		for _, lm := range level {
			h, err := lm.t.Header()
			if err != nil {
				return err
			}
			key := h.Bounds.Min
			if h.Bounds.MinInf {
				key = []byte{0}
			}
			if err := n.InsertChild(key, lm.m.Ptr()); err != nil {
				return err
			}
		}
		return nil
	})
}

// newMeganodeLocked formats a meganode in the slot of p (the lowest free
// one, as the record's writer predicted), runs fill on its tree and
// publishes it in the meganode table. On error the slot is freed again.
func (s *Server) newMeganodeLocked(p blink.Ptr, level int, b blink.Bounds, fill func(*blink.Tree) error) error {
	s.megaMu.Lock()
	defer s.megaMu.Unlock()
	m, err := s.region.NewMeganode(level, b, s.treeOptions())
	if err != nil {
		return err
	}
	if m.Ptr() != p {
		err = fmt.Errorf("server: new meganode is %v, the record says %v: %w", m.Ptr(), p, ErrBadRecord)
	} else {
		err = fill(m.Tree())
	}
	if err == nil {
		err = s.addMeganodeLocked(m)
	}
	if err != nil {
		return errors.Join(err, s.region.FreeMeganode(m.Slot()))
	}
	return nil
}

// abortSplitLocked undoes a split of x before its link: x is thawed and
// the unreachable new meganode np (the right half's, or an unpublished
// root) is dropped. The records np's entries share stay x's.
func (s *Server) abortSplitLocked(x *localMeganode, np blink.Ptr) error {
	info := x.t.Split()
	if info.Linked {
		return fmt.Errorf("server: abort of the split of %v after its link: %w", x.m.Ptr(), ErrBadRecord)
	}
	n := s.meganodeAt(np)
	if n != nil && n.m.Ptr() != np {
		n = nil
	}
	// Only a meganode nobody can reach may go: the target of x's split,
	// or one level above x while x is the root (an unpublished root).
	target := n != nil && info.Source && n.level == x.level && n.t.Split().Target
	rootCandidate := n != nil && n.level == x.level+1 && blink.Ptr(s.root.Load()) == x.m.Ptr()
	if n != nil && !target && !rootCandidate {
		return fmt.Errorf("server: abort record for %v would drop %v, which may be reachable: %w", x.m.Ptr(), np, ErrBadRecord)
	}
	var errs []error
	if info.Source {
		errs = append(errs, x.t.Thaw())
	}
	if n != nil {
		s.megaMu.Lock()
		s.removeMeganodeLocked(n.m.Slot())
		errs = append(errs, s.region.FreeMeganode(n.m.Slot()))
		s.megaMu.Unlock()
	}
	return errors.Join(errs...)
}
