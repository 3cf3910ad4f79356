package blink

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
)

// Torn reads: TestingKnobs.MidNodeWrite stops the writer in the middle of
// publishing a node (head and tail already odd, half of the body stored)
// while the test copies that node.
//
// Paper §2.3: "To update a node, the server increments both version numbers
// to the same odd value, performs the update, then increments both numbers
// to the same even value. [...] If the RDMA read of a node is interleaved
// with the server's modification of that node, it will either see
// mismatched version numbers or the same odd value, indicating that the read
// must be retried."
//
// The pauses synchronise through channels, so these tests are free of data
// races by construction (the copies run while the writer is blocked).

const tornCopies = 1000

// tornKey is a 40-byte key: a 512-byte leaf holds exactly 7 of them.
func tornKey(i int) []byte { return []byte(fmt.Sprintf("k%03d", i) + strings.Repeat(".", 36)) }

func tornValue(i int) []byte { return []byte(fmt.Sprintf("value of %d", i)) }

// pauser is a MidNodeWrite hook that blocks the writer in chosen publishes
// of the next operation until the test resumes it.
type pauser struct {
	calls   atomic.Int64 // publishes since arm
	pauseAt atomic.Int64 // bit n set: pause in publish number n (1-based)
	paused  chan pauseEvent
	release chan struct{}
	stop    chan struct{}
}

type pauseEvent struct {
	call int64
	p    Ptr
}

func newPauser(t *testing.T, tr *Tree) *pauser {
	pz := &pauser{paused: make(chan pauseEvent), release: make(chan struct{}), stop: make(chan struct{})}
	tr.SetTestingKnobs(TestingKnobs{MidNodeWrite: pz.hook})
	// Runs before newTestTree's Check (cleanups run last first): a writer
	// left paused by a failed test must let go of the lock.
	t.Cleanup(func() { close(pz.stop) })
	return pz
}

func (pz *pauser) hook(p Ptr) {
	n := pz.calls.Add(1)
	if n >= 63 || pz.pauseAt.Load()&(1<<n) == 0 {
		return
	}
	select {
	case pz.paused <- pauseEvent{n, p}:
	case <-pz.stop:
		return
	}
	select {
	case <-pz.release:
	case <-pz.stop:
	}
}

// arm makes the next writer operation pause in the given publishes.
func (pz *pauser) arm(calls ...int) {
	var mask int64
	for _, c := range calls {
		mask |= 1 << c
	}
	pz.calls.Store(0)
	pz.pauseAt.Store(mask)
}

// waitPause returns the next pause of the writer, whose result arrives on
// done.
func (pz *pauser) waitPause(t *testing.T, done <-chan error) pauseEvent {
	t.Helper()
	select {
	case ev := <-pz.paused:
		return ev
	case err := <-done:
		t.Fatalf("writer finished without pausing: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("writer did not pause within a minute")
	}
	return pauseEvent{}
}

func (pz *pauser) resume() { pz.release <- struct{}{} }

// goWrite runs a writer operation in its own goroutine.
func goWrite(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

func waitWriter(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("writer: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("writer did not finish within a minute of its release")
	}
}

// assertTorn copies the node at p tornCopies times with CopyNode and, with a
// key, as many times with CopyNodeFor: every copy must be Torn, and the live
// versions must be "the same odd value".
func assertTorn(t *testing.T, tr *Tree, p Ptr, key []byte) {
	t.Helper()
	buf := node(atomicmem.Alloc(tr.NodeSize()))
	src := tr.nodeBytes(p)
	torn, tornFor := 0, 0
	for i := 0; i < tornCopies; i++ {
		if r := CopyNode(buf, src); r == Torn {
			torn++
		}
		if key != nil {
			if r := CopyNodeFor(buf, src, key); r == Torn {
				tornFor++
			}
		}
	}
	if torn != tornCopies {
		t.Errorf("node %v mid-publish: %d of %d CopyNode copies Torn", p, torn, tornCopies)
	}
	if key != nil && tornFor != tornCopies {
		t.Errorf("node %v mid-publish: %d of %d CopyNodeFor(%.4q) copies Torn", p, tornFor, tornCopies, key)
	}
	if h, tl := buf.headVersion(), buf.tailVersion(); h != tl || h&1 == 0 {
		t.Errorf("node %v mid-publish: versions %d/%d, want the same odd value", p, h, tl)
	}
	if err := CheckCopy(buf).Err(); !errors.Is(err, ErrTorn) {
		t.Errorf("node %v mid-publish: CheckCopy error %v, want ErrTorn", p, err)
	}
}

// copyOK copies the node at p and requires the copy to be accepted.
func copyOK(t *testing.T, tr *Tree, p Ptr) node {
	t.Helper()
	buf := node(atomicmem.Alloc(tr.NodeSize()))
	if r := CopyNode(buf, tr.nodeBytes(p)); r != OK {
		t.Fatalf("node %v at rest: copy %v, want ok", p, r)
	}
	return buf
}

func nodeKeyList(n node) []string {
	var ks []string
	for i := 0; i < n.count(); i++ {
		ks = append(ks, strings.TrimRight(string(n.key(i)), "."))
	}
	return ks
}

// leafValue reads key's record through an accepted leaf copy.
func leafValue(t *testing.T, tr *Tree, n node, key []byte) string {
	t.Helper()
	i, found := n.lowerBound(key)
	if !found {
		t.Fatalf("key %.4q not in leaf copy %v", key, nodeKeyList(n))
	}
	ext, l, crc := n.extent(i)
	rec := make([]byte, roundUp8(l))
	atomicmem.LoadTo(rec, tr.mem[ext.Offset():ext.Offset()+uint64(len(rec))])
	k, v, err := DecodeExtent(rec[:l], crc)
	if err != nil || !bytes.Equal(k, key) {
		t.Fatalf("record of %.4q: key %.4q, %v", key, k, err)
	}
	return string(v)
}

// mustGetAll requires Get of keys[i] to return tornValue(i) for every i in
// idx, from this goroutine while the writer is paused.
func mustGetAll(t *testing.T, tr *Tree, idx []int) {
	t.Helper()
	for _, i := range idx {
		got, err := tr.Get(tornKey(i), nil)
		if err != nil || !bytes.Equal(got, tornValue(i)) {
			t.Fatalf("Get(%.4q) while the writer is paused = %q, %v; want %q", tornKey(i), got, err, tornValue(i))
		}
	}
}

func putTorn(t *testing.T, tr *Tree, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if err := tr.Put(tornKey(i), tornValue(i)); err != nil {
			t.Fatalf("Put(%.4q): %v", tornKey(i), err)
		}
	}
}

func TestTornLeafUpdate(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	putTorn(t, tr, 10, 20, 30, 40)
	pz := newPauser(t, tr)
	leaf := tr.Root()
	v0 := copyOK(t, tr, leaf).headVersion()

	pz.arm(1)
	done := goWrite(func() error { return tr.Put(tornKey(20), []byte("updated")) })
	ev := pz.waitPause(t, done)
	if ev.p != leaf {
		t.Fatalf("paused in node %v, want the leaf %v", ev.p, leaf)
	}
	assertTorn(t, tr, leaf, tornKey(20))
	pz.resume()
	waitWriter(t, done)

	n := copyOK(t, tr, leaf)
	if n.headVersion() != v0+2 {
		t.Errorf("leaf version %d after one publish, want %d", n.headVersion(), v0+2)
	}
	if got := leafValue(t, tr, n, tornKey(20)); got != "updated" {
		t.Errorf("after the update the copy shows %q", got)
	}
	if got := leafValue(t, tr, n, tornKey(30)); got != string(tornValue(30)) {
		t.Errorf("untouched key shows %q", got)
	}
	if c := pz.calls.Load(); c != 1 {
		t.Errorf("an update published %d nodes, want 1", c)
	}
}

func TestTornLeafInsert(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	putTorn(t, tr, 10, 20, 30, 40)
	pz := newPauser(t, tr)
	leaf := tr.Root()

	pz.arm(1)
	done := goWrite(func() error { return tr.Put(tornKey(25), tornValue(25)) })
	if ev := pz.waitPause(t, done); ev.p != leaf {
		t.Fatalf("paused in node %v, want the leaf %v", ev.p, leaf)
	}
	assertTorn(t, tr, leaf, tornKey(25))
	assertTorn(t, tr, leaf, tornKey(10))
	pz.resume()
	waitWriter(t, done)

	n := copyOK(t, tr, leaf)
	if got, want := strings.Join(nodeKeyList(n), " "), "k010 k020 k025 k030 k040"; got != want {
		t.Errorf("leaf after the insert holds %s, want %s", got, want)
	}
	if got := leafValue(t, tr, n, tornKey(25)); got != string(tornValue(25)) {
		t.Errorf("inserted key shows %q", got)
	}
}

// TestTornSplit pauses in each publish of a leaf split below an inner root:
// the new right sibling, the left (split) node, the parent, and the header
// (the allocation changed it).
//
// Paper §2.2: "If an insertion causes a leaf node L to split (because it is
// full), we lock L long enough to create a new node L' containing roughly
// half of L's contents, and set L's right-link pointer to L'."
func TestTornSplit(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	// 8 keys split the root leaf in two; 2 more fill the right leaf (its
	// 40-byte min key leaves room for 6 entries).
	all := []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	putTorn(t, tr, all...)
	if tr.height() != 2 {
		t.Fatalf("height %d, want 2", tr.height())
	}
	root := tr.Root()
	leaf := copyOK(t, tr, root).child(1)
	old := copyOK(t, tr, leaf)
	if got := strings.Join(nodeKeyList(old), " "); got != "k050 k060 k070 k080 k090 k100" || old.fits(40) {
		t.Fatalf("right leaf holds %s (fits another: %v), want k050..k100 and full", got, old.fits(40))
	}
	leftLeaf := []int{10, 20, 30, 40} // keys of the other leaf
	pz := newPauser(t, tr)

	pz.arm(1, 2, 3, 4)
	done := goWrite(func() error { return tr.Put(tornKey(110), tornValue(110)) })

	// 1: the new right sibling L', not reachable yet.
	ev := pz.waitPause(t, done)
	right := ev.p
	if ev.call != 1 || right == leaf || right == root || !tr.local(right) {
		t.Fatalf("publish 1 in node %v (leaf %v, root %v), want a new node", right, leaf, root)
	}
	assertTorn(t, tr, right, tornKey(110))
	if got := copyOK(t, tr, leaf); !bytes.Equal(got[8:], old[8:]) {
		t.Errorf("the leaf changed before its right sibling was complete")
	}
	mustGetAll(t, tr, all) // nothing reachable is being written
	pz.resume()

	// 2: the left node L, getting its lower half, max and right link.
	ev = pz.waitPause(t, done)
	if ev.call != 2 || ev.p != leaf {
		t.Fatalf("publish %d in node %v, want 2 in the split leaf %v", ev.call, ev.p, leaf)
	}
	assertTorn(t, tr, leaf, tornKey(110))
	assertTorn(t, tr, leaf, tornKey(50))
	r := copyOK(t, tr, right)
	sep := r.minKey()
	if got, want := strings.Join(nodeKeyList(r), " "), "k080 k090 k100 k110"; got != want {
		t.Errorf("right sibling holds %s, want %s", got, want)
	}
	if !r.maxInf() || r.rightLink() != old.rightLink() {
		t.Errorf("right sibling: max +inf %v, right link %v; want the old leaf's (+inf, %v)", r.maxInf(), r.rightLink(), old.rightLink())
	}
	mustGetAll(t, tr, leftLeaf)
	pz.resume()

	// 3: the parent, getting the separator (a decoupled insert).
	ev = pz.waitPause(t, done)
	if ev.call != 3 || ev.p != root {
		t.Fatalf("publish %d in node %v, want 3 in the parent %v", ev.call, ev.p, root)
	}
	assertTorn(t, tr, root, tornKey(10))
	l := copyOK(t, tr, leaf)
	if !bytes.Equal(l.maxKey(), sep) || l.maxInf() || l.rightLink() != right {
		t.Errorf("split leaf: max %.4q link %v, want max %.4q link %v", l.maxKey(), l.rightLink(), sep, right)
	}
	if got, want := strings.Join(nodeKeyList(l), " "), "k050 k060 k070"; got != want {
		t.Errorf("split leaf holds %s, want %s", got, want)
	}
	pz.resume()

	// 4: the header (the node allocation changed it).
	ev = pz.waitPause(t, done)
	if ev.call != 4 || ev.p != tr.HeaderPtr() {
		t.Fatalf("publish %d in node %v, want 4 in the header %v", ev.call, ev.p, tr.HeaderPtr())
	}
	assertTornHeader(t, tr)
	mustGetAll(t, tr, append(all, 110))
	pz.resume()
	waitWriter(t, done)

	p := copyOK(t, tr, root)
	if got, want := p.count(), 3; got != want || p.child(2) != right || !bytes.Equal(p.key(2), sep) {
		t.Errorf("parent: %d entries, last %.4q → %v; want %d, last %.4q → %v", got, p.key(p.count()-1), p.child(p.count()-1), want, sep, right)
	}
	mustGetAll(t, tr, append(all, 110))
}

// assertTornHeader is assertTorn for the meganode header, which one-sided
// readers copy and check with DecodeHeader (CopyNode accepts tree nodes
// only). Lock-free local readers give up with ErrRestart in Header.
func assertTornHeader(t *testing.T, tr *Tree) {
	t.Helper()
	assertTorn(t, tr, tr.HeaderPtr(), nil)
	buf := atomicmem.Alloc(tr.NodeSize())
	torn := 0
	for i := 0; i < tornCopies; i++ {
		atomicmem.Load(buf, tr.nodeBytes(tr.HeaderPtr()))
		if _, r := DecodeHeader(buf); r == Torn {
			torn++
		}
	}
	if torn != tornCopies {
		t.Errorf("header mid-publish: %d of %d DecodeHeader copies Torn", torn, tornCopies)
	}
}

// copyHeader copies the header and requires DecodeHeader to accept it.
func copyHeader(t *testing.T, tr *Tree) Header {
	t.Helper()
	buf := atomicmem.Alloc(tr.NodeSize())
	atomicmem.Load(buf, tr.nodeBytes(tr.HeaderPtr()))
	h, r := DecodeHeader(buf)
	if r != OK {
		t.Fatalf("header at rest: DecodeHeader %v, want ok", r)
	}
	if r := CheckCopy(buf); r != Invalid {
		t.Fatalf("header at rest: CheckCopy %v, want invalid (not a tree node)", r)
	}
	return h
}

// TestTornRootGrowth pauses in each publish of a split of the root leaf:
// the new right sibling, the left node, the new root, and the header whose
// root pointer changes. While the new root is being written, searches still
// start at the old root and reach the new sibling through its right link.
//
// Paper §2.2: "The right link ensures that concurrent searches can reach L'
// (guided by the max key of L) even if it has no parent yet."
func TestTornRootGrowth(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, maxRestarts: 1000})
	all := []int{10, 20, 30, 40, 50, 60, 70}
	putTorn(t, tr, all...)
	leaf := tr.Root()
	if old := copyOK(t, tr, leaf); old.count() != 7 || old.fits(40) {
		t.Fatalf("root leaf holds %v, want 7 keys and full", nodeKeyList(old))
	}
	h0 := copyHeader(t, tr)
	pz := newPauser(t, tr)

	pz.arm(1, 2, 3, 4)
	done := goWrite(func() error { return tr.Put(tornKey(80), tornValue(80)) })

	ev := pz.waitPause(t, done)
	right := ev.p
	if right == leaf || right == tr.HeaderPtr() {
		t.Fatalf("publish 1 in node %v, want a new right sibling", right)
	}
	assertTorn(t, tr, right, tornKey(80))
	mustGetAll(t, tr, all)
	pz.resume()

	ev = pz.waitPause(t, done)
	if ev.p != leaf {
		t.Fatalf("publish 2 in node %v, want the old root leaf %v", ev.p, leaf)
	}
	assertTorn(t, tr, leaf, tornKey(10))
	if r := copyOK(t, tr, right); strings.Join(nodeKeyList(r), " ") != "k050 k060 k070 k080" {
		t.Errorf("right sibling holds %v", nodeKeyList(r))
	}
	pz.resume()

	ev = pz.waitPause(t, done)
	newRoot := ev.p
	if newRoot == leaf || newRoot == right || newRoot == tr.HeaderPtr() {
		t.Fatalf("publish 3 in node %v, want a new root", newRoot)
	}
	assertTorn(t, tr, newRoot, tornKey(10))
	if tr.Root() != leaf {
		t.Fatalf("root %v before the header was written, want the old root %v", tr.Root(), leaf)
	}
	// The old root covers only [-inf, k050) now: searches for the upper
	// half follow its right link to the parentless sibling.
	mustGetAll(t, tr, append(all, 80))
	pz.resume()

	ev = pz.waitPause(t, done)
	if ev.p != tr.HeaderPtr() {
		t.Fatalf("publish 4 in node %v, want the header %v", ev.p, tr.HeaderPtr())
	}
	assertTornHeader(t, tr)
	if h, err := tr.Header(); !errors.Is(err, ErrRestart) {
		t.Errorf("Header() while the header is mid-publish = %v, %v; want ErrRestart", h, err)
	}
	// Local readers load the root pointer alone, atomically: whichever
	// root they get, every key is reachable.
	mustGetAll(t, tr, append(all, 80))
	pz.resume()
	waitWriter(t, done)

	h := copyHeader(t, tr)
	if h.Version != h0.Version+2 {
		t.Errorf("header version %d after one publish, want %d", h.Version, h0.Version+2)
	}
	if h.Root != newRoot || tr.Root() != newRoot {
		t.Errorf("header root %v, Root() %v, want the new root %v", h.Root, tr.Root(), newRoot)
	}
	if h.Height != 2 || h.InUse != h0.InUse+2 {
		t.Errorf("header height %d, %d nodes in use; want 2 and %d", h.Height, h.InUse, h0.InUse+2)
	}
	rn := copyOK(t, tr, newRoot)
	if rn.level() != 1 || rn.count() != 2 || rn.child(0) != leaf || rn.child(1) != right || string(rn.key(1)) != string(tornKey(50)) {
		t.Errorf("new root: level %d, entries %q → %v, %v", rn.level(), nodeKeyList(rn), rn.child(0), rn.child(rn.count()-1))
	}
	mustGetAll(t, tr, append(all, 80))
}

// TestBlockFreeReads: a writer paused in the middle of publishing one leaf
// blocks only readers of that leaf. Get, Contains and iteration elsewhere go
// on (paper §2.2: Sagiv's algorithm "performs searches lock-free"); a Get of
// a key in the paused leaf retries its torn copy, gives up with ErrRestart
// after Options.MaxRestarts, and succeeds after the writer is released.
func TestBlockFreeReads(t *testing.T) {
	const maxRestarts = 1000
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, maxRestarts: maxRestarts})
	const n = 400
	for i := 0; i < n; i++ {
		putTorn(t, tr, i)
	}
	if tr.height() < 2 {
		t.Fatalf("height %d", tr.height())
	}
	const a, b = 300, 20 // a key in the leaf to pause, one in a far leaf
	resA, _ := tr.Search(tornKey(a))
	resB, _ := tr.Search(tornKey(b))
	la, lb := copyOK(t, tr, resA.Leaf), copyOK(t, tr, resB.Leaf)
	if resA.Leaf == resB.Leaf || la.rightLink() == resB.Leaf || lb.rightLink() == resA.Leaf {
		t.Fatalf("leaves %v and %v are the same or adjacent", resA.Leaf, resB.Leaf)
	}
	bKeys := nodeKeyList(lb)
	pz := newPauser(t, tr)

	pause := func(value string) <-chan error {
		pz.arm(1)
		done := goWrite(func() error { return tr.Put(tornKey(a), []byte(value)) })
		if ev := pz.waitPause(t, done); ev.p != resA.Leaf {
			t.Fatalf("paused in node %v, want leaf %v", ev.p, resA.Leaf)
		}
		return done
	}

	t.Run("while paused", func(t *testing.T) {
		done := pause("new")
		// Reads in another leaf.
		for i := 0; i < 100; i++ {
			mustGetAll(t, tr, []int{b})
		}
		if ok, err := tr.Contains(tornKey(b)); !ok || err != nil {
			t.Errorf("Contains(%.4q) = %v, %v", tornKey(b), ok, err)
		}
		// An iteration inside leaf B, stopping at its last key.
		it := tr.NewIter(&IterOptions{Lower: lb.key(0), Upper: lb.key(lb.count() - 1)})
		var got []string
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, strings.TrimRight(string(it.Key()), "."))
		}
		if it.Error() != nil || strings.Join(got, " ") != strings.Join(bKeys[:len(bKeys)-1], " ") {
			t.Errorf("iteration in leaf B = %v, %v; want %v", got, it.Error(), bKeys[:len(bKeys)-1])
		}
		// Reads of the paused leaf give up after MaxRestarts.
		torn0 := tr.Stats.Torn.Load()
		if v, err := tr.Get(tornKey(a), nil); !errors.Is(err, ErrRestart) {
			t.Errorf("Get(%.4q) of the paused leaf = %q, %v; want ErrRestart", tornKey(a), v, err)
		}
		if d := tr.Stats.Torn.Load() - torn0; d < maxRestarts || d > maxRestarts+1 {
			t.Errorf("Get counted %d torn retries, want MaxRestarts = %d", d, maxRestarts)
		}
		if ok, err := tr.Contains(tornKey(a)); !errors.Is(err, ErrRestart) {
			t.Errorf("Contains(%.4q) of the paused leaf = %v, %v; want ErrRestart", tornKey(a), ok, err)
		}
		it = tr.NewIter(nil)
		if it.SeekGE(tornKey(a)) || !errors.Is(it.Error(), ErrRestart) {
			t.Errorf("SeekGE(%.4q) into the paused leaf = %v, %v; want ErrRestart", tornKey(a), it.Valid(), it.Error())
		}
		pz.resume()
		waitWriter(t, done)
		if v, err := tr.Get(tornKey(a), nil); err != nil || string(v) != "new" {
			t.Errorf("Get(%.4q) after release = %q, %v", tornKey(a), v, err)
		}
	})

	t.Run("in flight across release", func(t *testing.T) {
		done := pause("newer")
		type result struct {
			v             []byte
			err           error
			afterRelease  bool
			failedAttempt int
		}
		var released atomic.Bool
		res := make(chan result, 1)
		firstFail := make(chan struct{})
		go func() {
			fails := 0
			for i := 0; i < 1_000_000; i++ {
				v, err := tr.Get(tornKey(a), nil)
				if errors.Is(err, ErrRestart) {
					if fails++; fails == 1 {
						close(firstFail)
					}
					continue
				}
				res <- result{v, err, released.Load(), fails}
				return
			}
			res <- result{err: errors.New("Get kept failing after the release")}
		}()
		select {
		case <-firstFail:
		case r := <-res:
			t.Fatalf("Get of the paused leaf returned %q, %v before the writer was released", r.v, r.err)
		case <-time.After(time.Minute):
			t.Fatal("Get of the paused leaf neither failed nor returned")
		}
		released.Store(true)
		pz.resume()
		waitWriter(t, done)
		select {
		case r := <-res:
			if r.err != nil || string(r.v) != "newer" || !r.afterRelease {
				t.Errorf("Get after release = %q, %v (after release %v, %d ErrRestart before)", r.v, r.err, r.afterRelease, r.failedAttempt)
			}
		case <-time.After(time.Minute):
			t.Fatal("Get did not succeed within a minute of the release")
		}
	})
}

// TestTornMerge pauses a delete that merges the right leaf N into its left
// sibling L (merge.go) in each of its publishes: N without the key, L with
// N's entries, the parent without N, N freed, the header. Readers never
// accept a node mid-publish, every key stays readable through the nodes
// not being written, and a stale pointer to N is refused once it is freed.
func TestTornMerge(t *testing.T) {
	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512})
	all := []int{10, 20, 30, 40, 50, 60, 70, 80}
	putTorn(t, tr, all...)
	if tr.height() != 2 || copyOK(t, tr, tr.Root()).count() != 2 {
		t.Fatalf("height %d, want 2 with two leaves", tr.height())
	}
	root := tr.Root()
	rn := copyOK(t, tr, root)
	left, leaf := rn.child(0), rn.child(1)
	ln := copyOK(t, tr, leaf)
	var rightKeys []int
	for _, i := range all {
		if string(tornKey(i)) >= string(ln.minKey()) {
			rightKeys = append(rightKeys, i)
		}
	}
	// Delete all but two of N's keys: not under a quarter yet.
	for _, i := range rightKeys[:len(rightKeys)-2] {
		if ok, err := tr.Delete(tornKey(i)); !ok || err != nil {
			t.Fatalf("delete %d: %v %v", i, ok, err)
		}
	}
	if tr.Usage().Nodes != 4 {
		t.Fatalf("%d nodes in use before the merging delete, want 4", tr.Usage().Nodes)
	}
	gone := rightKeys[len(rightKeys)-2]
	last := rightKeys[len(rightKeys)-1]
	var live []int
	for _, i := range all {
		if !slices.Contains(rightKeys, i) || i == last {
			live = append(live, i)
		}
	}
	var leftKeys []int
	for _, i := range live {
		if i != last {
			leftKeys = append(leftKeys, i)
		}
	}
	oldLeafVersion := copyOK(t, tr, leaf).headVersion()
	pz := newPauser(t, tr)
	pz.arm(1, 2, 3, 4, 5)
	done := goWrite(func() error {
		ok, err := tr.Delete(tornKey(gone))
		if !ok && err == nil {
			err = errors.New("key not found")
		}
		return err
	})

	// 1: N loses the key.
	ev := pz.waitPause(t, done)
	if ev.p != leaf {
		t.Fatalf("publish 1 in %v, want the leaf %v", ev.p, leaf)
	}
	assertTorn(t, tr, leaf, tornKey(last))
	mustGetAll(t, tr, leftKeys)
	pz.resume()

	// 2: L takes N's entries, max and right link; N is unchanged.
	ev = pz.waitPause(t, done)
	if ev.p != left {
		t.Fatalf("publish 2 in %v, want the left sibling %v", ev.p, left)
	}
	assertTorn(t, tr, left, tornKey(leftKeys[0]))
	if n := copyOK(t, tr, leaf); strings.Join(nodeKeyList(n), " ") != strings.TrimRight(string(tornKey(last)), ".") {
		t.Fatalf("leaf N holds %v mid-merge", nodeKeyList(n))
	}
	mustGetAll(t, tr, []int{last})
	pz.resume()

	// 3: the parent drops N's entry; L and N both hold N's last key.
	ev = pz.waitPause(t, done)
	if ev.p != root {
		t.Fatalf("publish 3 in %v, want the parent %v", ev.p, root)
	}
	assertTorn(t, tr, root, tornKey(last))
	l := copyOK(t, tr, left)
	if !l.maxInf() || l.rightLink() != 0 || leafValue(t, tr, l, tornKey(last)) != string(tornValue(last)) {
		t.Fatalf("merged L: max inf %v, link %v, keys %v", l.maxInf(), l.rightLink(), nodeKeyList(l))
	}
	if n := copyOK(t, tr, leaf); leafValue(t, tr, n, tornKey(last)) != string(tornValue(last)) {
		t.Fatal("N lost its key before it was unlinked")
	}
	pz.resume()

	// 4: N is freed.
	ev = pz.waitPause(t, done)
	if ev.p != leaf {
		t.Fatalf("publish 4 in %v, want the freed leaf %v", ev.p, leaf)
	}
	assertTorn(t, tr, leaf, tornKey(last))
	mustGetAll(t, tr, live)
	pz.resume()

	// 5: the header (free list and count).
	ev = pz.waitPause(t, done)
	if ev.p != tr.HeaderPtr() {
		t.Fatalf("publish 5 in %v, want the header", ev.p)
	}
	assertTornHeader(t, tr)
	mustGetAll(t, tr, live)
	pz.resume()
	waitWriter(t, done)

	buf := node(atomicmem.Alloc(tr.NodeSize()))
	if r := CopyNodeFor(buf, tr.nodeBytes(leaf), tornKey(last)); r != Invalid {
		t.Fatalf("stale pointer to the freed leaf: copy %v, want invalid", r)
	}
	if v := tr.nodeBytes(leaf).headVersion(); v <= oldLeafVersion {
		t.Fatalf("freed leaf's version %d, was %d: must grow", v, oldLeafVersion)
	}
	if tr.Usage().Nodes != 3 {
		t.Fatalf("%d nodes in use after the merge, want 3", tr.Usage().Nodes)
	}
	// The freed node is the next one allocated, with a higher version.
	before := tr.nodeBytes(leaf).headVersion()
	putTorn(t, tr, 11, 12, 13, 14, 15, 16, 17)
	if tr.nodeBytes(leaf).headVersion() <= before || !tr.nodeBytes(leaf).valid() {
		t.Fatalf("freed leaf not reused with a higher version")
	}
	mustGetAll(t, tr, append(live, 11, 12, 13, 14, 15, 16, 17))
}
