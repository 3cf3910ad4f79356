package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/rdma"
)

// Client-side range pages (paper §2.2: "Range queries are implemented by
// following right links at the leaf level"). A forward page whose start
// the selector sends client-side is read one-sided: a client-side search
// (opScan) finds the leaf of the first key, then leaves are copied one by
// one along their right links (also across meganodes and regions: leaf
// meganodes are level-linked), and the records of each leaf are fetched
// together, one vector read per leaf (rdma Caps.VectorReads: one request
// and one round trip for all of them over tcp). Every record is checked
// against its leaf entry's CRC and key, as a get checks one. Reverse
// ranges are served by the servers (B-link trees have no left links).

// errNoReader: a scan met a region it cannot read one-sided; the page is
// served by the server instead.
var errNoReader = errors.New("cell: region not readable one-sided")

// opScan is an internal search kind: find the extent leaf of a key
// client-side and stop there, leaving its copy in the op's node buffer.
const opScan = numOpKinds + 1

// scanBufs are a client-side page's buffers.
type scanBufs struct {
	leaf []byte
	recs []byte
	segs []rdma.Segment
	ents []scanEntry
}

type scanEntry struct {
	key []byte // aliases the leaf copy
	val []byte // aliases bufs.recs once checked
	ver uint64 // from the entry's word
	ext blink.Ptr
	n   int
	crc uint64
	off int // of the record in recs
}

// pageMethod chooses how to serve the next page: client-side only for
// forward pages whose first meganode's region can be read one-sided, as
// the page rule of that region's server's estimator says (ChoosePage:
// the method with the lower measured cost per pair, or the one the mode
// forces). Reverse pages and pages of regions not readable one-sided go
// server-side without a decision.
func (rs *rangeState) pageMethod(t *topology) locality.Method {
	if rs.req.Reverse {
		return locality.ServerSide
	}
	p := rs.req.Ptr
	if p.IsNil() {
		if info, ok := rs.c.paths.lookup(rs.fromKey()); ok {
			p = info.ptr
		} else {
			p = t.root
		}
	}
	srv, reg, ok := t.route(p)
	if !ok || reg == nil || reg.reader == nil {
		return locality.ServerSide
	}
	rs.srv, rs.loads = srv, reg.loads()
	if !rs.c.sysClock {
		return srv.est.ChoosePage().Method
	}
	return srv.est.ChoosePageAt(rs.c.now()).Method
}

// observePage feeds a page that srv served by method m, taking from mono
// reading start to end and returning pairs pairs, to srv's page
// estimates.
func (c *Client) observePage(srv *server, m locality.Method, start, end time.Duration, pairs int) {
	if srv == nil || srv.est == nil {
		return
	}
	if c.sysClock {
		srv.est.ObservePageAt(m, end-start, pairs, c.at(end))
		return
	}
	srv.est.ObservePage(m, end-start, pairs)
}

// fromKey is the first key the next page may return.
func (rs *rangeState) fromKey() []byte {
	if rs.req.StartUnbounded {
		return []byte{0} // no key is smaller
	}
	return rs.req.Start
}

// clientPage reads up to want pairs of the range one-sided and appends
// them to out, moving the range on. errNoReader means nothing was
// appended and the server should serve the page.
func (rs *rangeState) clientPage(ctx context.Context, t *topology, want int, out []KV) ([]KV, error) {
	c := rs.c
	start := len(out)
	from := bytes.Clone(rs.fromKey())
	end := rs.req.End
	if rs.req.EndUnbounded {
		end = nil
	}
	var bufs scanBufs
	if err := c.locateLeaf(ctx, t, from, &bufs); err != nil {
		return out, err
	}
	for restarts := 0; ; {
		v := blink.View(bufs.leaf)
		ents, endReached := collect(v, from, end, want-(len(out)-start), rs.req.WithVersions, bufs.ents[:0])
		bufs.ents = ents
		if rs.req.WithVersions && len(ents) > 0 && !v.Versioned() {
			// A leaf written before the region had versions: only the
			// server knows their version (the region's legacy one).
			return out[:start], errNoReader
		}
		if !rs.req.KeysOnly && len(ents) > 0 {
			err := c.fetchRecords(ctx, t, &bufs)
			if err != nil {
				return out[:start], err
			}
		}
		// Check every record, then copy the good ones out in one arena.
		bad, size := len(ents), 0
		for i := range ents {
			e := &ents[i]
			if !rs.req.KeysOnly {
				k, vv, err := blink.DecodeExtent(bufs.recs[e.off:e.off+e.n], e.crc)
				switch {
				case errors.Is(err, blink.ErrTorn):
					bad = i
				case err != nil:
					return out[:start], wrapErr(ErrCorruption, fmt.Errorf("extent %v: %w", e.ext, err))
				case !bytes.Equal(k, e.key):
					return out[:start], wrapErr(ErrCorruption, fmt.Errorf("extent %v holds key %q, leaf entry is for %q", e.ext, k, e.key))
				}
				if bad < len(ents) {
					break
				}
				e.val = vv
			}
			size += len(e.key) + len(e.val)
		}
		arena := make([]byte, 0, size)
		for _, e := range ents[:bad] {
			k0 := len(arena)
			arena = append(arena, e.key...)
			v0 := len(arena)
			arena = append(arena, e.val...)
			out = append(out, KV{Key: arena[k0:v0:v0], Value: arena[v0:len(arena):len(arena)], Version: e.ver})
		}
		if bad < len(ents) {
			// A record changed after its leaf was copied: copy the leaf
			// again, from the first key not returned.
			c.countRetry(causeCRC)
			if restarts++; restarts > c.cfg.MaxRestarts {
				return out[:start], errRestart
			}
			from = bytes.Clone(ents[bad].key)
			if err := c.locateLeaf(ctx, t, from, &bufs); err != nil {
				return out[:start], err
			}
			continue
		}
		if n := len(out) - start; n >= want && n > 0 {
			// Full: resume just after the last key returned.
			last := out[len(out)-1].Key
			rs.moveTo(append(bytes.Clone(last), 0))
			return out, nil
		}
		max, maxInf := v.Max()
		if endReached || maxInf || end != nil && bytes.Compare(max, end) >= 0 {
			rs.done, rs.last = true, nil
			return out, nil
		}
		// On to the right sibling, which must cover the old max. At a
		// meganode's edge the right link is nil, or leads to the root of
		// the meganode a split created: search for the max instead.
		from = bytes.Clone(max)
		err := errRestartHop
		if next := v.RightLink(); !next.IsNil() {
			err = c.nextLeaf(ctx, t, next, from, &bufs)
		}
		if err != nil {
			if !errors.Is(err, errRestartHop) {
				return out[:start], err
			}
			if err := c.locateLeaf(ctx, t, from, &bufs); err != nil {
				return out[:start], err
			}
		}
	}
}

// moveTo continues the range at key.
func (rs *rangeState) moveTo(key []byte) {
	rs.last = key
	rs.req.Start, rs.req.StartUnbounded, rs.req.Ptr = key, false, 0
}

// collect lists the entries of extent leaf v from key from on, below end
// (nil: unbounded), at most max of them, skipping placeholders (locks of
// absent keys, docs/transactions.md §2.1), with their versions when
// versions is set. endReached reports that an entry at or past end was
// met.
func collect(v blink.View, from, end []byte, max int, versions bool, ents []scanEntry) ([]scanEntry, bool) {
	i, _ := v.Find(from)
	versioned := v.Versioned()
	for ; i < v.Count() && len(ents) < max; i++ {
		k := v.Key(i)
		if end != nil && bytes.Compare(k, end) >= 0 {
			return ents, true
		}
		var w blink.Word
		if versioned {
			if w = v.Word(i); w.Placeholder() {
				continue
			}
		}
		ext, n, crc := v.Extent(i)
		e := scanEntry{key: k, ext: ext, n: n, crc: crc}
		if versions {
			e.ver = w.Version()
		}
		ents = append(ents, e)
	}
	return ents, false
}

// locateLeaf finds the extent leaf covering key with a client-side search
// and copies it into bufs.leaf.
func (c *Client) locateLeaf(ctx context.Context, t *topology, key []byte, bufs *scanBufs) error {
	if len(key) > t.maxKey {
		// A bound longer than any key: start at the longest prefix.
		key = key[:t.maxKey]
	}
	op := searchOp{c: c, kind: opScan, key: key, t: t, sc: c.getScratch(t.nodeSize)}
	defer c.putScratch(op.sc)
	defer op.flushReads()
	if err := op.run(ctx); err != nil {
		return err
	}
	bufs.leaf = append(bufs.leaf[:0], op.sc.node...)
	return nil
}

// nextLeaf copies the leaf at p, reached by a right link, into bufs.leaf
// if it covers key; errRestartHop if it does not (reused or invalid).
func (c *Client) nextLeaf(ctx context.Context, t *topology, p blink.Ptr, key []byte, bufs *scanBufs) error {
	op := searchOp{c: c, kind: opScan, key: key, t: t, sc: c.getScratch(t.nodeSize)}
	defer c.putScratch(op.sc)
	defer op.flushReads()
	for hops := 0; hops < 64; hops++ {
		v, _, r, err := op.node(ctx, p, 0, 0, true)
		switch {
		case errors.Is(err, errRestart) && op.forceServer:
			return errNoReader // a failed read: let the server serve the page
		case err != nil:
			return err
		case r != blink.OK:
			c.countRetry(causeInvalid)
			return errRestartHop
		case !v.Extents() || v.Level() != 0:
			return errRestartHop // the root of another meganode: search
		}
		switch blink.Covers(v, key) {
		case blink.OK:
			bufs.leaf = append(bufs.leaf[:0], v...)
			return nil
		case blink.AboveMax:
			if p = v.RightLink(); !p.IsNil() {
				continue
			}
		}
		c.countRetry(causeOutOfRange)
		return errRestartHop
	}
	return errRestartHop
}

// fetchRecords reads the records of bufs.ents into bufs.recs, each region's
// together in vector reads within the provider's limits.
func (c *Client) fetchRecords(ctx context.Context, t *topology, bufs *scanBufs) error {
	total := 0
	for i := range bufs.ents {
		e := &bufs.ents[i]
		if e.n < 8 || e.n > blink.ExtentLen(t.maxKey, maxValueLen) {
			return wrapErr(ErrCorruption, fmt.Errorf("leaf entry for %q gives a record of %d bytes", e.key, e.n))
		}
		e.off = total
		total += (e.n + 7) &^ 7
	}
	if cap(bufs.recs) < total {
		bufs.recs = make([]byte, total)
	}
	bufs.recs = bufs.recs[:total]
	for i := 0; i < len(bufs.ents); {
		reg := t.regions[bufs.ents[i].ext.Region()]
		if reg == nil || reg.reader == nil {
			return errNoReader
		}
		caps := reg.reader.Caps()
		segs, bytes := bufs.segs[:0], 0
		j := i
		for ; j < len(bufs.ents); j++ {
			e := &bufs.ents[j]
			padded := (e.n + 7) &^ 7
			if e.ext.Region() != reg.id || len(segs) == max(caps.MaxSegments, 1) ||
				len(segs) > 0 && bytes+padded > caps.MaxReadLen {
				break
			}
			segs = append(segs, rdma.Segment{Off: e.ext.Offset(), Dst: bufs.recs[e.off : e.off+padded]})
			bytes += padded
		}
		bufs.segs = segs
		start := c.mono()
		err := reg.reader.ReadV(ctx, reg.rk, segs)
		end := c.mono()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			c.countRetry(readCause(err))
			c.kickRefresh()
			return errNoReader
		}
		if len(segs) == 1 {
			// One range: a read like any other for the selector.
			c.observeRead(reg.srv.est, start, end)
		}
		c.counters.reads.Add(1)
		c.counters.readBytes.Add(uint64(bytes))
		if k := c.cfg.TestingKnobs.AfterExtentRead; k != nil {
			for _, s := range segs {
				k(uint64(blink.MakePtr(reg.id, s.Off)), s.Dst)
			}
		}
		i = j
	}
	return nil
}
