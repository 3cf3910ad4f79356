package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// applyLog records the records the apply path applied (TestingKnobs.OnApply).
type applyLog struct {
	mu   sync.Mutex
	recs []loggedRecord
}

type loggedRecord struct {
	kind  uint8
	phase rsm.SplitPhase // split records
	mega  blink.Ptr
	new   blink.Ptr // split records: Y or the new root; child records: the child
	key   string
	err   error
}

func (l *applyLog) record(_ uint64, rec []byte, err error) {
	r, derr := rsm.DecodeRecord(rec)
	if derr != nil {
		return
	}
	lr := loggedRecord{kind: r.Kind, mega: r.Meganode, key: string(r.Key), err: err}
	switch r.Kind {
	case rsm.KindPut, rsm.KindDelete:
		return // only the tree's structure
	case rsm.KindChild:
		lr.new = blink.Ptr(binary.LittleEndian.Uint64(r.Value))
	case rsm.KindSplit:
		b, _ := rsm.DecodeSplitBody(r.Value)
		lr.phase, lr.new = b.Phase, b.New
	}
	l.mu.Lock()
	l.recs = append(l.recs, lr)
	l.mu.Unlock()
}

func (l *applyLog) all() []loggedRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// checkSplits checks the logged splits: each that started ends, after its
// copy, link and free steps in that order and a separator (child record or
// new root) in between, each step applied without error (splits that were
// aborted have no link). It returns the number of completed splits.
func (l *applyLog) checkSplits(t testing.TB) int {
	t.Helper()
	type split struct {
		phases []rsm.SplitPhase
		parent bool
	}
	open := map[blink.Ptr]*split{} // by X
	done := 0
	for i, r := range l.all() {
		// A separator that meets a full, splitting or moved parent is
		// tried again (insertSeparatorLocked): those failures are the
		// protocol, not errors.
		retried := r.kind == rsm.KindChild && (errors.Is(r.err, blink.ErrNeedsSplit) || errors.Is(r.err, blink.ErrFrozen) || errors.Is(r.err, blink.ErrKeyOutOfRange)) ||
			r.kind == rsm.KindVersion && errors.Is(r.err, rsm.ErrVersionMode) // proposed again after the split
		if r.err != nil && !retried {
			t.Errorf("record %d (%v of %v): %v", i, r.phase, r.mega, r.err)
		}
		if r.kind == rsm.KindRegion || r.kind == rsm.KindRoot || r.kind == rsm.KindVersion {
			continue // the region's first record, the root's making, the start of versions
		}
		if r.kind == rsm.KindChild {
			for _, sp := range open {
				if len(sp.phases) > 0 && sp.phases[len(sp.phases)-1] == rsm.PhaseFree {
					sp.parent = true
				}
			}
			continue
		}
		sp := open[r.mega]
		switch r.phase {
		case rsm.PhaseStart:
			if sp != nil {
				t.Errorf("record %d: split of %v started twice", i, r.mega)
			}
			open[r.mega] = &split{phases: []rsm.SplitPhase{rsm.PhaseStart}}
			continue
		case rsm.PhaseRoot:
			// The new root is made by the split of a meganode of the
			// root's level: the one that last freed.
			for _, sp := range open {
				if len(sp.phases) > 0 && sp.phases[len(sp.phases)-1] == rsm.PhaseFree {
					sp.parent = true
				}
			}
			continue
		case rsm.PhaseAbort:
			if sp != nil && !slices.Contains(sp.phases, rsm.PhaseLink) {
				delete(open, r.mega)
			}
			continue
		}
		if sp == nil {
			t.Errorf("record %d: %v of %v outside a split", i, r.phase, r.mega)
			continue
		}
		last := sp.phases[len(sp.phases)-1]
		ok := r.phase == last && (last == rsm.PhaseCopy || last == rsm.PhaseFree) ||
			r.phase == last+1 && r.phase != rsm.PhaseRoot && r.phase != rsm.PhaseEnd ||
			r.phase == rsm.PhaseEnd && last == rsm.PhaseFree && sp.parent
		if !ok {
			t.Errorf("record %d: %v of %v after %v (parent %v)", i, r.phase, r.mega, last, sp.parent)
		}
		sp.phases = append(sp.phases, r.phase)
		if r.phase == rsm.PhaseEnd {
			delete(open, r.mega)
			done++
		}
	}
	for x, sp := range open {
		t.Errorf("split of %v never ended: %v", x, sp.phases)
	}
	return done
}

// waitSplitsIdle waits until no split runs or is queued, twice in a row.
func waitSplitsIdle(t testing.TB, s *Server) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	calm := 0
	for calm < 3 {
		if time.Now().After(deadline) {
			t.Fatal("splits never settled")
		}
		time.Sleep(20 * time.Millisecond)
		if len(s.splits.reqs) == 0 && s.splits.mu.TryLock() {
			s.splits.mu.Unlock()
			calm++
		} else {
			calm = 0
		}
	}
}

// oneSidedGet searches key the way a client-side reader does: it copies
// nodes out of the region's memory with 8-byte atomic loads (CheckCopy,
// View.StepFor), starting at the root pointer stored at offset 0 of the
// region, hops from meganode to meganode through leaf entries of inner
// meganodes and right links, and restarts from the root whenever a copy is
// invalid or does not cover the key (paper §2.3, §2.4).
func oneSidedGet(s *Server, key []byte) (string, bool, error) {
	return oneSidedFrom(s, key, 0)
}

// oneSidedFrom is oneSidedGet starting at meganode header start (0: the
// root pointer at offset 0 of the region); restarts go to the root.
func oneSidedFrom(s *Server, key []byte, start blink.Ptr) (string, bool, error) {
	mem := s.reps.own.sm.Region().Bytes()
	ns := uint64(s.reps.own.sm.NodeSize())
	buf := atomicmem.Alloc(s.reps.own.sm.NodeSize())
	read := func(p blink.Ptr) error {
		off := p.Offset()
		if p.Region() != s.reps.own.regionID || off%8 != 0 || off+ns > uint64(len(mem)) {
			return fmt.Errorf("pointer %v outside region %d", p, s.reps.own.regionID)
		}
		atomicmem.Load(buf, mem[off:off+ns])
		return nil
	}
	for restarts := 0; restarts < 1<<12; restarts++ {
		hp := s.reps.own.sm.Region().Root()
		if restarts == 0 && !start.IsNil() {
			hp = start
		}
	hop:
		for hops := 0; hops < 64; hops++ {
			var h blink.Header
			for {
				if err := read(hp); err != nil {
					return "", false, err
				}
				var r blink.Reason
				if h, r = blink.DecodeHeader(buf); r != blink.Torn {
					if r != blink.OK {
						break hop
					}
					break
				}
			}
			if !h.Bounds.MinInf && bytes.Compare(key, h.Bounds.Min) < 0 {
				break hop
			}
			p := h.Root
			torn := 0
			for steps := 0; ; steps++ {
				if steps-torn > 1<<12 || torn > 1<<20 {
					return "", false, fmt.Errorf("key %q: no leaf reached (%d torn copies)", key, torn)
				}
				if err := read(p); err != nil {
					return "", false, err
				}
				switch blink.CheckCopy(buf) {
				case blink.Torn:
					// A writer is publishing the node (and may have been
					// preempted doing it): let it finish.
					if torn++; torn%16 == 0 {
						runtime.Gosched()
					}
					continue
				case blink.OK:
				default:
					break hop
				}
				v := blink.View(buf)
				st := v.StepFor(key)
				switch st.Covers {
				case blink.AboveMax:
					if st.Next.IsNil() {
						break hop
					}
					p = st.Next
					continue
				case blink.OK:
				default:
					break hop
				}
				if !st.Next.IsNil() {
					p = st.Next
					continue
				}
				if !v.Extents() {
					if v.Count() == 0 {
						break hop
					}
					hp = v.Child(st.Index)
					continue hop
				}
				if !st.Found {
					return "", false, nil
				}
				ext, n, crc := v.Extent(st.Index)
				rec := atomicmem.Alloc((n + 7) &^ 7)
				off := ext.Offset()
				if off+uint64(len(rec)) > uint64(len(mem)) {
					return "", false, fmt.Errorf("record %v outside the region", ext)
				}
				atomicmem.Load(rec, mem[off:off+uint64(len(rec))])
				k, val, err := blink.DecodeExtent(rec[:n], crc)
				if errors.Is(err, blink.ErrTorn) {
					continue // the record changed: read the leaf again
				}
				if err != nil || !bytes.Equal(k, key) {
					return "", false, fmt.Errorf("record %v for %q: key %q, %v", ext, key, k, err)
				}
				return string(val), true, nil
			}
		}
	}
	return "", false, fmt.Errorf("key %q: too many restarts", key)
}

// scanKeys reads the keys of a range page by page over c (no t.Fatal: for
// goroutines), forward or in reverse.
func scanKeys(ctx context.Context, c *wire.Conn, reverse bool, limit uint32) ([]string, error) {
	req := wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Reverse: reverse, Limit: limit, KeysOnly: true}
	var out []string
	for pages := 0; pages < 100000; pages++ {
		f, err := c.CallMessage(ctx, wire.OpRange, &req)
		if err != nil {
			return out, err
		}
		var rep wire.RangeReply
		if err := rep.Decode(f.Body); err != nil {
			f.Release()
			return out, err
		}
		for _, kv := range rep.Pairs {
			out = append(out, string(kv.Key))
		}
		more, resume, next := rep.More, bytes.Clone(rep.Resume), rep.Next
		f.Release()
		if !more {
			return out, nil
		}
		if reverse {
			req.End, req.EndUnbounded = resume, false
		} else {
			req.Start, req.StartUnbounded = resume, false
		}
		req.Ptr = next
	}
	return out, errors.New("range does not end")
}

// mustServeAll checks that every key is found with value "v"+key by Get
// and by a one-sided search (every third also by a server-side Search from
// the root), and
// that range scans both ways return exactly the keys.
func mustServeAll(t testing.TB, s *Server, c *wire.Conn, keys []string) {
	t.Helper()
	for i, k := range keys {
		if v, ok := get(t, c, k); !ok || v != "v"+k {
			t.Fatalf("get %q = %q %v", k, v, ok)
		}
		if v, ok, err := oneSidedGet(s, []byte(k)); err != nil || !ok || v != "v"+k {
			t.Fatalf("one-sided get %q = %q %v %v", k, v, ok, err)
		}
		if i%3 != 0 {
			continue // a server-side Search hop for every third key
		}
		var rep wire.SearchReply
		if _, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Key: []byte(k), WantValue: true}, &rep); err != nil || rep.Kind != wire.SearchLeaf || !rep.Found || string(rep.Value) != "v"+k {
			t.Fatalf("search %q = %+v, %v", k, rep, err)
		}
	}
	want := slices.Sorted(slices.Values(keys))
	for _, reverse := range []bool{false, true} {
		got, err := scanKeys(ctxT(t), c, reverse, 97)
		if reverse {
			slices.Reverse(got)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("range (reverse %v): %d keys, %v; want %d", reverse, len(got), err, len(want))
		}
	}
}

// levels returns the number of meganode levels: the root's level + 1.
func levels(t testing.TB, s *Server) int {
	t.Helper()
	lm := s.servedMeganode(s.Root())
	if lm == nil {
		t.Fatalf("root %v is not a local meganode", s.Root())
	}
	return lm.Level + 1
}

// iterKeys returns the keys from lower on that blink iterators yield from
// meganode lm on, crossing to the meganodes to the right through
// Iter.Edge and Boundary (what the server's range does within a level).
func iterKeys(s *Server, lm *rsm.Meganode, lower []byte) ([]string, error) {
	var out []string
	for hops := 0; hops < maxHops; hops++ {
		it := lm.T.NewIter(&blink.IterOptions{Lower: lower})
		for ok := it.First(); ok; ok = it.Next() {
			out = append(out, string(it.Key()))
		}
		edge, more := it.Edge()
		b, err := it.Boundary(), it.Error()
		it.Close()
		if err != nil || !more {
			return out, err
		}
		if lm = s.servedMeganode(b); lm == nil {
			return out, fmt.Errorf("iteration left at %q for %v, no local meganode", edge, b)
		}
		lower = bytes.Clone(edge)
	}
	return out, errors.New("too many hops")
}
