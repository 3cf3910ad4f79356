package blink

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// megaRegion is a region of several meganodes sharing one extent area, as
// package meganode lays them out: what a meganode split needs (the new
// meganode shares the records of the old one).
type megaRegion struct {
	mem      []byte
	ext      *testExtents
	nodeSize int
	megaSize uint64
	slots    int

	legacy uint64 // non-zero: format meganodes versioned with this U

	mu    sync.Mutex
	trees []*Tree // by slot
}

func newTestRegion(tb testing.TB, nodeSize int, megaSize uint64, slots int) *megaRegion {
	tb.Helper()
	nodes := uint64(slots) * megaSize
	extent := uint64(8 << 20)
	r := &megaRegion{
		mem:      atomicmem.Alloc(int(nodes + extent)),
		ext:      &testExtents{next: nodes, end: nodes + extent, free: map[int][]uint64{}},
		nodeSize: nodeSize,
		megaSize: megaSize,
		slots:    slots,
		trees:    make([]*Tree, slots),
	}
	// Check every meganode still in use when the test ends.
	tb.Cleanup(func() {
		for _, tr := range r.all() {
			mustCheck(tb, tr)
		}
	})
	return r
}

// format makes a meganode in the lowest free slot.
func (r *megaRegion) format(tb testing.TB, level int, b Bounds) *Tree {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for slot, tr := range r.trees {
		if tr != nil {
			continue
		}
		tr, err := Format(r.mem, Config{Region: testRegion, Base: uint64(slot) * r.megaSize, Size: r.megaSize, Level: level, Bounds: b,
			Versioned: r.legacy != 0, Legacy: r.legacy}, r.ext, Options{NodeSize: r.nodeSize})
		if err != nil {
			tb.Fatalf("Format slot %d: %v", slot, err)
		}
		r.trees[slot] = tr
		return tr
	}
	tb.Fatal("test region full")
	return nil
}

func (r *megaRegion) all() []*Tree {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Tree
	for _, tr := range r.trees {
		if tr != nil {
			out = append(out, tr)
		}
	}
	return out
}

// treeOf returns the meganode holding the node at p, nil if none.
func (r *megaRegion) treeOf(p Ptr) *Tree {
	if p.IsNil() || p.Region() != testRegion {
		return nil
	}
	slot := int(p.Offset() / r.megaSize)
	r.mu.Lock()
	defer r.mu.Unlock()
	if slot >= len(r.trees) {
		return nil
	}
	return r.trees[slot]
}

// get searches key from meganode tr on, following the pointers that lead
// out of a meganode (right links after a split), as the server does.
func (r *megaRegion) get(key []byte, tr *Tree) ([]byte, error) {
	for hops := 0; hops < 64; hops++ {
		res, err := tr.Search(key)
		if err != nil {
			return nil, err
		}
		if !res.Next.IsNil() {
			if tr = r.treeOf(res.Next); tr == nil {
				return nil, fmt.Errorf("next %v is no meganode", res.Next)
			}
			continue
		}
		v, err := tr.Get(key, nil)
		if errors.Is(err, ErrKeyOutOfRange) {
			continue // linked since the search: search again
		}
		return v, err
	}
	return nil, fmt.Errorf("key %q: too many hops", key)
}

// child searches key in an inner meganode level from tr on and returns the
// child pointer of the entry covering it.
func (r *megaRegion) child(key []byte, tr *Tree) (Ptr, bool, error) {
	for hops := 0; hops < 64; hops++ {
		res, err := tr.Search(key)
		if err != nil {
			return 0, false, err
		}
		if res.Next.IsNil() {
			return res.Child, res.Found, nil
		}
		if tr = r.treeOf(res.Next); tr == nil {
			return 0, false, fmt.Errorf("next %v is no meganode", res.Next)
		}
	}
	return 0, false, fmt.Errorf("key %q: too many hops", key)
}

// oneSided searches key the way a one-sided reader does, with CopyNode and
// View.StepFor over the region's bytes, from the node (or meganode header)
// at start: right links are followed also out of a meganode, a copy that
// is invalid or does not cover the key restarts from restart's header. In
// a leaf meganode it returns the value (read with atomic loads and checked
// against the entry's CRC), in an inner one the child's pointer as 8
// little-endian bytes.
func (r *megaRegion) oneSided(key []byte, start, restart Ptr) (val []byte, found bool, err error) {
	ns := uint64(r.nodeSize)
	buf := atomicmem.Alloc(r.nodeSize)
	rootOf := func(h Ptr) (Ptr, error) {
		for i := 0; ; i++ {
			atomicmem.Load(buf, r.mem[h.Offset():h.Offset()+ns])
			hd, reason := DecodeHeader(buf)
			if reason == OK {
				return hd.Root, nil
			}
			if reason != Torn || i > 1<<20 {
				return 0, fmt.Errorf("header %v: %v", h, reason)
			}
		}
	}
	p := start
	if r.treeOf(p) != nil && r.treeOf(p).headerPtr() == p {
		if p, err = rootOf(p); err != nil {
			return nil, false, err
		}
	}
	for steps := 0; steps < 1<<16; steps++ {
		if p.IsNil() || p.Region() != testRegion || p.Offset()%ns != 0 || p.Offset()+ns > uint64(r.slots)*r.megaSize {
			return nil, false, fmt.Errorf("key %q: pointer %v outside the node area", key, p)
		}
		reason := CopyNode(buf, r.mem[p.Offset():p.Offset()+ns])
		if reason == Torn {
			runtime.Gosched() // a writer is publishing the node: let it finish
			continue
		}
		if reason != OK {
			if p, err = rootOf(restart); err != nil {
				return nil, false, err
			}
			continue
		}
		st := View(buf).StepFor(key)
		switch st.Covers {
		case AboveMax:
			if st.Next.IsNil() {
				return nil, false, fmt.Errorf("key %q above the max of %v, no right link", key, p)
			}
			p = st.Next
			continue
		case OutOfRange, Corrupt:
			if p, err = rootOf(restart); err != nil {
				return nil, false, err
			}
			continue
		}
		if !st.Next.IsNil() {
			p = st.Next
			continue
		}
		v := View(buf)
		if !v.Extents() {
			if v.Count() == 0 {
				return nil, false, nil
			}
			return le.AppendUint64(nil, uint64(v.Child(st.Index))), st.Found, nil
		}
		if !st.Found {
			return nil, false, nil
		}
		ext, n, crc := v.Extent(st.Index)
		rec := atomicmem.Alloc(roundUp8(n))
		atomicmem.Load(rec, r.mem[ext.Offset():ext.Offset()+uint64(len(rec))])
		k, val, err := DecodeExtent(rec[:n], crc)
		if errors.Is(err, ErrTorn) {
			continue // re-read the leaf and the record
		}
		if err != nil || !bytes.Equal(k, key) {
			return nil, false, fmt.Errorf("record %v: %v (key %q)", ext, err, k)
		}
		return bytes.Clone(val), true, nil
	}
	return nil, false, fmt.Errorf("key %q: no leaf reached", key)
}

// scan returns the keys of [lower, upper) from meganode start on, in order
// or in reverse, crossing meganodes as the server does: forward through
// Iter.Edge and Boundary; backward through Boundary when a positioning
// lies right of a meganode, and by searching again from start for the keys
// below a meganode's min (B-link trees have no left links).
func (r *megaRegion) scan(start *Tree, lower, upper []byte, reverse bool) ([]string, error) {
	var out []string
	tr := start
	for hops := 0; hops < 256; hops++ {
		it := tr.NewIter(&IterOptions{Lower: lower, Upper: upper})
		var ok bool
		if reverse {
			ok = it.Last()
		} else {
			ok = it.First()
		}
		for ; ok; ok = step(it, reverse) {
			out = append(out, string(it.Key()))
		}
		edge, more := it.Edge()
		b := it.Boundary()
		err := it.Error()
		it.Close()
		if err != nil {
			return out, err
		}
		if !more {
			if !reverse {
				return out, nil
			}
			h, err := tr.Header()
			if err != nil {
				return out, err
			}
			if h.Bounds.MinInf || lower != nil && bytes.Compare(lower, h.Bounds.Min) >= 0 {
				return out, nil
			}
			upper, tr = h.Bounds.Min, start
			continue
		}
		if b.IsNil() {
			return out, fmt.Errorf("iteration left %v at %q with no right link", tr.HeaderPtr(), edge)
		}
		if tr = r.treeOf(b); tr == nil {
			return out, fmt.Errorf("boundary %v is no meganode", b)
		}
		if reverse {
			upper = bytes.Clone(edge)
		} else {
			lower = bytes.Clone(edge)
		}
	}
	return out, errors.New("scan: too many hops")
}

// splitRun drives the split protocol of doc.go on x, step by step, calling
// at after each step with what exists so far (y nil before it is made).
// Batches are tiny so that every step has several rounds.
type splitRun struct {
	r          *megaRegion
	x, y       *Tree
	sep        []byte
	copyLeaves int
	freeNodes  int
	at         func(step string, s *splitRun)
}

// Steps at which splitRun calls at.
var splitSteps = []string{"chose", "froze", "copying", "copied", "linked", "freeing", "freed"}

func (s *splitRun) run(tb testing.TB) *Tree {
	tb.Helper()
	call := func(step string) {
		if s.at != nil {
			s.at(step, s)
		}
	}
	sep, err := s.x.SplitKey()
	if err != nil {
		tb.Fatalf("SplitKey: %v", err)
	}
	s.sep = sep
	call("chose")
	if err := s.x.Freeze(sep); err != nil {
		tb.Fatalf("Freeze: %v", err)
	}
	h, err := s.x.Header()
	if err != nil {
		tb.Fatal(err)
	}
	s.y = s.r.format(tb, h.Level, Bounds{Min: sep, Max: h.Bounds.Max, MaxInf: h.Bounds.MaxInf})
	if err := s.y.BeginCopy(s.x.Right()); err != nil {
		tb.Fatalf("BeginCopy: %v", err)
	}
	call("froze")
	from := sep
	for batch := 0; from != nil; batch++ {
		if from, err = CopyRight(s.x, s.y, from, max(s.copyLeaves, 1)); err != nil {
			tb.Fatalf("CopyRight batch %d: %v", batch, err)
		}
		if batch == 0 && from != nil {
			call("copying")
		}
	}
	call("copied")
	if err := s.x.LinkRight(s.y.Root()); err != nil {
		tb.Fatalf("LinkRight: %v", err)
	}
	call("linked")
	for batch := 0; ; batch++ {
		done, err := s.x.FreeRight(max(s.freeNodes, 1))
		if err != nil {
			tb.Fatalf("FreeRight: %v", err)
		}
		if done {
			break
		}
		if batch == 0 {
			call("freeing")
		}
	}
	if err := s.x.Thaw(); err != nil {
		tb.Fatalf("Thaw X: %v", err)
	}
	if err := s.y.Thaw(); err != nil {
		tb.Fatalf("Thaw Y: %v", err)
	}
	call("freed")
	mustCheck(tb, s.x)
	mustCheck(tb, s.y)
	mustCheckLinks(tb, s.x, s.y)
	return s.y
}

func mustCheckLinks(tb testing.TB, left, right *Tree) {
	tb.Helper()
	for _, v := range CheckLinks(left, right) {
		tb.Errorf("CheckLinks(%v, %v): %v", left.HeaderPtr(), right.HeaderPtr(), v)
	}
}

// fillTo puts padded keys key(i) for i = from, from+step, ... into tr until
// its fill reaches fill; it returns the keys put.
func fillTo(tb testing.TB, tr *Tree, fill float64, key func(i int) string, from, step int) []string {
	tb.Helper()
	var keys []string
	for i := from; tr.Usage().Fill() < fill; i += step {
		if i > 1<<20 {
			tb.Fatal("fill never reached")
		}
		k := key(i)
		mustPut(tb, tr, k, "v"+k)
		keys = append(keys, k)
	}
	return keys
}
