package rsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/cellstore/cell/blink"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{Kind: KindPut, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 42, Key: []byte("k"), Value: []byte("value")},
		{Kind: KindPut, Meganode: blink.MakePtr(1, 0x2000), Key: []byte("k"), Value: []byte{}},
		{Kind: KindDelete, Meganode: blink.MakePtr(1, 0x2000), ClientID: 1, Seq: 1, Key: bytes.Repeat([]byte("z"), 128), Value: []byte{}},
		{Kind: KindPut, Flags: FlagFloor, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 43, Key: []byte("k"), Value: []byte("v")},
		{Kind: KindDelete, Flags: FlagRetry, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 44, Key: []byte("k"), Value: []byte{}},
		{Kind: KindPut, Flags: FlagFloor | FlagForgotten, Meganode: blink.MakePtr(3, 0x1000), ClientID: 9, Seq: 45, Key: []byte("k"), Value: []byte("v")},
	} {
		b := AppendRecord(nil, &r)
		got, err := DecodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("decode(encode(%+v)) = %+v", r, got)
		}
		if !bytes.Equal(AppendRecord(nil, &got), b) {
			t.Fatal("re-encoding differs")
		}
	}
	good := AppendRecord(nil, &Record{Kind: KindPut, Meganode: 1, Key: []byte("k"), Value: []byte("v")})
	for name, b := range map[string][]byte{
		"empty":            nil,
		"short":            good[:39],
		"truncated":        good[:len(good)-1],
		"trailing":         append(bytes.Clone(good), 0),
		"version":          append([]byte{2}, good[1:]...),
		"kind":             append([]byte{1, 7}, good[2:]...),
		"reserved":         append([]byte{1, 1, 0, 1}, good[4:]...),
		"delete value":     AppendRecord(nil, &Record{Kind: KindDelete, Key: []byte("k"), Value: []byte("v")}),
		"huge key len":     append(append(bytes.Clone(good[:4]), 0xff, 0xff, 0xff, 0xff), good[8:]...),
		"huge value ln":    append(append(bytes.Clone(good[:32]), 0xff, 0xff, 0xff, 0xff), good[36:]...),
		"both flags":       AppendRecord(nil, &Record{Kind: KindPut, Flags: FlagRetry | FlagFloor, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"retry, forgotten": AppendRecord(nil, &Record{Kind: KindPut, Flags: FlagRetry | FlagForgotten, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"forgotten alone":  AppendRecord(nil, &Record{Kind: KindPut, Flags: FlagForgotten, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"unknown flag":     AppendRecord(nil, &Record{Kind: KindPut, Flags: 1 << 3, ClientID: 1, Seq: 1, Key: []byte("k")}),
		"anonymous":        AppendRecord(nil, &Record{Kind: KindPut, Flags: FlagFloor, Key: []byte("k")}),
		"child flag":       AppendRecord(nil, &Record{Kind: KindChild, Flags: FlagFloor, ClientID: 1, Seq: 1, Key: []byte("k"), Value: make([]byte, 8)}),
	} {
		if _, err := DecodeRecord(b); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v, want ErrBadRecord", name, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(AppendRecord(nil, &Record{Kind: KindPut, Meganode: 1, Key: []byte("k"), Value: []byte("v")}))
	f.Add(AppendRecord(nil, &Record{Kind: KindDelete, Meganode: 1, Key: []byte("k")}))
	f.Add(AppendRecord(nil, &Record{Kind: KindCond, Meganode: 1, ClientID: 3, Seq: 4, Flags: FlagFloor, Key: []byte("k"),
		Value: AppendCondBody(nil, &CondBody{Op: CondPut, Target: CondVersion, Compare: CmpGreater, ExpectedVersion: 4, Value: []byte("v")})}))
	f.Add(AppendRecord(nil, &Record{Kind: KindVersion}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendRecord(nil, &r), b) {
			t.Fatalf("accepted record does not re-encode to itself")
		}
	})
}

// Split records round-trip and bad ones are refused.
func TestSplitRecords(t *testing.T) {
	body := SplitBody{Phase: PhaseCopy, New: blink.MakePtr(3, 0x4000), Batch: 7, Cursor: []byte("from")}
	rec := AppendRecord(nil, &Record{Kind: KindSplit, Meganode: blink.MakePtr(3, 0x1000), Key: []byte("sep"), Value: AppendSplitBody(nil, &body)})
	r, err := DecodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeSplitBody(r.Value)
	if err != nil || b.Phase != body.Phase || b.New != body.New || b.Batch != 7 || string(b.Cursor) != "from" || string(r.Key) != "sep" {
		t.Fatalf("round trip: %+v %+v %v", r, b, err)
	}
	for name, v := range map[string][]byte{
		"short":           make([]byte, 10),
		"phase 0":         make([]byte, splitBodySize),
		"phase 9":         append([]byte{9}, make([]byte, splitBodySize-1)...),
		"reserved byte":   append([]byte{byte(PhaseLink), 1}, make([]byte, splitBodySize-2)...),
		"cursor not copy": append(AppendSplitBody(nil, &SplitBody{Phase: PhaseLink}), 'x'),
	} {
		rec := AppendRecord(nil, &Record{Kind: KindSplit, Meganode: blink.MakePtr(3, 0x1000), Key: []byte("sep"), Value: v})
		if _, err := DecodeRecord(rec); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", name, err)
		}
	}
	child := AppendRecord(nil, &Record{Kind: KindChild, Meganode: blink.MakePtr(3, 0x1000), Key: []byte("k"), Value: []byte{1, 2, 3}})
	if _, err := DecodeRecord(child); !errors.Is(err, ErrBadRecord) {
		t.Errorf("child record with a 3-byte value: %v", err)
	}
	if PhaseFree.String() != "free" || SplitPhase(42).String() != "phase(42)" {
		t.Error("phase names")
	}
}
