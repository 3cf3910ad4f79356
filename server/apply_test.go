package server

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// apply refuses records that name no leaf meganode of the region: the
// refusal is the record's committed outcome, the same on every replica.
func TestApplyRefuses(t *testing.T) {
	s, _ := newTestServer(t)
	root := s.Root()
	for _, r := range []rsm.Record{
		{Kind: rsm.KindPut, Meganode: root + 1024, Key: []byte("k"), Value: []byte("v")},                                                           // a node, not the header
		{Kind: rsm.KindPut, Meganode: blink.MakePtr(s.RegionID()+1, root.Offset()), Key: []byte("k")},                                              // another region
		{Kind: rsm.KindPut, Meganode: blink.MakePtr(s.RegionID(), 16<<20), Key: []byte("k")},                                                       // no meganode
		{Kind: rsm.KindRegion, Value: rsm.AppendRegionBody(nil, rsm.LayoutOf(s.reps.own.sm.Region()))},                                             // a second region record
		{Kind: rsm.KindRoot, Meganode: root, Value: rsm.AppendRootBody(nil, rsm.RootDrop)},                                                         // drop a published root
		{Kind: rsm.KindSplit, Meganode: root, Key: []byte("m"), Value: rsm.AppendSplitBody(nil, &rsm.SplitBody{Phase: rsm.PhaseStart, New: root})}, // names its own slot
	} {
		if _, err := s.reps.own.propose(rsm.AppendRecord(nil, &r)); !errors.Is(err, rsm.ErrBadRecord) {
			t.Errorf("record %d for %v: %v", r.Kind, r.Meganode, err)
		}
	}
	recs := [][]byte{
		rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindPut, Meganode: root, Key: []byte("a"), Value: []byte("1")}),
		rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindPut, Meganode: root, Key: []byte("b"), Value: []byte("2")}),
		rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindDelete, Meganode: root, Key: []byte("a")}),
		rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindDelete, Meganode: root, Key: []byte("zz")}),
		rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindPut, Meganode: root, Key: []byte("c"), Value: bytes.Repeat([]byte("x"), 5000)}),
	}
	var founds []bool
	for _, rec := range recs {
		res, err := s.reps.own.propose(rec)
		if err != nil {
			t.Fatal(err)
		}
		founds = append(founds, res.Found)
	}
	if !reflect.DeepEqual(founds, []bool{false, false, true, false, false}) {
		t.Fatalf("found flags %v", founds)
	}
}

func TestWireErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err error
		st  wire.Status
	}{
		{blink.ErrNotFound, wire.StatusNotFound},
		{blink.ErrEmptyKey, wire.StatusEmptyKey},
		{blink.ErrKeyTooLarge, wire.StatusKeyTooLarge},
		{blink.ErrValueTooLarge, wire.StatusValueTooLarge},
		{blink.ErrNeedsSplit, wire.StatusUnavailable},
		{blink.ErrExtentsFull, wire.StatusUnavailable},
		{blink.ErrKeyOutOfRange, wire.StatusKeyOutOfRange},
		{blink.ErrRestart, wire.StatusNeedsRetry},
		{blink.ErrCorruption, wire.StatusInternal},
		{rsm.ErrBadRecord, wire.StatusInternal},
		{meganode.ErrClosed, wire.StatusUnavailable},
		{wire.ErrMalformed, wire.StatusBadRequest},
		{wire.ErrOverloaded, wire.StatusOverloaded},
	} {
		if got := wire.StatusOf(wireError(tc.err)); got != tc.st {
			t.Errorf("%v -> %v, want %v", tc.err, got, tc.st)
		}
	}
	var se *wire.StatusError
	if !errors.As(wireError(blink.ErrNeedsSplit), &se) || se.Message != msgNeedsSplit {
		t.Fatalf("needs split: %#v", wireError(blink.ErrNeedsSplit))
	}
}

// With splits off, a full meganode answers Unavailable with the split
// message and changes nothing; updates of existing keys still work.
func TestMeganodeFull(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 16 << 10 // 16 nodes
		o.DisableSplits = true
	})
	c := dial(t, s)
	var last string
	var err error
	for i := 0; i < 10000; i++ {
		k := string(bytes.Repeat([]byte{byte('a' + i%26)}, 100)) + string(rune('A'+i/26))
		_, err = call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte(k), Value: []byte("v")}, nil)
		if err != nil {
			break
		}
		last = k
	}
	var se *wire.StatusError
	if !errors.As(err, &se) || se.Status != wire.StatusUnavailable || se.Message != msgNeedsSplit {
		t.Fatalf("filling a meganode ended with %v", err)
	}
	put(t, c, last, "updated")
	if v, _ := get(t, c, last); v != "updated" {
		t.Fatalf("update in a full meganode: %q", v)
	}
	if err := rootTree(t, s).CheckErr(); err != nil {
		t.Fatal(err)
	}
}
