package blink

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Meganode split scenarios on tiny meganodes: 64 nodes of 512 bytes, keys
// padded to 40 bytes (7 to a leaf). Paper §2.2: "It identifies a split key
// in a meganode X that divides it into two halves, X_left and X_right.
// X_right is locked for the duration of the split, but updates can continue
// in X_left. The server copies the nodes in X_right to a new local or
// remote meganode [...]. Then, it locks X_left long enough to update the
// right-link pointers of X_left along the split boundary to point to the
// root of the new meganode. [...] Lastly, the server invalidates the old
// X_right [...] and releases the lock on X_right's key range."

const (
	tinyNode     = 512
	tinyMeganode = 64 * tinyNode
)

func splitKey(i int) string { return pad(fmt.Sprintf("k%06d", i)) }

// scattered is a key order that fills leaves the way random inserts do.
func scattered(i int) string { return splitKey(i * 7919 % 100003) }

// mustFind checks that every key is found with its value from meganode
// from, server-style and one-sided.
func mustFind(tb testing.TB, r *megaRegion, from *Tree, keys []string) {
	tb.Helper()
	for _, k := range keys {
		v, err := r.get([]byte(k), from)
		if err != nil || string(v) != "v"+k {
			tb.Fatalf("get %q from %v: %q, %v", k, from.HeaderPtr(), v, err)
		}
		v, found, err := r.oneSided([]byte(k), from.HeaderPtr(), from.HeaderPtr())
		if err != nil || !found || string(v) != "v"+k {
			tb.Fatalf("one-sided %q from %v: %q %v, %v", k, from.HeaderPtr(), v, found, err)
		}
	}
}

// mustScan checks forward and reverse scans from meganode from against
// the sorted keys, crossing meganodes.
func mustScan(tb testing.TB, r *megaRegion, from *Tree, keys []string) {
	tb.Helper()
	want := slices.Sorted(slices.Values(keys))
	got, err := r.scan(from, nil, nil, false)
	if err != nil || !slices.Equal(got, want) {
		tb.Fatalf("forward scan from %v: %d keys (%v), want %d", from.HeaderPtr(), len(got), err, len(want))
	}
	slices.Reverse(want)
	got, err = r.scan(from, nil, nil, true)
	if err != nil || !slices.Equal(got, want) {
		tb.Fatalf("reverse scan from %v: %d keys (%v), want %d", from.HeaderPtr(), len(got), err, len(want))
	}
	// Bounded, across the middle of the keys.
	if len(keys) > 4 {
		lo, hi := want[len(want)*3/4], want[len(want)/4]
		var in []string
		for _, k := range want {
			if k >= lo && k < hi {
				in = append(in, k)
			}
		}
		got, err = r.scan(from, []byte(lo), []byte(hi), true)
		if err != nil || !slices.Equal(got, in) {
			tb.Fatalf("reverse scan [%q, %q): %d keys (%v), want %d", lo, hi, len(got), err, len(in))
		}
	}
}

func TestMeganodeSplitLeaf(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 4)
	x := r.format(t, 0, Full)
	keys := fillTo(t, x, 0.75, scattered, 0, 1)
	before := x.Usage()
	records := r.ext.inUse
	run := &splitRun{r: r, x: x, copyLeaves: 2, freeNodes: 3}
	y := run.run(t)
	sep := string(run.sep)
	t.Logf("%d keys, split at %q: X %d nodes before, %v and %v after", len(keys), sep, before.Nodes, x.Usage(), y.Usage())

	mustFind(t, r, x, keys)
	mustScan(t, r, x, keys)
	var right []string
	for _, k := range keys {
		own, other := x, y
		if k >= sep {
			own, other = y, x
			right = append(right, k)
		}
		mustGet(t, own, k, "v"+k)
		if _, err := other.Get([]byte(k), nil); !errors.Is(err, ErrKeyOutOfRange) {
			t.Fatalf("%q in the other meganode: %v", k, err)
		}
	}
	mustFind(t, r, y, right)
	if len(right) == 0 || len(right) == len(keys) {
		t.Fatalf("split moved %d of %d keys", len(right), len(keys))
	}
	if u := x.Usage(); u.Nodes >= before.Nodes || x.Fill() != u.Fill() {
		t.Fatalf("X uses %d nodes after the split, %d before", u.Nodes, before.Nodes)
	}
	if r.ext.inUse != records {
		t.Fatalf("%d records in use, %d before: the split must share, not copy or free them", r.ext.inUse, records)
	}
	// Headers: X = [-inf, sep), Y = [sep, +inf), one level.
	hx, _ := x.Header()
	hy, _ := y.Header()
	if !hx.Bounds.MinInf || hx.Bounds.MaxInf || string(hx.Bounds.Max) != sep || string(hy.Bounds.Min) != sep || !hy.Bounds.MaxInf || hy.Level != hx.Level {
		t.Fatalf("headers %+v and %+v", hx.Bounds, hy.Bounds)
	}
	if x.Right() != y.Root() || !y.Right().IsNil() {
		t.Fatalf("right links: X %v (Y root %v), Y %v", x.Right(), y.Root(), y.Right())
	}
	// After the split each meganode takes its own writes; Y owns the
	// records it took over (a delete frees one).
	if err := x.Put([]byte(splitKey(99999999)), []byte("v")); !errors.Is(err, ErrKeyOutOfRange) {
		t.Fatalf("put above sep into X: %v", err)
	}
	mustPut(t, y, right[0], "new")
	mustGet(t, y, right[0], "new")
	if ok, err := y.Delete([]byte(right[1])); !ok || err != nil {
		t.Fatalf("delete in Y: %v %v", ok, err)
	}
	if r.ext.inUse != records-1 {
		t.Fatalf("%d records in use after a delete in Y, want %d", r.ext.inUse, records-1)
	}
	if v := CheckLinks(y, x); len(v) == 0 {
		t.Fatal("CheckLinks(Y, X) found nothing wrong")
	}
}

// Split Y again, then X again: four meganodes of one level, linked left to
// right, every key found from the leftmost and scans crossing all of them.
func TestMeganodeSplitRepeated(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 6)
	x := r.format(t, 0, Full)
	keys := fillTo(t, x, 0.75, splitKey, 0, 2) // even keys
	run1 := &splitRun{r: r, x: x, copyLeaves: 3, freeNodes: 5}
	y := run1.run(t)

	n := len(keys)
	keys = append(keys, fillTo(t, y, 0.75, splitKey, 2*n, 2)...)
	run2 := &splitRun{r: r, x: y, copyLeaves: 1, freeNodes: 1}
	z := run2.run(t)

	var odd []string
	for i := 1; x.Usage().Fill() < 0.75; i += 2 {
		k := splitKey(i)
		if k >= string(run1.sep) {
			break
		}
		mustPut(t, x, k, "v"+k)
		odd = append(odd, k)
	}
	keys = append(keys, odd...)
	run3 := &splitRun{r: r, x: x, copyLeaves: 4, freeNodes: 2}
	w := run3.run(t)

	order := []*Tree{x, w, y, z}
	for i := 0; i+1 < len(order); i++ {
		mustCheckLinks(t, order[i], order[i+1])
	}
	if !z.Right().IsNil() {
		t.Fatalf("rightmost meganode links to %v", z.Right())
	}
	mustFind(t, r, x, keys)
	mustScan(t, r, x, keys)
	got, err := r.scan(w, []byte(run3.sep), nil, false)
	if err != nil || len(got) == 0 || got[0] < string(run3.sep) {
		t.Fatalf("scan from W: %d keys, %v", len(got), err)
	}
}

// An inner meganode (global level 1) splits the same way; its leaf entries
// are child meganode pointers.
func TestMeganodeSplitInner(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 4)
	x := r.format(t, 1, Full)
	child := func(i int) Ptr { return MakePtr(9, uint64(i+1)*4096) }
	var keys []string
	for i := 0; x.Usage().Fill() < 0.75; i++ {
		k := scattered(i)
		if err := x.InsertChild([]byte(k), child(i)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	run := &splitRun{r: r, x: x, copyLeaves: 2, freeNodes: 2}
	y := run.run(t)
	for i, k := range keys {
		for _, from := range []*Tree{x, y} {
			if from == y && k < string(run.sep) {
				continue
			}
			c, found, err := r.child([]byte(k), from)
			if err != nil || !found || c != child(i) {
				t.Fatalf("child of %q from %v: %v %v %v, want %v", k, from.HeaderPtr(), c, found, err, child(i))
			}
			v, found, err := r.oneSided([]byte(k), from.HeaderPtr(), from.HeaderPtr())
			if err != nil || !found || Ptr(le.Uint64(v)) != child(i) {
				t.Fatalf("one-sided child of %q: %x %v %v", k, v, found, err)
			}
		}
		// A key just above an entry's key is covered by that entry.
		c, found, err := r.child([]byte(k+"+"), x)
		if err != nil || found || c != child(i) {
			t.Fatalf("child covering %q+: %v %v %v", k, c, found, err)
		}
	}
	if got, ok := y.Header(); ok != nil || got.Level != 1 {
		t.Fatalf("Y header %v %v", got, ok)
	}
}

// TestMeganodeSplitSteps pauses the split after each step and checks, with
// writes going on below the split key:
//   - paper §2.4, Theorem 2: "Search operations can either continue or
//     backtrack correctly during and after the split": every key is found
//     from X's root, server-style (Search/Get following Next) and one-sided
//     (CopyNode + View.StepFor from X's header); from Y once it is copied;
//     scans in both directions return every key in order;
//   - "Insert and delete operations are blocked during the meganode split":
//     writes at or above the split key fail with ErrFrozen, in X and in Y,
//     until the split is done; writes below it go on;
//   - "an invalid node might be reused immediately and inserted into an
//     arbitrary location in X_left. [...] The min and max keys in each
//     node allows a client to detect this case and restart the search": a
//     one-sided search started at any old X_right node, after those nodes
//     were freed and reused, still ends at the right answer.
func TestMeganodeSplitSteps(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 4)
	x := r.format(t, 0, Full)
	keys := fillTo(t, x, 0.75, func(i int) string { return scattered(2 * i) }, 0, 1)
	var stale []Ptr // nodes of X_right, captured before they are freed
	left := 0       // left-half keys put during the split
	seen := map[string]bool{}
	run := &splitRun{r: r, x: x, copyLeaves: 2, freeNodes: 2}
	run.at = func(step string, s *splitRun) {
		seen[step] = true
		sep := string(s.sep)
		mustFind(t, r, x, keys)
		mustScan(t, r, x, keys)
		mustCheck(t, x)
		if s.y != nil {
			mustCheck(t, s.y)
		}
		var right []string
		for _, k := range keys {
			if k >= sep {
				right = append(right, k)
			}
		}
		switch step {
		case "copied", "linked", "freeing", "freed":
			mustFind(t, r, s.y, right)
		}
		if step == "copied" {
			stale = rightHalfNodes(t, x, s.sep)
		}
		if step == "chose" {
			return
		}
		// Writes at or above sep: frozen until the end, then in Y.
		k := pad(sep[:len("k000000")] + "x")
		if step != "freed" {
			if err := x.Put([]byte(k), []byte("v")); !errors.Is(err, ErrFrozen) {
				t.Fatalf("%s: put %q into X: %v", step, k, err)
			}
			if _, err := x.Delete([]byte(right[0])); !errors.Is(err, ErrFrozen) {
				t.Fatalf("%s: delete %q from X: %v", step, right[0], err)
			}
			if err := s.y.Put([]byte(k), []byte("v")); !errors.Is(err, ErrFrozen) {
				t.Fatalf("%s: put %q into Y: %v", step, k, err)
			}
		} else {
			if err := x.Put([]byte(k), []byte("v"+k)); !errors.Is(err, ErrKeyOutOfRange) {
				t.Fatalf("%s: put %q into X: %v", step, k, err)
			}
			mustPut(t, s.y, k, "v"+k)
			keys = append(keys, k)
		}
		// Writes below sep go on in X.
		for range 3 {
			k := scattered(2*(len(keys)+left) + 1)
			if k >= sep {
				left++
				continue
			}
			mustPut(t, x, k, "v"+k)
			keys = append(keys, k)
			left++
		}
	}
	y := run.run(t)
	for _, step := range splitSteps {
		if !seen[step] {
			t.Errorf("step %s never paused", step)
		}
	}
	// Reuse the freed nodes with writes below sep, then search from every
	// stale X_right pointer.
	sep := string(run.sep)
	for i := 0; x.Usage().Fill() < 0.7; i++ {
		k := scattered(1000 + 2*i + 1)
		if k >= sep {
			continue
		}
		mustPut(t, x, k, "v"+k)
		keys = append(keys, k)
	}
	reused := 0
	for _, p := range stale {
		if x.nodeBytes(p).valid() {
			reused++
		}
		for _, k := range keys {
			if k < sep {
				continue
			}
			v, found, err := r.oneSided([]byte(k), p, x.HeaderPtr())
			if err != nil || !found || string(v) != "v"+k {
				t.Fatalf("one-sided %q from stale %v: %q %v %v", k, p, v, found, err)
			}
		}
	}
	if reused == 0 {
		t.Fatalf("none of %d freed X_right nodes was reused", len(stale))
	}
	t.Logf("%d stale X_right nodes, %d reused by X_left; %d keys", len(stale), reused, len(keys))
	mustFind(t, r, x, keys)
	mustCheckLinks(t, x, y)
}

// rightHalfNodes lists the nodes of tr whose range starts at or above sep.
func rightHalfNodes(tb testing.TB, tr *Tree, sep []byte) []Ptr {
	tb.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []Ptr
	p := Ptr(tr.mu.hdr.u64(hdrRoot))
	for {
		first := p
		for q := p; tr.local(q); q = tr.nodeBytes(q).rightLink() {
			n := tr.nodeBytes(q)
			if !n.minInf() && bytes.Compare(n.minKey(), sep) >= 0 {
				out = append(out, q)
			}
		}
		n := tr.nodeBytes(first)
		if n.level() == 0 {
			return out
		}
		p = n.child(0)
	}
}

// Writes to the left half go on during a batched copy (the split waits at
// its steps until they did); writes to the right half fail with ErrFrozen
// until the split is done and then land in Y; lock-free readers see every
// acknowledged key throughout.
func TestMeganodeSplitConcurrent(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 4)
	x := r.format(t, 0, Full)
	keys := fillTo(t, x, 0.6, func(i int) string { return scattered(3 * i) }, 0, 1)
	sep, err := x.SplitKey()
	if err != nil {
		t.Fatal(err)
	}

	var acked sync.Map // key -> true, every key whose put returned nil
	for _, k := range keys {
		acked.Store(k, true)
	}
	start, done := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var frozen, leftPuts atomic.Int64
	var idle atomic.Bool // the writer has nothing left to put until the end

	// The writer, once X is frozen: new keys on both sides of sep until
	// X_left is full and 40 right keys wait; the frozen ones are put again
	// (routed afresh) once the split is done.
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		var pending []string
		leftFull := false
		for i := 0; ; i++ {
			select {
			case <-done:
				for _, k := range pending {
					if err := r.put([]byte(k), x); err != nil {
						t.Errorf("put %q after the split: %v", k, err)
						return
					}
					acked.Store(k, true)
				}
				return
			default:
			}
			k := scattered(3*(len(keys)+i) + 1)
			if k < string(sep) && leftFull || k >= string(sep) && len(pending) >= 40 {
				if leftFull && len(pending) >= 40 {
					idle.Store(true)
					<-done
				}
				continue
			}
			err := r.put([]byte(k), x)
			switch {
			case err == nil:
				acked.Store(k, true)
				if k < string(sep) {
					leftPuts.Add(1)
				} else if x.Split().Source {
					// Still frozen when the put returned: the freeze leaked.
					// (A put that ends after the thaw, just before done is
					// closed, is routed to Y and rightly succeeds.)
					t.Errorf("put %q above the split key %q while frozen", k, sep)
				}
			case errors.Is(err, ErrFrozen):
				frozen.Add(1)
				pending = append(pending, k)
			case errors.Is(err, ErrNeedsSplit):
				leftFull = true
			default:
				t.Errorf("put %q: %v", k, err)
				return
			}
			runtime.Gosched()
		}
	}()
	// Readers: every acknowledged key, server-style and one-sided.
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				var ks []string
				acked.Range(func(k, _ any) bool { ks = append(ks, k.(string)); return true })
				sort.Strings(ks)
				for i := g; i < len(ks); i += 2 {
					k := ks[i]
					v, err := r.get([]byte(k), x)
					if err != nil || string(v) != "v"+k {
						t.Errorf("get %q: %q, %v", k, v, err)
						return
					}
					if _, found, err := r.oneSided([]byte(k), x.HeaderPtr(), x.HeaderPtr()); err != nil || !found {
						t.Errorf("one-sided %q: %v %v", k, found, err)
						return
					}
				}
			}
		}()
	}
	// waitFor lets the writer make progress while the split holds no lock.
	waitFor := func(step string, cond func() bool) {
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: writer made no progress (%d left puts, %d frozen)", step, leftPuts.Load(), frozen.Load())
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	run := &splitRun{r: r, x: x, copyLeaves: 1, freeNodes: 1, at: func(step string, s *splitRun) {
		switch step {
		case "froze":
			close(start)
			waitFor(step, func() bool { return leftPuts.Load() >= 5 && frozen.Load() >= 5 || idle.Load() })
		case "copying":
			l, f := leftPuts.Load(), frozen.Load()
			waitFor(step, func() bool { return leftPuts.Load() > l || frozen.Load() > f+2 || idle.Load() })
		}
	}}
	run.run(t)
	close(done)
	wg.Wait()
	if !bytes.Equal(run.sep, sep) {
		t.Fatalf("split key changed from %q to %q", sep, run.sep)
	}
	var all []string
	acked.Range(func(k, _ any) bool { all = append(all, k.(string)); return true })
	mustFind(t, r, x, all)
	mustScan(t, r, x, all)
	t.Logf("%d keys, %d put below sep during the split, %d frozen puts retried after it", len(all), leftPuts.Load(), frozen.Load())
}

// put writes key (value "v"+key) into the meganode that holds it, found
// from meganode from on.
func (r *megaRegion) put(key []byte, from *Tree) error {
	tr := from
	for hops := 0; hops < 64; hops++ {
		res, err := tr.Search(key)
		if err != nil {
			return err
		}
		if !res.Next.IsNil() {
			if tr = r.treeOf(res.Next); tr == nil {
				return fmt.Errorf("next %v is no meganode", res.Next)
			}
			continue
		}
		err = tr.Put(key, append([]byte("v"), key...))
		if errors.Is(err, ErrKeyOutOfRange) {
			continue // linked since the search
		}
		return err
	}
	return fmt.Errorf("key %q: too many hops", key)
}

func TestMeganodeSplitMisuse(t *testing.T) {
	r := newTestRegion(t, tinyNode, tinyMeganode, 4)
	x := r.format(t, 0, Full)
	mustPut(t, x, "a", "1")
	mustPut(t, x, "b", "2")
	if _, err := x.SplitKey(); !errors.Is(err, ErrSplitTooSmall) {
		t.Fatalf("SplitKey of a one-leaf tree: %v", err)
	}
	keys := fillTo(t, x, 0.5, scattered, 0, 1)
	sep, err := x.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	// Not a leaf boundary.
	if err := x.Freeze([]byte(keys[0] + "~")); !errors.Is(err, ErrSplitState) && !errors.Is(err, ErrKeyOutOfRange) {
		t.Fatalf("Freeze off a boundary: %v", err)
	}
	for name, step := range map[string]func() error{
		"link before freeze": func() error { return x.LinkRight(MakePtr(testRegion, 3*tinyMeganode)) },
		"free before link":   func() error { _, err := x.FreeRight(1); return err },
		"thaw before freeze": x.Thaw,
		"frozen entries":     func() error { _, _, err := x.FrozenEntries(sep, 1, nil); return err },
		"append to a source": func() error { return x.AppendEntries([]Entry{{Key: []byte("z")}}) },
	} {
		if err := step(); !errors.Is(err, ErrSplitState) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := x.Freeze(sep); err != nil {
		t.Fatal(err)
	}
	if err := x.Freeze(sep); !errors.Is(err, ErrSplitState) {
		t.Fatalf("second Freeze: %v", err)
	}
	if _, err := x.SplitKey(); !errors.Is(err, ErrSplitState) {
		t.Fatalf("SplitKey while splitting: %v", err)
	}
	if err := x.LinkRight(x.Root()); !errors.Is(err, ErrSplitState) {
		t.Fatalf("link to a node of X itself: %v", err)
	}
	y := r.format(t, 0, Bounds{Min: sep, MaxInf: true})
	if err := y.BeginCopy(y.Root()); !errors.Is(err, ErrSplitState) {
		t.Fatalf("BeginCopy linking into itself: %v", err)
	}
	if err := y.BeginCopy(0); err != nil {
		t.Fatal(err)
	}
	if _, err := CopyRight(x, y, sep, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := CopyRight(x, y, sep, 1000); !errors.Is(err, ErrSplitState) {
		t.Fatalf("copying twice: %v", err)
	}
	// Abort before the link: X is whole again, Y is dropped.
	if err := x.Thaw(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.trees[int(y.HeaderPtr().Offset()/r.megaSize)] = nil
	r.mu.Unlock()
	mustFind(t, r, x, keys)
	mustPut(t, x, string(sep)+"z", "v")
}

// Writes below the split key during the freeze can split X's root and grow
// its height: the boundary then runs through a root that straddles the
// split key, which LinkRight cuts (its entries below sep stay, max = sep).
func TestMeganodeSplitRootGrowsDuringFreeze(t *testing.T) {
	r := newTestRegion(t, tinyNode, 256*tinyNode, 3)
	x := r.format(t, 0, Full)
	var keys []string
	for i := 0; x.Usage().Height < 2 || len(keys) < 40; i++ {
		k := splitKey(2 * i)
		mustPut(t, x, k, "v"+k)
		keys = append(keys, k)
	}
	sep, err := x.SplitKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Freeze(sep); err != nil {
		t.Fatal(err)
	}
	h0 := x.Usage().Height
	// Odd keys below sep, many per gap, until the root has split.
	for i := 1; x.Usage().Height == h0; i++ {
		k := pad(fmt.Sprintf("%s%04d", splitKey(2 * (i % 20))[:7], i))
		if k >= string(sep) {
			continue
		}
		mustPut(t, x, k, "v"+k)
		keys = append(keys, k)
		if i > 20000 {
			t.Fatal("root never split")
		}
	}
	h, _ := x.Header()
	y := r.format(t, 0, Bounds{Min: sep, MaxInf: true})
	if err := y.BeginCopy(x.Right()); err != nil {
		t.Fatal(err)
	}
	for from := sep; from != nil; {
		if from, err = CopyRight(x, y, from, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.LinkRight(y.Root()); err != nil {
		t.Fatal(err)
	}
	mustFind(t, r, x, keys)
	for done := false; !done; {
		if done, err = x.FreeRight(4); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(x.Thaw(), y.Thaw()); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, x)
	mustCheck(t, y)
	mustCheckLinks(t, x, y)
	mustFind(t, r, x, keys)
	mustScan(t, r, x, keys)
	rn := x.nodeBytes(x.Root())
	if string(rn.maxKey()) != string(sep) || rn.level() != h.Height-1 {
		t.Fatalf("X's root after the split: level %d max %q, want level %d max %q", rn.level(), rn.maxKey(), h.Height-1, sep)
	}
	if x.NeedsSplit() || y.NeedsSplit() {
		t.Fatal("a half still needs a split")
	}
	t.Logf("height %d -> %d during the freeze; %d keys", h0, h.Height, len(keys))
}
