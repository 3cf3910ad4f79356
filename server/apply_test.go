package server

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/wire"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []writeRecord{
		{Kind: recPut, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 42, Key: []byte("k"), Value: []byte("value")},
		{Kind: recPut, Meganode: blink.MakePtr(1, 0x2000), Key: []byte("k"), Value: []byte{}},
		{Kind: recDelete, Meganode: blink.MakePtr(1, 0x2000), ClientID: 1, Seq: 1, Key: bytes.Repeat([]byte("z"), 128), Value: []byte{}},
		{Kind: recPut, Flags: recFloor, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 43, Key: []byte("k"), Value: []byte("v")},
		{Kind: recDelete, Flags: recRetry, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 44, Key: []byte("k"), Value: []byte{}},
		{Kind: recPut, Flags: recFloor | recForgotten, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 45, Key: []byte("k"), Value: []byte("v")},
	} {
		b := appendRecord(nil, &r)
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("decode(encode(%+v)) = %+v", r, got)
		}
		if !bytes.Equal(appendRecord(nil, &got), b) {
			t.Fatal("re-encoding differs")
		}
	}
	good := appendRecord(nil, &writeRecord{Kind: recPut, Meganode: 1, Key: []byte("k"), Value: []byte("v")})
	for name, b := range map[string][]byte{
		"empty":            nil,
		"short":            good[:39],
		"truncated":        good[:len(good)-1],
		"trailing":         append(bytes.Clone(good), 0),
		"version":          append([]byte{2}, good[1:]...),
		"kind":             append([]byte{1, 7}, good[2:]...),
		"reserved":         append([]byte{1, 1, 0, 1}, good[4:]...),
		"delete value":     appendRecord(nil, &writeRecord{Kind: recDelete, Key: []byte("k"), Value: []byte("v")}),
		"huge key len":     append(append(bytes.Clone(good[:4]), 0xff, 0xff, 0xff, 0xff), good[8:]...),
		"huge value ln":    append(append(bytes.Clone(good[:32]), 0xff, 0xff, 0xff, 0xff), good[36:]...),
		"both flags":       appendRecord(nil, &writeRecord{Kind: recPut, Flags: recRetry | recFloor, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"retry, forgotten": appendRecord(nil, &writeRecord{Kind: recPut, Flags: recRetry | recForgotten, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"forgotten alone":  appendRecord(nil, &writeRecord{Kind: recPut, Flags: recForgotten, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"unknown flag":     appendRecord(nil, &writeRecord{Kind: recPut, Flags: 1 << 3, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"anonymous":        appendRecord(nil, &writeRecord{Kind: recPut, Flags: recFloor, Key: []byte("k")}),
		"child flag":       appendRecord(nil, &writeRecord{Kind: recChild, Flags: recFloor, ClientID: 1, Seq: 1, Key: []byte("k"), Value: make([]byte, 8)}),
	} {
		if _, err := decodeRecord(b); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v, want ErrBadRecord", name, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, &writeRecord{Kind: recPut, Meganode: 1, Key: []byte("k"), Value: []byte("v")}))
	f.Add(appendRecord(nil, &writeRecord{Kind: recDelete, Meganode: 1, Key: []byte("k")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		if !bytes.Equal(appendRecord(nil, &r), b) {
			t.Fatalf("accepted record does not re-encode to itself")
		}
	})
}

// apply refuses records that name no leaf meganode of the region: the
// refusal is the record's committed outcome, the same on every replica.
func TestApplyRefuses(t *testing.T) {
	s, _ := newTestServer(t)
	root := s.Root()
	for _, r := range []writeRecord{
		{Kind: recPut, Meganode: root + 1024, Key: []byte("k"), Value: []byte("v")},                                               // a node, not the header
		{Kind: recPut, Meganode: blink.MakePtr(s.RegionID()+1, root.Offset()), Key: []byte("k")},                                  // another region
		{Kind: recPut, Meganode: blink.MakePtr(s.RegionID(), 16<<20), Key: []byte("k")},                                           // no meganode
		{Kind: recRegion, Value: appendRegionBody(nil, layoutBody(s.region.Layout()))},                                            // a second region record
		{Kind: recRoot, Meganode: root, Value: appendRootBody(nil, rootDrop)},                                                     // drop a published root
		{Kind: recSplit, Meganode: root, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseStart, New: root})}, // names its own slot
	} {
		if _, err := s.propose(appendRecord(nil, &r)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("record %d for %v: %v", r.Kind, r.Meganode, err)
		}
	}
	recs := [][]byte{
		appendRecord(nil, &writeRecord{Kind: recPut, Meganode: root, Key: []byte("a"), Value: []byte("1")}),
		appendRecord(nil, &writeRecord{Kind: recPut, Meganode: root, Key: []byte("b"), Value: []byte("2")}),
		appendRecord(nil, &writeRecord{Kind: recDelete, Meganode: root, Key: []byte("a")}),
		appendRecord(nil, &writeRecord{Kind: recDelete, Meganode: root, Key: []byte("zz")}),
		appendRecord(nil, &writeRecord{Kind: recPut, Meganode: root, Key: []byte("c"), Value: bytes.Repeat([]byte("x"), 5000)}),
	}
	var founds []bool
	for _, rec := range recs {
		res, err := s.propose(rec)
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
		{ErrBadRecord, wire.StatusInternal},
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
