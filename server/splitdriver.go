package server

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/server/rsm"
)

// splitDriver drives one split of meganode x, by the leader of x's
// region: one method per step, each proposing the step's records to x's
// group (applySplit), so that what a step did is in the applied state
// (rsm.SplitProgress), where a new leader finds the split and resumes or
// undoes it (resumeSplits) without this driver.
//
// The steps, in order: choose the separator and the placement, start
// (freeze X's right half and make Y, here or on the target server),
// copy the right half into Y, link (X's right link to Y: the point of
// no return), free X's old right half, insert the separator one level
// up, end. A failure before the link aborts the split (X as before, Y
// dropped); after it, the split stays in effect and only its last steps
// are retried (a separator not inserted is retried in the background).
//
// A driver is also rebuilt from the applied state alone (resumeDriver,
// recover.go) by a server that finds the split in progress: the flags
// below say which steps are done.
type splitDriver struct {
	s     *Server
	x     *rsm.Meganode
	depth int // nested splits of full parents above this one

	sep    []byte
	tgt    *splitTarget // the target server's new meganode; nil: local
	y      blink.Ptr    // Y's header, once started
	yRoot  blink.Ptr    // Y's root on the target server (remote)
	linked bool         // X links to Y: the split can no longer be undone
	freed  bool         // X's old right half is freed

	began   time.Time   // zero for a resumed split
	before  blink.Usage // X's usage when the split started (or resumed)
	resumed bool        // rebuilt from the applied state (resumeDriver)
}

// splitLocked splits meganode x into x and a new meganode y, in this
// region or another server's (placeSplit), and inserts the separator
// above (splitting a local parent first if it is full, depth counting
// those nested splits). It returns y's header pointer.
// REQUIRES: s.splits.mu held.
func (sp *splitter) splitLocked(x *rsm.Meganode, depth int) (blink.Ptr, error) {
	s := sp.s
	if depth > maxHops {
		return 0, fmt.Errorf("server: %d nested meganode splits: %w", depth, blink.ErrCorruption)
	}
	defer x.Splits.Runs.Add(1)
	d := &splitDriver{s: s, x: x, depth: depth, began: time.Now()}
	return d.run()
}

// run takes the split through its steps.
func (d *splitDriver) run() (_ blink.Ptr, err error) {
	if err := d.choose(); err != nil {
		return 0, err
	}
	if err := d.start(); err != nil {
		return 0, err
	}
	defer func() {
		if err != nil && !d.linked {
			d.abort() // logged; a new leader undoes what is left
		}
	}()
	if err := failpoint.Eval(FailpointSplitFroze); err != nil {
		return 0, err
	}
	if err := d.copy(); err != nil {
		return 0, err
	}
	if err := failpoint.Eval(FailpointSplitCopied); err != nil {
		return 0, err
	}
	if err := d.link(); err != nil {
		return 0, err
	}
	if err := d.afterLink(); err != nil {
		d.s.metrics.splits.WithLabelValues("failed").Inc()
		return d.y, err
	}
	return d.y, nil
}

// choose picks the separator and the placement: a remote target when
// placeSplit names a peer that agrees (else local).
func (d *splitDriver) choose() error {
	s, x := d.s, d.x
	sep, err := x.T.SplitKey()
	if err != nil {
		return fmt.Errorf("server: split %v: %w", x.Ptr(), err)
	}
	d.sep = sep
	if err := failpoint.Eval(FailpointSplitChose); err != nil {
		return err
	}
	if peer := s.splits.placeSplit(x); peer != nil {
		if d.tgt, err = s.splits.beginRemoteTarget(x, sep, peer); err != nil {
			s.log.Warn("server: remote split target refused; splitting locally", slog.String("peer", peer.ID), slog.Any("err", err))
			d.tgt = nil
		}
	}
	return nil
}

// start freezes X's right half and records Y (the target's meganode, or
// a new local one).
func (d *splitDriver) start() error {
	b := rsm.SplitBody{Phase: rsm.PhaseStart}
	if d.tgt != nil {
		b.New = d.tgt.ptr
	}
	res, err := d.s.splits.applySplit(d.x, d.sep, b)
	if err != nil {
		if d.tgt != nil {
			d.s.splits.endRemoteTarget(d.tgt, false, nil, 0)
		}
		return err
	}
	if d.y = b.New; d.y.IsNil() {
		d.y = res.New
	}
	d.before = d.x.T.Usage()
	d.s.log.Info("server: meganode split started", slog.String("meganode", d.x.Ptr().String()), slog.Int("level", d.x.Level),
		slog.String("sep", fmt.Sprintf("%q", d.sep)), slog.String("new", d.y.String()), slog.String("placement", d.placement()), slog.Float64("fill", d.before.Fill()))
	return nil
}

// copy fills Y with X's right half: streamed to the target server, or in
// batches of records here (writes to X's left half go on between them).
func (d *splitDriver) copy() error {
	if d.tgt != nil {
		root, err := d.s.splits.copyRemote(d.x, d.sep, d.tgt)
		d.yRoot = root
		return err
	}
	for cursor := d.sep; cursor != nil; {
		res, err := d.s.splits.applySplit(d.x, d.sep, rsm.SplitBody{Phase: rsm.PhaseCopy, New: d.y, Batch: uint32(d.s.opts.SplitCopyBatch), Cursor: cursor})
		if err != nil {
			return err
		}
		cursor = res.Next
		runtime.Gosched()
	}
	return nil
}

// link points X's right link at Y and narrows X to [min, sep): the
// point of no return.
func (d *splitDriver) link() error {
	b := rsm.SplitBody{Phase: rsm.PhaseLink, New: d.y}
	if d.tgt != nil {
		b.Cursor = binary.LittleEndian.AppendUint64(nil, uint64(d.yRoot))
	}
	if _, err := d.s.splits.applySplit(d.x, d.sep, b); err != nil {
		return err
	}
	d.linked = true
	d.s.splits.failpointAfterLink(FailpointSplitLinked)
	return nil
}

// afterLink runs the steps past the link: free X's old right half,
// release a remote Y to writes, insert the separator, end.
func (d *splitDriver) afterLink() error {
	if err := d.free(); err != nil {
		return err
	}
	if err := d.thawTarget(); err != nil {
		return err
	}
	d.s.splits.failpointAfterLink(FailpointSplitInvalidated)
	if !d.separator() {
		return nil // retried in the background; the split's end waits for it
	}
	return d.end()
}

// free frees X's old right half in batches; writes to [sep, X.max) then
// go on in Y, a remote Y taking them once its server hears the split is
// done (thawTarget).
func (d *splitDriver) free() error {
	s := d.s
	for {
		res, err := s.splits.applySplit(d.x, d.sep, rsm.SplitBody{Phase: rsm.PhaseFree, New: d.y, Batch: uint32(s.opts.SplitFreeBatch)})
		if err != nil {
			return err
		}
		if res.Done {
			break
		}
		runtime.Gosched()
	}
	d.freed = true
	s.splitEvent()
	return nil
}

// thawTarget tells a remote Y's server that the split is done, so that
// Y takes writes (a local Y was thawed by the free records).
func (d *splitDriver) thawTarget() error {
	if d.tgt == nil {
		return nil
	}
	rep, err := d.s.holder(d.x)
	if err != nil {
		return err
	}
	_, _, clock := rep.sm.Versions()
	if d.s.opts.TestingKnobs.SplitNoFloor {
		clock = 0
	}
	return d.s.splits.endRemoteTarget(d.tgt, true, rep.sessionDigest(), clock)
}

// separator inserts the separator one level up and reports whether it
// did; if not, the driver is queued for the split loop to retry
// (retrySeparators; readers reach Y through right links meanwhile).
// REQUIRES: s.splits.mu held.
func (d *splitDriver) separator() bool {
	s := d.s
	if err := d.insertSeparator(); err != nil {
		s.log.Warn("server: separator not inserted yet; retrying in the background", slog.String("meganode", d.x.Ptr().String()),
			slog.String("new", d.y.String()), slog.Any("err", err))
		s.splits.pendingSeps = append(s.splits.pendingSeps, d)
		return false
	}
	return true
}

// insertSeparator inserts the separator one level up (or grows the root).
// REQUIRES: s.splits.mu held.
func (d *splitDriver) insertSeparator() error {
	if err := d.s.splits.insertSeparatorLocked(d.x.Level, d.sep, d.y, d.depth); err != nil {
		return err
	}
	d.s.splits.failpointAfterLink(FailpointSplitParent)
	return nil
}

// end records the split as done and counts it.
func (d *splitDriver) end() error {
	s := d.s
	if _, err := s.splits.applySplit(d.x, d.sep, rsm.SplitBody{Phase: rsm.PhaseEnd, New: d.y}); err != nil {
		return err
	}
	s.metrics.splits.WithLabelValues("done").Inc()
	var took time.Duration
	if !d.resumed {
		took = time.Since(d.began)
		s.metrics.splitTime.Observe(took.Seconds())
	}
	if d.tgt != nil {
		s.metrics.splits.WithLabelValues("remote").Inc()
	}
	right := -1
	if y := s.servedMeganode(d.y); y != nil {
		right = y.T.Usage().Nodes
	}
	s.log.Info("server: meganode split done", slog.String("meganode", d.x.Ptr().String()), slog.String("new", d.y.String()),
		slog.String("sep", fmt.Sprintf("%q", d.sep)), slog.String("placement", d.placement()), slog.Int("nodes_before", d.before.Nodes),
		slog.Int("nodes_left", d.x.T.Usage().Nodes), slog.Int("nodes_right", right), slog.Duration("took", took), slog.Bool("resumed", d.resumed))
	return nil
}

// abort undoes a split that failed before its link: X takes its right
// half back, Y is dropped (and the target server told so, whatever the
// abort record's fate: a target left frozen is dropped by its server's
// sweep once the source's state shows no such split).
func (d *splitDriver) abort() error {
	s := d.s
	_, err := s.splits.applySplit(d.x, d.sep, rsm.SplitBody{Phase: rsm.PhaseAbort, New: d.y})
	if err != nil {
		s.log.Error("server: abort of a meganode split failed", slog.String("meganode", d.x.Ptr().String()), slog.Any("err", err))
	}
	if d.tgt != nil {
		if terr := s.splits.endRemoteTarget(d.tgt, false, nil, 0); terr != nil {
			s.log.Warn("server: the split's remote target was not dropped", slog.String("new", d.y.String()), slog.Any("err", terr))
		}
	}
	if err == nil {
		s.metrics.splits.WithLabelValues("aborted").Inc()
	}
	return err
}

// placement names where Y is, for logs: "local" or "remote:<server>".
func (d *splitDriver) placement() string {
	switch {
	case d.tgt == nil:
		return "local"
	case d.tgt.peer.ID == "":
		return "remote:" + fmt.Sprint(d.y.Region()) // resumed: its region, not yet its server
	}
	return "remote:" + d.tgt.peer.ID
}
