package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			enc := s.msg.AppendTo(nil)
			got := s.fresh()
			if err := got.Decode(enc); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, s.msg) {
				t.Fatalf("decoded %+v\nwant    %+v", got, s.msg)
			}
			if re := got.AppendTo([]byte("prefix")); !bytes.Equal(re[6:], enc) || string(re[:6]) != "prefix" {
				t.Fatalf("re-encoding differs:\n%x\n%x", re[6:], enc)
			}
		})
	}
}

// TestMessageEncodings pins a few encodings byte by byte; the golden file
// covers every message.
func TestMessageEncodings(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Message
		want string
	}{
		{"get request", &GetRequest{Ptr: 0x0300_0000_4000, Epoch: 2, Key: []byte("k")},
			"0040000000030000 0200000000000000 01000000 6b"},
		{"contains no", &ContainsReply{}, "00"},
		{"contains yes", &ContainsReply{Found: true}, "01"},
		{"get reply empty value", &GetReply{}, "00000000"},
		{"range request unbounded", &RangeRequest{StartUnbounded: true, EndUnbounded: true, Limit: 5},
			"0000000000000000 0000000000000000 03 05000000 00000000 00000000"},
		{"range request ignores keys beside unbounded", &RangeRequest{Start: []byte("x"), StartUnbounded: true, EndUnbounded: true},
			"0000000000000000 0000000000000000 03 00000000 00000000 00000000"},
		{"range reply one pair", &RangeReply{Pairs: []KV{{Key: []byte("a"), Value: []byte("b")}}},
			"01000000 01000000 61 01000000 62 00 00000000 0000000000000000"},
		{"metadata request all", &MetadataRequest{}, "00 00000000"},
		{"check request", &CheckRequest{Limit: 2}, "02000000"},
		{"check reply", &CheckReply{Count: 2, Violations: []string{"x"}}, "02000000 01000000 01000000 78"},
		{"search next", &SearchReply{Kind: SearchNext, Next: 1, Meganode: Meganode{Range: KeyRange{MinInf: true, MaxInf: true}}},
			"02 0000000000000000 0000 0000 03 00000000 00000000 0100000000000000"},
		{"delete", &DeleteRequest{ClientID: 1, Seq: 2, Key: []byte("k")},
			"0000000000000000 0000000000000000 0100000000000000 0200000000000000 01000000 6b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := tc.m.AppendTo(nil), mustHex(t, tc.want); !bytes.Equal(got, want) {
				t.Fatalf("got  %x\nwant %x", got, want)
			}
		})
	}
}

func TestMessageDecodeErrors(t *testing.T) {
	for _, s := range samples() {
		enc := s.msg.AppendTo(nil)
		for n := 0; n < len(enc); n++ {
			if _, ok := s.msg.(*WriteReply); ok && n == 0 {
				continue // an empty write reply is a server's from before versions
			}
			if err := s.fresh().Decode(enc[:n]); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s truncated to %d/%d bytes: got %v", s.name, n, len(enc), err)
			}
		}
		if err := s.fresh().Decode(append(enc, 0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s with a trailing byte: got %v", s.name, err)
		}
	}
	for _, tc := range []struct {
		name string
		m    Message
		body string
	}{
		{"bool byte 2", new(ContainsReply), "02"},
		{"unknown search flag", new(SearchRequest), "0000000000000000 0000000000000000 04 00000000"},
		{"version without found", new(SearchReply), "01 0000000000000000 0000 0000 00 00000000 00000000 04 0700000000000000"},
		{"unknown range reply flag", new(RangeReply), "00000000 04 00000000 0000000000000000"},
		{"cond compare on presence", new(CondRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 01 03 01 00 0000000000000000 01000000 6b 00000000 00000000"},
		{"cond delete with a value", new(CondRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 02 04 00 00 0000000000000000 01000000 6b 00000000 01000000 76"},
		{"cond unknown target", new(CondRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 01 05 00 00 0000000000000000 01000000 6b 00000000 00000000"},
		{"txn unknown write op", new(TxnRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 00000000 00000000 01000000 03 01000000 6b 00000000"},
		{"txn delete with a value", new(TxnRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 00000000 00000000 01000000 02 01000000 6b 01000000 76"},
		{"txn range count over limit", new(TxnRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 00000000 01000000 01000000 61 00000000 01000000 02000000 0000000000000000 00000000"},
		{"txn range without a start", new(TxnRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 00000000 01000000 00000000 00000000 00000000 00000000 0000000000000000 00000000"},
		{"txn empty range", new(TxnRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 00000000 01000000 01000000 62 01000000 61 00000000 00000000 0000000000000000 00000000"},
		{"txn too many reads", new(TxnRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 01040000" + strings.Repeat(" 00000000 0000000000000000", 1025) + " 00000000 00000000"},
		{"txn huge read count", new(TxnRequest), "0000000000000000 0000000000000000 0000000000000000 0000000000000000 ffffffff 00000000 00000000"},
		{"txn reply committed with a cause", new(TxnReply), "01 01 0000000000000000"},
		{"txn reply unknown cause", new(TxnReply), "00 03 0000000000000000"},
		{"txn reply failed with a version", new(TxnReply), "00 01 0100000000000000"},
		{"txn reply no cause", new(TxnReply), "00 00 0000000000000000"},
		{"min key beside -inf", new(SearchReply), "02 0000000000000000 0000 0000 01 01000000 61 00000000 0000000000000000"},
		{"unknown search kind", new(SearchReply), "03 0000000000000000 0000 0000 00 00000000 00000000"},
		{"value without found", new(SearchReply), "01 0000000000000000 0000 0000 00 00000000 00000000 02 00000000"},
		{"resume without more", new(RangeReply), "00000000 00 01000000 61 0000000000000000"},
		{"next without more", new(RangeReply), "00000000 00 00000000 0100000000000000"},
		{"huge pair count", new(RangeReply), "ffffffff 00 00000000 0000000000000000"},
		{"huge key length", new(GetReply), "ffffffff 00"},
		{"region without flag", new(MetadataRequest), "00 01000000"},
		{"huge region count", new(MetadataReply), "00000000 00000000 0000000000000000 0000000000000000 0000 00000000 00000000 00000000 ffffff0f"},
		{"meganode source and target", new(MetadataReply), "00000000 00000000 0000000000000000 0000000000000000 0000 00000000 00000000 00000000 00000000" +
			" 01000000 0000000000000000 0000 0000 03 00000000 00000000 00000000 00000000 0000000000000000 03"},
		{"meganode linked without source", new(MetadataReply), "00000000 00000000 0000000000000000 0000000000000000 0000 00000000 00000000 00000000 00000000" +
			" 01000000 0000000000000000 0000 0000 03 00000000 00000000 00000000 00000000 0000000000000000 04"},
		{"unknown meganode flag", new(MetadataReply), "00000000 00000000 0000000000000000 0000000000000000 0000 00000000 00000000 00000000 00000000" +
			" 01000000 0000000000000000 0000 0000 03 00000000 00000000 00000000 00000000 0000000000000000 08"},
		{"more violations listed than found", new(CheckReply), "01000000 02000000 01000000 61 01000000 62"},
		{"huge violation count", new(CheckReply), "ffffffff ffffffff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.m.Decode(mustHex(t, tc.body)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
}

// TestDecodeDoesNotAllocate checks that hot-path bodies decode into
// caller-owned structs without allocating, aliasing the body.
func TestDecodeDoesNotAllocate(t *testing.T) {
	search := (&SearchReply{Kind: SearchLeaf, Found: true, HasValue: true, Value: []byte("v"),
		Meganode: Meganode{Range: KeyRange{Min: []byte("a"), Max: []byte("z")}}}).AppendTo(nil)
	put := (&PutRequest{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 100)}).AppendTo(nil)
	rng := (&RangeReply{Pairs: []KV{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}}).AppendTo(nil)
	var (
		sr SearchReply
		pr PutRequest
		rr RangeReply
	)
	allocs := testing.AllocsPerRun(100, func() {
		if sr.Decode(search) != nil || pr.Decode(put) != nil || rr.Decode(rng) != nil {
			t.Fatal("decode failed")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decode, want 0", allocs)
	}
	if &sr.Value[0] != &search[len(search)-1] {
		t.Fatal("value does not alias the body")
	}
	// Appending to a decoded slice must not overwrite the body.
	_ = append(pr.Key, 'X')
	if pr.Value[0] != 'v' {
		t.Fatal("decoded slice capacity reaches into the body")
	}
}

func TestKeyRangeContains(t *testing.T) {
	for _, tc := range []struct {
		r    KeyRange
		key  string
		want bool
	}{
		{KeyRange{MinInf: true, MaxInf: true}, "", true},
		{KeyRange{Min: []byte("b"), Max: []byte("d")}, "b", true},
		{KeyRange{Min: []byte("b"), Max: []byte("d")}, "cz", true},
		{KeyRange{Min: []byte("b"), Max: []byte("d")}, "d", false},
		{KeyRange{Min: []byte("b"), Max: []byte("d")}, "a", false},
		{KeyRange{MinInf: true, Max: []byte("d")}, "a", true},
		{KeyRange{Min: []byte("b"), MaxInf: true}, "zzz", true},
	} {
		if got := tc.r.Contains([]byte(tc.key)); got != tc.want {
			t.Errorf("%v.Contains(%q) = %v", tc.r, tc.key, got)
		}
	}
}
