package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/cellstore/cell/blink"
)

// source is the cached information that led a traversal to a node, to be
// dropped if the node proves it stale (paper §2.3: "if they follow a
// right-link pointer, they invalidate any information cached from the
// parent node").
type source struct {
	node   blink.Ptr // a cached node copy whose entry pointed here
	rootOf blink.Ptr // the meganode whose cached local root this was
}

func (op *searchOp) dropSource(s source) {
	if !s.node.IsNil() {
		op.c.nodes.drop(s.node)
	}
	if !s.rootOf.IsNil() {
		op.c.paths.setRoot(s.rootOf, 0)
	}
}

// maxHopRestarts is how often one client-side hop restarts from its
// meganode's header before the whole search restarts from the root.
const maxHopRestarts = 2

// clientHop traverses one meganode with one-sided reads (paper §2.3): read
// its header for the local root (unless the path cache knows it), then
// copy nodes from the root down, each checked with blink.CheckCopy and
// stepped with blink.View.StepFor, the same rule the server applies.
// Torn copies are re-read; a copy that is invalid or no longer covers the
// key restarts the hop from the header, and after maxHopRestarts the
// search from the root; a right link is followed (also out of the
// meganode, which a meganode split makes necessary). Upper nodes are
// served from and added to the node cache. At an extent leaf the record
// is fetched and its CRC checked; at a leaf of an inner meganode the
// child meganode is the next hop. Every read's latency feeds the
// selector's l_r, the meganode's height its m.
func (op *searchOp) clientHop(ctx context.Context, h *hopState) (hopState, bool, error) {
	c := op.c
	for hopRestarts := 0; ; hopRestarts++ {
		if hopRestarts > maxHopRestarts {
			return hopState{}, false, errRestart
		}
		if hopRestarts > 0 {
			op.restarts++
			if op.restarts > c.cfg.MaxRestarts {
				return hopState{}, false, errRestart
			}
		}
		var via source
		if h.root.IsNil() || hopRestarts > 0 {
			err := op.readHeader(ctx, h)
			if errors.Is(err, errNotHeader) {
				// A server's Next may be any node of a meganode (a
				// right link out of a split meganode): walk from it.
				h.root, h.height = h.ptr, 0
				err = nil
			}
			if err != nil {
				return hopState{}, false, err
			}
			if op.kind == opLocate && h.level == 0 && !op.deep {
				op.res.leaf = h.ptr
				return hopState{}, true, nil
			}
		} else {
			via.rootOf = h.ptr
		}
		c.sel.ObserveHeight(h.height)
		next, done, err := op.walk(ctx, h, via)
		if !errors.Is(err, errRestartHop) {
			return next, done, err
		}
	}
}

// errRestartHop restarts the current hop from its meganode's header.
var errRestartHop = errors.New("cell: restart hop")

// walk descends from h's local root to a leaf and ends the hop there.
func (op *searchOp) walk(ctx context.Context, h *hopState, via source) (hopState, bool, error) {
	w := walker{op: op, h: h, via: via, p: h.root, level: h.level, local: h.height - 1}
	for {
		view, cached, r, err := op.node(ctx, w.p, w.level, w.local, w.bypassNode || w.crcRetry)
		if err != nil {
			return hopState{}, false, err
		}
		w.bypassNode, w.crcRetry = false, false
		if r != blink.OK {
			return hopState{}, false, w.invalid(r)
		}
		step := view.StepFor(op.key)
		if step.Covers != blink.OK {
			if err := w.notCovered(view, step, cached); err != nil {
				return hopState{}, false, err
			}
			continue // right, or the same node again
		}
		switch {
		case view.Level() > 0:
			w.down(view, step, cached)
		case view.Extents():
			done, err := w.extentLeaf(ctx, view, step)
			if errors.Is(err, errCRC) {
				continue // re-read the leaf and the record
			}
			return hopState{}, done, err
		default:
			return w.childHop(view, step, cached)
		}
	}
}

// walker is one descent of a client-side hop (walk): the node it is at
// and what it knows of how it got there.
type walker struct {
	op         *searchOp
	h          *hopState
	via        source    // the cached information that led to p
	p          blink.Ptr // the node to read next
	level      int       // global level of the meganode(s) walked
	local      int       // expected local level of p; -1 unknown
	crossed    bool      // left h's meganode through a right link
	bypassNode bool      // read p fresh, not from the cache
	crcRetry   bool      // re-reading a leaf after a CRC mismatch
}

// invalid handles a copy of p that CheckCopy refused (freed or moved by
// a meganode split, or corrupt): the hop restarts from its header.
func (w *walker) invalid(r blink.Reason) error {
	if err := w.op.corruptCopy(r, w.p); err != nil {
		return err
	}
	w.op.dropSource(w.via)
	w.op.c.countRetry(causeInvalid)
	return errRestartHop
}

// notCovered handles a node that does not cover the key: above its max,
// the walk follows its right link (out of the meganode, too, after a
// split); a cached copy is read again fresh; otherwise the hop restarts
// (errRestartHop).
func (w *walker) notCovered(view blink.View, step blink.Step, cached bool) error {
	op, c := w.op, w.op.c
	switch step.Covers {
	case blink.AboveMax:
		if step.Next.IsNil() {
			if cached {
				return w.stale()
			}
			c.countRetry(causeOutOfRange)
			return errRestartHop
		}
		op.dropSource(w.via)
		if !w.crossed && !op.t.inMeganode(step.Next, w.h.ptr) {
			// The meganode split and the key now lies right of it: its
			// cached range is stale.
			w.crossed = true
			c.paths.drop(w.h.ptr)
		}
		w.from(cached)
		w.p, w.local = step.Next, view.Level()
		return nil
	case blink.OutOfRange:
		if cached {
			return w.stale()
		}
		op.dropSource(w.via)
		c.countRetry(causeOutOfRange)
		return errRestartHop
	default: // Corrupt: an inner node without entries
		op.dropSource(w.via)
		c.countRetry(causeInvalid)
		return errRestartHop
	}
}

// stale drops the cached copy of p, which proved stale, to read p fresh.
func (w *walker) stale() error {
	w.op.c.nodes.drop(w.p)
	w.op.c.countRetry(causeStaleCache)
	w.bypassNode = true
	return nil
}

// from notes that the next node is reached from p: through the cache's
// copy of p, if cached.
func (w *walker) from(cached bool) {
	w.via = source{}
	if cached {
		w.via.node = w.p
	}
}

// down steps from inner node view to its child covering the key, caching
// the view if it is high enough.
func (w *walker) down(view blink.View, step blink.Step, cached bool) {
	op := w.op
	if !cached && op.cacheable(w.level, view.Level()) {
		op.c.nodes.put(w.p, view)
		cached = true
	}
	w.from(cached)
	w.p, w.local = step.Next, view.Level()-1
}

// extentLeaf ends the search at extent leaf view (a leaf of a leaf
// meganode): a scan or a deep locate stops at the leaf, a get reads the
// record. errCRC: the leaf is to be read again, with its record.
func (w *walker) extentLeaf(ctx context.Context, view blink.View, step blink.Step) (bool, error) {
	op := w.op
	if op.kind == opScan || op.kind == opLocate {
		// opScan: the copy stays in op.sc.node. A deep locate ends here:
		// p is a node of the key's leaf meganode.
		op.res.leaf = w.p
		return true, nil
	}
	done, err := op.leaf(ctx, view, step)
	if errors.Is(err, errCRC) {
		w.crcRetry = true
		op.restarts++
		if op.restarts > op.c.cfg.MaxRestarts {
			return false, errRestart
		}
	}
	return done, err
}

// childHop ends the hop at view, a leaf of an inner meganode: its entry
// (the last whose key <= key) names the child meganode covering the key,
// the next hop.
func (w *walker) childHop(view blink.View, step blink.Step, cached bool) (hopState, bool, error) {
	op := w.op
	if view.Count() == 0 {
		op.dropSource(w.via)
		op.c.countRetry(causeInvalid)
		return hopState{}, false, errRestartHop
	}
	child := view.Child(step.Index)
	if !cached && op.cacheable(w.level, 0) {
		op.c.nodes.put(w.p, view)
		cached = true
	}
	next := hopState{meganodeInfo: meganodeInfo{ptr: child, level: -1}}
	if w.level > 0 {
		next.level = w.level - 1
	}
	if cached {
		next.via = w.p
	}
	return next, false, nil
}

// maxCorrupt bounds the consistent copies that do not decode one operation
// may meet: a stale pointer can lead to one now and then (a node being
// reformatted), a steady stream means corruption.
const maxCorrupt = 8

// corruptCopy counts a copy CheckCopy called Corrupt and fails the op with
// ErrCorruption once there were too many.
func (op *searchOp) corruptCopy(r blink.Reason, p blink.Ptr) error {
	if r != blink.Corrupt {
		return nil
	}
	if op.corrupt++; op.corrupt > maxCorrupt {
		return wrapErr(ErrCorruption, fmt.Errorf("node %v: %d consistent copies that do not decode", p, op.corrupt))
	}
	return nil
}

// errNotHeader: a hop's pointer is a tree node, not a meganode header.
var errNotHeader = errors.New("cell: not a meganode header")

// errCRC: an extent record did not match its leaf entry (re-read both).
var errCRC = errors.New("cell: extent CRC mismatch")

// leaf ends a search at the extent leaf view (a leaf of a leaf meganode).
func (op *searchOp) leaf(ctx context.Context, view blink.View, step blink.Step) (bool, error) {
	var word blink.Word
	if step.Found && view.Versioned() {
		word = view.Word(step.Index)
	}
	if !step.Found || word.Placeholder() {
		// A placeholder holds a lock on an absent key
		// (docs/transactions.md §2.1): the key is not there.
		op.res.found = false
		return true, nil
	}
	if op.wantVersion {
		if !view.Versioned() {
			// A leaf written before the region had versions: its
			// entries' version is the region's legacy version, which
			// the server knows.
			return false, errNeedsServer
		}
		op.res.version = word.Version()
	}
	if op.kind != opGet {
		op.res.found = true
		return true, nil
	}
	ext, n, crc := view.Extent(step.Index)
	if n < blink.ExtentLen(len(op.key), 0) || n > blink.ExtentLen(len(op.key), maxValueLen) {
		return false, wrapErr(ErrCorruption, fmt.Errorf("leaf entry for %q gives a record of %d bytes", op.key, n))
	}
	padded := (n + 7) &^ 7
	if cap(op.sc.rec) < padded {
		op.sc.rec = make([]byte, padded)
	}
	rec := op.sc.rec[:padded]
	if err := op.read(ctx, ext, rec); err != nil {
		return false, err
	}
	if k := op.c.cfg.TestingKnobs.AfterExtentRead; k != nil {
		k(uint64(ext), rec)
	}
	key, value, err := blink.DecodeExtent(rec[:n], crc)
	switch {
	case errors.Is(err, blink.ErrTorn):
		// The record changed after the leaf was copied (paper §2.3, the
		// Pilaf technique): re-read the leaf and the record.
		op.c.countRetry(causeCRC)
		return false, errCRC
	case err != nil:
		return false, wrapErr(ErrCorruption, fmt.Errorf("extent %v: %w", ext, err))
	case !bytes.Equal(key, op.key):
		return false, wrapErr(ErrCorruption, fmt.Errorf("extent %v holds key %q, leaf entry is for %q", ext, key, op.key))
	}
	op.res.found = true
	op.res.value = append(op.res.value, value...)
	return true, nil
}

// maxValueLen is the largest value a record may hold.
const maxValueLen = 1 << 20

// cacheable reports whether a node at local level local of a meganode at
// global level level may be cached: it must be at least
// NodeCacheMinLevel levels above the leaves. Within a leaf meganode the
// local level is that height exactly; a meganode at level g > 0 stands
// above g levels of meganodes, each about m (the selector's running
// average height) tall. Extent leaves are never cached, whatever the
// setting: they are where values are found, and a stale one would give a
// stale value.
func (op *searchOp) cacheable(level, local int) bool {
	c := op.c
	if c.nodes == nil || op.bypass {
		return false
	}
	if level <= 0 {
		return local > 0 && local >= c.cfg.NodeCacheMinLevel
	}
	height := float64(local) + float64(level)*math.Max(c.sel.M(), 1)
	return height >= float64(c.cfg.NodeCacheMinLevel)
}

// node returns a checked copy of the node at p: from the node cache when
// the node is cacheable and cached (cached true), else read one-sided into
// the op's buffer, re-read while torn. r is the copy's blink.CheckCopy
// verdict (never Torn). level and local are the global and expected local
// level of p, to skip cache lookups of nodes that cannot be cached.
func (op *searchOp) node(ctx context.Context, p blink.Ptr, level, local int, fresh bool) (blink.View, bool, blink.Reason, error) {
	c := op.c
	if !fresh && local >= 0 && op.cacheable(level, local) {
		if v, ok := c.nodes.get(p); ok {
			return v, true, blink.OK, nil
		}
	}
	buf := op.sc.node
	for {
		if err := op.read(ctx, p, buf); err != nil {
			return nil, false, 0, err
		}
		if k := c.cfg.TestingKnobs.AfterNodeRead; k != nil {
			k(uint64(p), buf)
		}
		r := blink.CheckCopy(buf)
		if r != blink.Torn {
			return blink.View(buf), false, r, nil
		}
		if err := op.torn(); err != nil {
			return nil, false, 0, err
		}
	}
}

// torn counts a torn copy and bounds the re-reads, yielding now and then
// so that a reader never spins against a writer it shares a CPU with.
func (op *searchOp) torn() error {
	op.c.countRetry(causeTorn)
	op.restarts++
	if op.restarts > op.c.cfg.MaxRestarts {
		return errRestart
	}
	if op.restarts%16 == 0 {
		runtime.Gosched()
	}
	return nil
}

// readHeader reads meganode h.ptr's header and fills in h: level, height,
// local root. It re-reads torn copies. A header that is invalid, of
// another level than expected, or whose range starts above the key, means
// the pointer that led here is stale: the cached routing is dropped and
// the search restarts.
func (op *searchOp) readHeader(ctx context.Context, h *hopState) error {
	c := op.c
	buf := op.sc.node
	for {
		if err := op.read(ctx, h.ptr, buf); err != nil {
			return err
		}
		if k := c.cfg.TestingKnobs.AfterNodeRead; k != nil {
			k(uint64(h.ptr), buf)
		}
		hdr, r := blink.DecodeHeader(buf)
		if r == blink.Torn {
			if err := op.torn(); err != nil {
				return err
			}
			continue
		}
		if r == blink.Corrupt && !h.fromCache && h.via.IsNil() && blink.CheckCopy(buf) == blink.OK {
			return errNotHeader
		}
		cause := causeInvalid
		if r == blink.OK {
			switch {
			case hdr.NodeSize != op.t.nodeSize:
				return wrapErr(ErrCorruption, fmt.Errorf("meganode %v has %d-byte nodes, store %d", h.ptr, hdr.NodeSize, op.t.nodeSize))
			case h.level >= 0 && hdr.Level != h.level, hdr.Root.IsNil():
			case !hdr.Bounds.MinInf && bytes.Compare(op.key, hdr.Bounds.Min) < 0:
				cause = causeOutOfRange
			default:
				h.level, h.height, h.root = hdr.Level, max(hdr.Height, 1), hdr.Root
				op.learnHeader(h, &hdr)
				return nil
			}
		}
		// The meganode is gone or is not the one the pointer meant.
		if err := op.corruptCopy(r, h.ptr); err != nil {
			return err
		}
		op.dropHop(h)
		c.countRetry(cause)
		if h.ptr == op.t.root {
			c.kickRefresh() // the root meganode moved
		}
		return errRestart
	}
}

// learnHeader records a meganode whose header a client-side hop read.
func (op *searchOp) learnHeader(h *hopState, hdr *blink.Header) {
	paths := op.c.paths
	if paths == nil {
		return
	}
	b := &hdr.Bounds
	if paths.freshBounds(h.ptr, hdr.Level, h.height, b) {
		paths.setRoot(h.ptr, hdr.Root)
		return
	}
	paths.insert(meganodeInfo{ptr: h.ptr, level: hdr.Level, height: h.height, root: hdr.Root, rng: ownedBounds(b)})
}

// read copies len(dst) bytes at p one-sided into dst, through the reader
// of p's region, and collects the latency for the selector (observe.go).
// A failed read (other than the context ending) counts its cause, sends
// the rest of the op server-side and restarts it: the region moved or its
// registration went, which a topology refresh will tell.
func (op *searchOp) read(ctx context.Context, p blink.Ptr, dst []byte) error {
	c := op.c
	reg := op.t.regions[p.Region()]
	if reg == nil || reg.reader == nil {
		op.forceServer = true
		return errRestart
	}
	start := c.mono()
	err := reg.reader.Read(ctx, reg.rk, p.Offset(), dst)
	end := c.mono()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		c.countRetry(readCause(err))
		c.log.Debug("cell client: one-sided read failed", "region", p.Region(), "error", err)
		op.forceServer = true
		c.kickRefresh()
		return errRestart
	}
	op.observeRead(reg.srv.est, start, end, len(dst))
	return nil
}
