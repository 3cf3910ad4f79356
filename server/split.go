package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// Local meganode splits (paper §2.2, docs/design.md §4; the protocol is drawn in
// doc.go, "Meganode splits"). One goroutine, splitLoop, runs the server's
// splits one at a time; writes trigger them (requestSplit) and wait for
// them when they meet a frozen range or a full meganode (write.go).
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
	// Evaluated while a split of the root's level grows the root
	// (growRootLocked), past the link: logged and ignored.
	FailpointRootMade = "server/split/root/made" // new root meganode formatted, the region table not yet naming it
	FailpointRootSet  = "server/split/root/set"  // the region table names the new root, the server does not publish it yet
	// FailpointSeparator is evaluated before each try to insert a
	// separator: an error fails the try (the parent is unreachable), and
	// the split loop tries again later.
	FailpointSeparator = "server/split/separator"

	// Evaluated by a remote split's target after it applied a request
	// and before it answers: an error is the answer.
	FailpointTargetBegan    = "server/split/target/began"    // Y formatted, frozen, empty
	FailpointTargetAppended = "server/split/target/appended" // a batch of X's entries copied into Y
	FailpointTargetEnded    = "server/split/target/ended"    // Y thawed (or dropped)
)

// splitter is the server's split driver: it splits the meganodes of the
// regions this server serves, one split at a time (the split loop), by
// the paper's protocol, each step a record of the regions it changes
// (splitdriver.go), and resumes or undoes on a new leader the splits its
// applied state shows in progress (recover.go). It reaches replicas
// through the server's registry.
//
// It has about 30 methods: the loop, the local and remote steps of a
// split (remote.go), the separator's insertion into the parent and a new
// root, and recovery, all over the fields below.
//
// Locking notes: splitter.mu < rsm.Machine's lock.
type splitter struct {
	s *Server
	// mu is held by the split loop for a whole split (one at a time).
	mu sync.Mutex
	// reqs queues meganodes to consider.
	reqs chan blink.Ptr
	// pendingSeps are separators still to insert. Guarded by mu.
	pendingSeps []*splitDriver
	// wake wakes writes waiting for a split.
	wake splitSignal
}

// splitSignal counts split events: a write reads the generation before
// it searches, and one that met a split parks only if no event came
// since (park.go); each event requeues the parked writes.
type splitSignal struct {
	gen atomic.Uint64
}

func (g *splitSignal) generation() uint64 { return g.gen.Load() }

func (g *splitSignal) broadcast() { g.gen.Add(1) }

// requestSplit asks the split loop to split lm: when its fill reaches
// Options.SplitFill, or in any case with force (a write met ErrNeedsSplit).
// It never blocks; a meganode already queued is not queued twice.
func (sp *splitter) requestSplit(lm *rsm.Meganode, force bool) {
	s := sp.s
	if s.opts.DisableSplits {
		return
	}
	if force {
		lm.Splits.Force.Store(true)
	}
	if !lm.Splits.Queued.CompareAndSwap(false, true) {
		return
	}
	select {
	case sp.reqs <- lm.Ptr():
	default:
		lm.Splits.Queued.Store(false) // full: a later write asks again
	}
}

// maybeRequestSplit requests a split of lm once its fill reached the
// threshold; a cheap lock-free check for the write path.
func (sp *splitter) maybeRequestSplit(lm *rsm.Meganode) {
	s := sp.s
	if !s.opts.DisableSplits && lm.T.Fill() >= s.opts.SplitFill {
		sp.requestSplit(lm, false)
	}
}

// splitLoop runs the requested splits until the server stops. A split in
// progress when Close begins is finished first: it only needs the region.
func (sp *splitter) splitLoop() {
	s := sp.s
	for _, rep := range s.reps.servedList() {
		sp.resumeSplits(rep)
	}
	retry := time.NewTicker(250 * time.Millisecond)
	defer retry.Stop()
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case p := <-sp.reqs:
			sp.serveSplit(p)
		case <-retry.C:
			sp.retrySeparators()
		}
	}
}

// retrySeparators tries the pending separators (splits past their link
// whose separator is not in the parent yet: its server was down or kept
// splitting) once each, and ends the splits whose separator went in.
func (sp *splitter) retrySeparators() {
	s := sp.s
	sp.mu.Lock()
	defer sp.mu.Unlock()
	pending := sp.pendingSeps
	sp.pendingSeps = nil // a parent split below may queue its own
	for _, d := range pending {
		d.depth = 0 // from the top now, not nested in a child's split
		if err := d.insertSeparator(); err != nil {
			sp.pendingSeps = append(sp.pendingSeps, d)
			continue
		}
		if err := d.end(); err != nil {
			s.log.Error("server: end of a split", slog.String("meganode", d.x.Ptr().String()), slog.Any("err", err))
			continue
		}
		s.log.Info("server: separator inserted after all", slog.String("new", d.y.String()))
	}
}

func (sp *splitter) serveSplit(p blink.Ptr) {
	s := sp.s
	lm := s.servedMeganode(p)
	if lm == nil || lm.Ptr() != p {
		return
	}
	lm.Splits.Queued.Store(false)
	// A write that found the meganode full forces a split, unless a split
	// made room since.
	force := lm.Splits.Force.Swap(false) && lm.T.NeedsSplit()
	if !force && lm.T.Fill() < s.opts.SplitFill {
		return
	}
	sp.runSplit(lm)
}

// runSplit splits lm now, wakes the writes waiting for it, and requests
// further splits of the two halves if they are still above the fill
// threshold (an unbalanced split). It reports whether the split was done.
func (sp *splitter) runSplit(lm *rsm.Meganode) bool {
	s := sp.s
	sp.mu.Lock()
	yp, err := sp.splitLocked(lm, 0)
	if errors.Is(err, blink.ErrSplitState) && sp.settleLeftSplitLocked(lm) {
		yp, err = 0, nil // settled; a new split is requested below if still due
	}
	sp.mu.Unlock()
	s.splitEvent()
	if err != nil {
		s.log.Warn("server: meganode split failed", slog.String("meganode", lm.Ptr().String()), slog.Any("err", err))
		return false
	}
	sp.maybeRequestSplit(lm)
	if y := s.servedMeganode(yp); y != nil {
		sp.maybeRequestSplit(y)
	}
	return true
}

// settleLeftSplitLocked resumes or undoes a split of lm that its region's
// replicated state shows in progress while no split runs (s.splits.mu is
// held): one whose steps and abort were all refused because this server
// lost its group's leadership for a moment and was then elected again
// without another server taking the region over, so resumeSplits (server
// start, takeover) never ran for it. It reports whether it found one and
// settled it. REQUIRES: s.splits.mu held.
func (sp *splitter) settleLeftSplitLocked(lm *rsm.Meganode) bool {
	s := sp.s
	rep := s.reps.holding(lm.Ptr().Region())
	if rep == nil {
		return false
	}
	p, found := rep.sm.SplitOf(lm.Ptr())
	if !found {
		return false
	}
	if err := sp.resumeSplitLocked(p); err != nil {
		s.log.Error("server: a split left in progress could not be resumed", slog.String("meganode", p.X.String()),
			slog.String("new", p.Y.String()), slog.Any("err", err))
		return false
	}
	return true
}

// failpointAfterLink evaluates a failpoint past a split's point of no
// return: an error is logged and the split goes on.
func (sp *splitter) failpointAfterLink(name string) {
	s := sp.s
	if err := failpoint.Eval(name); err != nil {
		s.log.Warn("server: failpoint after a split's link ignored", slog.String("failpoint", name), slog.Any("err", err))
	}
}

// applySplit applies one split record for meganode x.
func (sp *splitter) applySplit(x *rsm.Meganode, sep []byte, b rsm.SplitBody) (rsm.Result, error) {
	s := sp.s
	rec := rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindSplit, Meganode: x.Ptr(), Key: sep, Value: rsm.AppendSplitBody(nil, &b)})
	rep, err := s.holder(x)
	var res rsm.Result
	if err == nil {
		res, err = rep.propose(rec)
	}
	if err != nil {
		return res, fmt.Errorf("server: split %v at %q, %v step: %w", x.Ptr(), sep, b.Phase, err)
	}
	return res, nil
}

// maxSeparatorTries bounds the attempts to insert one separator (each a
// search from the root); a parent being split elsewhere is waited for
// with backoff between them.
const maxSeparatorTries = 64

// insertSeparatorLocked makes y (at level, the level of the meganode it
// was split from) known one level up: the separator goes into the parent
// meganode as a decoupled insert, wherever it is (a full local parent is
// split first; a remote one is split by its server while this one waits),
// or, when level is the root's, a new root meganode is made over that
// level and published. Until then readers reach y through right links.
// REQUIRES: s.splits.mu held.
func (sp *splitter) insertSeparatorLocked(level int, sep []byte, yp blink.Ptr, depth int) error {
	s := sp.s
	child := binary.LittleEndian.AppendUint64(nil, uint64(yp))
	if err := failpoint.Eval(FailpointSeparator); err != nil {
		return err
	}
	var last error
	for attempt := 0; attempt < maxSeparatorTries; attempt++ {
		if attempt > 0 {
			if err := sp.pause(attempt); err != nil {
				return err
			}
		}
		rp := blink.Ptr(s.root.Load())
		rootLevel, err := sp.levelOf(rp)
		if err != nil {
			last = err
			continue
		}
		switch {
		case rootLevel == level:
			err := sp.growRootLocked(rp, level, sep)
			if errors.Is(err, regiontable.ErrConflict) {
				continue // the table had a newer root, now ours: look again
			}
			if err == nil {
				return nil
			}
			last = err
			continue
		case rootLevel < level:
			// Our root pointer is older than the table's (a new root
			// was published elsewhere): wait for the watch.
			last = fmt.Errorf("server: root meganode %v at level %d is below the level %d separator %q", rp, rootLevel, level+1, sep)
			continue
		}
		p, next, err := sp.parentOf(rp, sep, level+1)
		if err != nil {
			last = err
			continue
		}
		if p == nil {
			// The parent level goes on on another server.
			done, err := sp.insertChildRemote(next, level+1, sep, yp)
			if err == nil && done {
				return nil
			}
			last = err
			continue
		}
		var rep *replica
		if rep, err = s.holder(p); err == nil {
			_, err = rep.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindChild, Meganode: p.Ptr(), Key: sep, Value: child}))
		}
		switch {
		case err == nil:
			sp.maybeRequestSplit(p)
			return nil
		case errors.Is(err, blink.ErrNeedsSplit):
			if _, err := sp.splitLocked(p, depth+1); err != nil {
				return fmt.Errorf("server: split parent %v: %w", p.Ptr(), err)
			}
			s.splitEvent()
			attempt-- // no need to wait
		case errors.Is(err, blink.ErrKeyOutOfRange), errors.Is(err, blink.ErrFrozen):
			last = err // the parent moved under us: search again
		default:
			return fmt.Errorf("server: insert separator %q into %v: %w", sep, p.Ptr(), err)
		}
	}
	return fmt.Errorf("server: separator %q (level %d, child %v) found no parent: %w (last: %v)", sep, level+1, yp, blink.ErrRestart, last)
}

// pause sleeps before attempt n of a step that waits for another server
// (or the region table): 1 ms doubling to 200 ms.
func (sp *splitter) pause(n int) error {
	s := sp.s
	d := time.Millisecond << min(n, 8)
	t := time.NewTimer(min(d, 200*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.bgCtx.Done():
		return ErrClosed
	}
}

// parentOf searches key from meganode start down to level, within this
// server: it returns the local meganode at level covering key, or the
// pointer where the search goes on on another server.
func (sp *splitter) parentOf(start blink.Ptr, key []byte, level int) (*rsm.Meganode, blink.Ptr, error) {
	s := sp.s
	lm := s.servedMeganode(start)
	if lm == nil {
		return nil, start, nil
	}
	for i := range maxHops {
		if lm.Level < level {
			if i == 0 {
				// The request's own start: no search led there.
				return nil, 0, wireErrorf(wire.StatusOutOfBounds, "start %v is in a meganode of level %d, below the parent level %d", start, lm.Level, level)
			}
			return nil, 0, fmt.Errorf("server: search for level %d reached meganode %v at level %d: %w", level, lm.Ptr(), lm.Level, blink.ErrCorruption)
		}
		res, err := lm.T.Search(key)
		if err != nil {
			return nil, 0, err
		}
		next := res.Next
		if next.IsNil() {
			if lm.Level == level {
				return lm, 0, nil
			}
			next = res.Child
		}
		nl := s.servedMeganode(next)
		if nl == nil {
			return nil, next, nil
		}
		lm = nl
	}
	return nil, 0, fmt.Errorf("server: search for level %d crossed %d meganodes: %w", level, maxHops, blink.ErrCorruption)
}

// levelOf returns the global level of the meganode holding node p, here
// or on its server.
func (sp *splitter) levelOf(p blink.Ptr) (int, error) {
	s := sp.s
	if p.IsNil() {
		return 0, fmt.Errorf("server: no root meganode: %w", blink.ErrRestart)
	}
	if lm := s.servedMeganode(p); lm != nil {
		return lm.Level, nil
	}
	info, err := sp.remoteMeganode(p)
	if err != nil {
		return 0, err
	}
	return int(info.Meganode.Level), nil
}

// walkLevel lists the meganodes of root's level, left to right along the
// right links, here or on other servers.
func (sp *splitter) walkLevel(root blink.Ptr, level int) ([]rsm.LevelEntry, error) {
	s := sp.s
	var out []rsm.LevelEntry
	for p := root; !p.IsNil(); {
		if len(out) > maxHops*maxHops {
			return nil, fmt.Errorf("server: the root's level has over %d meganodes: %w", maxHops*maxHops, blink.ErrCorruption)
		}
		var (
			e     rsm.LevelEntry
			lv    int
			bmin  []byte
			minf  bool
			right blink.Ptr
		)
		if lm := s.servedMeganode(p); lm != nil {
			h, err := lm.T.Header()
			if err != nil {
				return nil, err
			}
			e.Ptr, lv, bmin, minf, right = lm.Ptr(), lm.Level, h.Bounds.Min, h.Bounds.MinInf, lm.T.Right()
		} else {
			info, err := sp.remoteMeganode(p)
			if err != nil {
				return nil, err
			}
			m := &info.Meganode
			e.Ptr, lv, bmin, minf, right = m.Ptr, int(m.Level), m.Range.Min, m.Range.MinInf, info.Right
		}
		if lv != level {
			return nil, fmt.Errorf("server: meganode %v of the root's level %d is at level %d: %w", e.Ptr, level, lv, blink.ErrCorruption)
		}
		e.Key = bytes.Clone(bmin)
		if minf {
			e.Key = []byte{0}
		}
		out = append(out, e)
		p = right
	}
	return out, nil
}

// growRootLocked makes a new root meganode one level above root's level,
// with an entry for every meganode of that level (root and those its
// right links reach, on any server), and publishes it: the region table's
// root first (compare-and-set from root), then the server's and offset 0
// of the region. Readers that still start at the old root reach
// everything through right links. On failure the unpublished meganode is
// dropped. REQUIRES: s.splits.mu held.
func (sp *splitter) growRootLocked(root blink.Ptr, level int, sep []byte) error {
	s := sp.s
	ents, err := sp.walkLevel(root, level)
	if err != nil {
		return err
	}
	body := rsm.AppendRootEntries(nil, ents)
	// The root record names a meganode of ours at the old root's level:
	// the old root when it is here, else the first of that level here.
	var x *rsm.Meganode
	for _, e := range ents {
		if lm := s.servedMeganode(e.Ptr); lm != nil {
			x = lm
			break
		}
	}
	if x == nil {
		return fmt.Errorf("server: no meganode of level %d on this server to grow the root from", level)
	}
	res, err := sp.applySplit(x, sep, rsm.SplitBody{Phase: rsm.PhaseRoot, Cursor: body})
	if err != nil {
		return err
	}
	np := res.New
	sp.failpointAfterLink(FailpointRootMade)
	ctx, cancel := context.WithTimeout(s.bgCtx, 10*time.Second)
	defer cancel()
	if cur, err := s.opts.Store.SetRoot(ctx, root, np); err != nil {
		if _, aerr := sp.applySplit(x, sep, rsm.SplitBody{Phase: rsm.PhaseAbort, New: np}); aerr != nil {
			s.log.Error("server: drop the unpublished root meganode", slog.String("meganode", np.String()), slog.Any("err", aerr))
		}
		if errors.Is(err, regiontable.ErrConflict) && !cur.IsNil() {
			// Our root was stale (the table's follower had not caught
			// up): adopt the table's, the caller looks again.
			s.learnRoot(cur)
		}
		return fmt.Errorf("server: publish the new root meganode %v: %w", np, err)
	}
	sp.failpointAfterLink(FailpointRootSet)
	rep, err := s.holder(x)
	if err != nil {
		return err
	}
	if err := s.publishRoot(rep, np); err != nil {
		return err
	}
	s.log.Info("server: new root meganode", slog.String("root", np.String()), slog.String("old_root", root.String()),
		slog.Int("level", level+1), slog.Int("entries", len(ents)))
	return nil
}
