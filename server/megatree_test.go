package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// megaTree is a hand-built two-level tree of meganodes (with a meganode of
// another server, which local splits cannot make): an inner root meganode whose children are two leaf meganodes
// of this server, for [-inf, "m") and ["m", "x"), and a meganode of region
// 999 on another server for ["x", +inf).
type megaTree struct {
	inner, left, right *rsm.Meganode
	remote             blink.Ptr
	keys               []string // the keys stored here, sorted
}

func buildMegaTree(t *testing.T, s *Server) *megaTree {
	t.Helper()
	mk := func(level int, b blink.Bounds) *rsm.Meganode {
		m, err := s.reps.own.sm.AddMeganode(level, b)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	mt := &megaTree{
		inner:  mk(1, blink.Full),
		left:   mk(0, blink.Bounds{MinInf: true, Max: []byte("m")}),
		right:  mk(0, blink.Bounds{Min: []byte("m"), Max: []byte("x")}),
		remote: blink.MakePtr(999, 0x1000),
	}
	for _, e := range []struct {
		key   string
		child blink.Ptr
	}{{"\x00", mt.left.Ptr()}, {"m", mt.right.Ptr()}, {"x", mt.remote}} {
		if err := mt.inner.T.InsertChild([]byte(e.key), e.child); err != nil {
			t.Fatal(err)
		}
	}
	for c := 'a'; c < 'x'; c++ {
		for i := range 30 {
			k := fmt.Sprintf("%c%02d", c, i)
			lm := mt.left
			if k >= "m" {
				lm = mt.right
			}
			if err := lm.T.Put([]byte(k), []byte("v"+k)); err != nil {
				t.Fatal(err)
			}
			mt.keys = append(mt.keys, k)
		}
	}
	// Publish the new root through the region table, as a root split
	// would, so the server's table follower agrees with it instead of
	// restoring the table's old root after we set it.
	ctx := context.Background()
	cur, err := s.opts.Store.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.opts.Store.SetRoot(ctx, cur, mt.inner.Ptr()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for blink.Ptr(s.root.Load()) != mt.inner.Ptr() {
		if time.Now().After(deadline) {
			t.Fatalf("server root %v never became %v", blink.Ptr(s.root.Load()), mt.inner.Ptr())
		}
		time.Sleep(time.Millisecond)
	}
	return mt
}

// Server-side search crosses the meganodes of this server in one hop and
// stops at a pointer to another server (paper §2.2).
func TestSearchAcrossMeganodes(t *testing.T) {
	s, store := newTestServer(t)
	mt := buildMegaTree(t, s)
	c := dial(t, s)
	var rep wire.SearchReply
	for _, tc := range []struct {
		key  string
		leaf *rsm.Meganode
	}{{"c05", mt.left}, {"q17", mt.right}, {"m00", mt.right}, {"l29", mt.left}} {
		if _, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Key: []byte(tc.key), WantValue: true}, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Kind != wire.SearchLeaf || !rep.Found || string(rep.Value) != "v"+tc.key || rep.Meganode.Ptr != tc.leaf.Ptr() || rep.Meganode.Level != 0 {
			t.Fatalf("search %s = %+v", tc.key, rep)
		}
	}
	if !rep.Meganode.Range.MinInf || rep.Meganode.Range.MaxInf || string(rep.Meganode.Range.Max) != "m" {
		t.Fatalf("left meganode range %v", rep.Meganode.Range)
	}
	// A key on the other server: the next pointer, with the inner
	// meganode's description.
	if _, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Key: []byte("y01")}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Kind != wire.SearchNext || rep.Next != mt.remote || rep.Meganode.Ptr != mt.inner.Ptr() || rep.Meganode.Level != 1 || !rep.Meganode.Range.MinInf || !rep.Meganode.Range.MaxInf {
		t.Fatalf("search y01 = %+v", rep)
	}
	// Starting at a leaf meganode with a key above its range: restart.
	_, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Ptr: mt.left.Ptr(), Key: []byte("q00")}, &rep)
	wantStatus(t, err, wire.StatusKeyOutOfRange)
	_, err = call(t, c, wire.OpSearch, &wire.SearchRequest{Ptr: mt.right.Ptr(), Key: []byte("a00")}, &rep)
	wantStatus(t, err, wire.StatusKeyOutOfRange)

	// Get of a key on the other server: unknown region, then a redirect
	// once the table knows region 999 and its live host.
	_, err = call(t, c, wire.OpGet, &wire.GetRequest{Key: []byte("y01")}, &wire.GetReply{})
	wantStatus(t, err, wire.StatusUnknownRegion)
	if err := store.PutRegion(ctxT(t), regiontable.Region{ID: 999, Kind: regiontable.KindData, Host: "other", Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	waitTable(t, s, func(v *tableView) bool { _, ok := v.regions[999]; return ok })
	_, err = call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte("y01"), Value: []byte("v")}, nil)
	wantStatus(t, err, wire.StatusUnavailable) // its host is down
	reg, err := store.RegisterMember(ctxT(t), regiontable.Member{ID: "other", RPCAddr: "10.9.9.9:7070"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctxT(t))
	waitTable(t, s, func(v *tableView) bool { _, ok := v.members["other"]; return ok })
	_, err = call(t, c, wire.OpGet, &wire.GetRequest{Key: []byte("y01")}, &wire.GetReply{})
	var se *wire.StatusError
	if !errors.As(err, &se) || se.Status != wire.StatusWrongServer || se.Leader != "10.9.9.9:7070" || se.Region != 999 || se.Epoch != 3 {
		t.Fatalf("get y01 = %#v, want a redirect to 10.9.9.9:7070", err)
	}

	// Writes land in the right leaf meganode through apply.
	put(t, c, "q99", "new")
	if v, err := mt.right.T.Get([]byte("q99"), nil); err != nil || string(v) != "new" {
		t.Fatalf("q99 in the right meganode: %q, %v", v, err)
	}
	put(t, c, "b99", "new")
	if v, err := mt.left.T.Get([]byte("b99"), nil); err != nil || string(v) != "new" {
		t.Fatalf("b99 in the left meganode: %q, %v", v, err)
	}
	var meta wire.MetadataReply
	if _, err := call(t, c, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true}, &meta); err != nil || len(meta.Meganodes) != 4 || meta.Root != mt.inner.Ptr() {
		t.Fatalf("metadata: %d meganodes, root %v, %v", len(meta.Meganodes), meta.Root, err)
	}
}

func waitTable(t testing.TB, s *Server, cond func(*tableView) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond(s.table.Load()) {
		if time.Now().After(deadline) {
			t.Fatal("region table change not seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Range crosses this server's leaf meganodes in both directions and stops
// with More where the range goes on to another server.
func TestRangeAcrossMeganodes(t *testing.T) {
	s, _ := newTestServer(t)
	mt := buildMegaTree(t, s)
	c := dial(t, s)
	rev := slices.Clone(mt.keys)
	slices.Reverse(rev)

	var rep wire.RangeReply
	if _, err := call(t, c, wire.OpRange, &wire.RangeRequest{StartUnbounded: true, EndUnbounded: true}, &rep); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keysOf(rep.Pairs), mt.keys) || !rep.More || string(rep.Resume) != "x" || rep.Next != mt.remote {
		t.Fatalf("forward: %d keys, more %v resume %q next %v", len(rep.Pairs), rep.More, rep.Resume, rep.Next)
	}
	// Bounded inside this server, across the boundary at "m".
	got, _ := scanAll(t, c, wire.RangeRequest{Start: []byte("k10"), End: []byte("o05")})
	want := mt.keys[slices.Index(mt.keys, "k10"):slices.Index(mt.keys, "o05")]
	if !slices.Equal(keysOf(got), want) {
		t.Fatalf("k10..o05: %v", keysOf(got))
	}
	// Paged forward: every page's Next is the meganode to go on in.
	got, pages := scanAll(t, c, wire.RangeRequest{StartUnbounded: true, End: []byte("x"), Limit: 100})
	if !slices.Equal(keysOf(got), mt.keys) || pages != (len(mt.keys)+99)/100 {
		t.Fatalf("paged: %d keys in %d pages", len(got), pages)
	}
	// Reverse from "x" down, across "m".
	got, _ = scanAll(t, c, wire.RangeRequest{StartUnbounded: true, End: []byte("x"), Reverse: true, Limit: 77})
	if !slices.Equal(keysOf(got), rev) {
		t.Fatalf("reverse: %v", keysOf(got))
	}
	// Reverse from +inf starts on the other server: nothing here, go on
	// there with the end still unbounded (an empty Resume).
	_, err := call(t, c, wire.OpRange, &wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Reverse: true}, &rep)
	if err != nil || len(rep.Pairs) != 0 || !rep.More || len(rep.Resume) != 0 || rep.Next != mt.remote {
		t.Fatalf("reverse range from +inf: %+v, %v", rep, err)
	}
	// Forward from "x" on: the same.
	_, err = call(t, c, wire.OpRange, &wire.RangeRequest{Start: []byte("x"), EndUnbounded: true}, &rep)
	if err != nil || len(rep.Pairs) != 0 || !rep.More || rep.Next != mt.remote {
		t.Fatalf("range from x: %+v, %v", rep, err)
	}
}
