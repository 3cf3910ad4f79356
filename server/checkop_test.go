package server

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

// mustCheck calls OpCheck with limit and returns the reply.
func mustCheck(t *testing.T, c *wire.Conn, limit uint32) wire.CheckReply {
	t.Helper()
	var rep wire.CheckReply
	if _, err := call(t, c, wire.OpCheck, &wire.CheckRequest{Limit: limit}, &rep); err != nil {
		t.Fatalf("check: %v", err)
	}
	return rep
}

// metadataOf returns the server's metadata with its meganodes.
func metadataOf(t *testing.T, c *wire.Conn) wire.MetadataReply {
	t.Helper()
	var meta wire.MetadataReply
	if _, err := call(t, c, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true}, &meta); err != nil {
		t.Fatal(err)
	}
	return meta
}

// A tree of meganodes grown by splits checks clean through OpCheck, and
// its metadata links every meganode to the next of its level: Right lies
// in the meganode of the same level whose min is this one's max, and is
// nil exactly at +inf. Meganodes nobody reaches are reported, each on one
// line, up to the request's limit, with the full count.
func TestCheckOp(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.MeganodeSize = 32 << 10 })
	c := dial(t, s)
	for i := 0; levels(t, s) < 2; i++ {
		if i > 5000 {
			t.Fatalf("%d levels after %d puts", levels(t, s), i)
		}
		k := fmt.Sprintf("key%05d", i*7919%10007) + strings.Repeat("x", 64)
		put(t, c, k, "v"+k)
		if i%50 == 0 {
			waitSplitsIdle(t, s)
		}
	}
	waitSplitsIdle(t, s)
	if rep := mustCheck(t, c, 0); rep.Count != 0 || len(rep.Violations) != 0 {
		t.Fatalf("check of a sound tree: %+v", rep)
	}

	meta := metadataOf(t, c)
	if len(meta.Meganodes) < 3 {
		t.Fatalf("%d meganodes", len(meta.Meganodes))
	}
	for _, m := range meta.Meganodes {
		if m.SplitSource || m.SplitTarget || m.SplitLinked {
			t.Errorf("meganode %v splitting at rest: %+v", m.Ptr, m)
		}
		if m.Right.IsNil() != m.Range.MaxInf {
			t.Errorf("meganode %v %v: right link %v", m.Ptr, m.Range, m.Right)
			continue
		}
		if m.Right.IsNil() {
			continue
		}
		var next *wire.MeganodeStats
		for i, n := range meta.Meganodes {
			if n.Ptr.Region() == m.Right.Region() && n.Ptr <= m.Right && uint64(m.Right-n.Ptr) < meta.MeganodeSize {
				next = &meta.Meganodes[i]
			}
		}
		if next == nil || next.Level != m.Level || next.Range.MinInf || !bytes.Equal(next.Range.Min, m.Range.Max) {
			t.Errorf("meganode %v %v: right link %v into %+v", m.Ptr, m.Range, m.Right, next)
		}
	}

	// Two meganodes nobody links to.
	for range 2 {
		if _, err := s.reps.own.sm.AddMeganode(0, blink.Bounds{Min: []byte("orphan"), MaxInf: true}); err != nil {
			t.Fatal(err)
		}
	}
	rep := mustCheck(t, c, 0)
	if rep.Count != 2 || len(rep.Violations) != 2 {
		t.Fatalf("check with two orphans: %+v", rep)
	}
	for _, v := range rep.Violations {
		if !strings.Contains(v, "is not reachable from the root") || strings.Contains(v, "\n") {
			t.Errorf("violation %q", v)
		}
	}
	if rep := mustCheck(t, c, 1); rep.Count != 2 || len(rep.Violations) != 1 {
		t.Fatalf("check with limit 1: %+v", rep)
	}
	// Counted once the reply is written.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		got := metricValue(gather(t, s), "cell_server_ops_total", map[string]string{"op": "check", "status": "OK"})
		if got == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v checks counted, want 3", got)
		}
	}
}

// checkReply lists what fits in a frame and counts everything; violations
// flattens joined errors onto one line each.
func TestCheckReply(t *testing.T) {
	err := errors.Join(errors.New("a\nb"), errors.Join(errors.New("c"), errors.New(strings.Repeat("d", 100))))
	if got := violations(err); len(got) != 3 || got[0] != "a b" || got[1] != "c" {
		t.Fatalf("violations %q", got)
	}
	if violations(nil) != nil {
		t.Fatal("violations of nil")
	}
	for _, tc := range []struct {
		limit    uint32
		maxFrame int
		listed   int
	}{
		{0, wire.DefaultMaxFrameSize, 3},
		{2, wire.DefaultMaxFrameSize, 2},
		{0, wire.HeaderSize + wire.CheckReplyOverhead + 2*wire.CheckViolationOverhead + 4, 2}, // "a b", "c"
		{0, wire.HeaderSize + wire.CheckReplyOverhead + 3, 0},
	} {
		rep := checkReply(err, tc.limit, tc.maxFrame)
		if rep.Count != 3 || len(rep.Violations) != tc.listed {
			t.Errorf("limit %d, frame %d: %+v", tc.limit, tc.maxFrame, rep)
		}
		if n := wire.HeaderSize + len(rep.AppendTo(nil)); n > tc.maxFrame {
			t.Errorf("limit %d, frame %d: a reply frame of %d bytes", tc.limit, tc.maxFrame, n)
		}
	}
}

// During a split, Metadata flags X as its source (linked once the
// boundary is published) and Y as its target; a check waits for the split
// to end (or its deadline: Expired), and passes after it.
func TestMetadataSplitFlags(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 64 << 10
		o.SplitFill = 1 // no split unless the test asks
		o.MaxSplitWait = 2 * time.Minute
	})
	c := dial(t, s)
	x := s.servedMeganode(s.Root())
	for i := 0; x.T.Fill() < 0.5; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
	}
	flags := func() (xs, ys *wire.MeganodeStats) {
		meta := metadataOf(t, c)
		for i, m := range meta.Meganodes {
			if m.Ptr == x.Ptr() {
				xs = &meta.Meganodes[i]
			} else {
				ys = &meta.Meganodes[i]
			}
		}
		return xs, ys
	}
	type checkResult struct {
		rep wire.CheckReply
		err error
	}
	checked := make(chan checkResult, 1)
	p := pauseSplits(t)
	splitDone := make(chan bool, 1)
	go func() { splitDone <- s.splits.runSplit(x) }()
	for _, step := range splitFailpoints {
		p.wait(t, step)
		xs, ys := flags()
		switch step {
		case FailpointSplitFroze, FailpointSplitCopied:
			if !xs.SplitSource || xs.SplitLinked || ys == nil || !ys.SplitTarget {
				t.Errorf("%s: X %+v, Y %+v", step, xs, ys)
			}
		case FailpointSplitLinked:
			if !xs.SplitSource || !xs.SplitLinked || ys == nil || !ys.SplitTarget || xs.Right.IsNil() {
				t.Errorf("%s: X %+v, Y %+v", step, xs, ys)
			}
		default:
			if xs.SplitSource || xs.SplitLinked || ys != nil && ys.SplitTarget {
				t.Errorf("%s: X %+v, Y %+v", step, xs, ys)
			}
		}
		if step == FailpointSplitCopied {
			wantStatus(t, s.lockSplitsUntil(time.Now().Add(50*time.Millisecond)), wire.StatusExpired)
			go func() {
				rep, err := callCheck(t, c)
				checked <- checkResult{rep, err}
			}()
			select {
			case r := <-checked:
				t.Fatalf("check answered during a split: %+v", r)
			case <-time.After(100 * time.Millisecond):
			}
		}
		p.release <- struct{}{}
	}
	if !<-splitDone {
		t.Fatal("split failed")
	}
	if r := <-checked; r.err != nil || r.rep.Count != 0 {
		t.Fatalf("check that waited for the split: %+v", r)
	}
	if rep := mustCheck(t, c, 0); rep.Count != 0 {
		t.Fatalf("check after the split: %+v", rep)
	}
}

// Check finds an inner entry that names a meganode by a key other than
// its min (each entry's key is the child's min), and the left neighbour
// whose right link does not lead to the meganode the next entry names:
// the walk down the levels can fail, not only the orphan count.
func TestCheckFindsMisnamedEntry(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 64 << 10
		o.SplitFill = 1
	})
	c := dial(t, s)
	x := s.servedMeganode(s.Root())
	for i := 0; x.T.Fill() < 0.6; i++ {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		put(t, c, k, "v"+k)
	}
	if !s.splits.runSplit(x) { // a root over x and its new right neighbour
		t.Fatal("split failed")
	}
	if err := s.Check(); err != nil {
		t.Fatalf("check of a sound tree: %v", err)
	}
	root := s.servedMeganode(s.Root())
	if root == nil || root == x {
		t.Fatal("no new root")
	}
	// Straight into the root's tree, past the log: an entry "zzz" naming
	// x, whose min is -inf, after the entry of x's right neighbour.
	if err := root.T.InsertChild([]byte("zzz"), x.Ptr()); err != nil {
		t.Fatal(err)
	}
	err := s.Check()
	if err == nil {
		t.Fatal("check passed a root entry that misnames its child")
	}
	for _, want := range []string{`entry "zzz" of ` + root.Ptr().String() + ` names ` + x.Ptr().String() + `, whose min is`, "left neighbour"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check: %v\nwant a violation with %q", err, want)
		}
	}
}

// callCheck sends c an OpCheck and decodes its reply.
func callCheck(t testing.TB, c *wire.Conn) (wire.CheckReply, error) {
	var rep wire.CheckReply
	f, err := c.CallMessage(ctxT(t), wire.OpCheck, &wire.CheckRequest{})
	if err == nil {
		err = rep.Decode(f.Body)
	}
	f.Release()
	return rep, err
}
