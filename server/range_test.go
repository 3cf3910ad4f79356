package server

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/cellstore/cell/wire"
)

// scanAll pages through a range request until More is false and returns
// the pairs (copied) and the number of replies.
func scanAll(t *testing.T, c *wire.Conn, req wire.RangeRequest) ([]wire.KV, int) {
	t.Helper()
	var out []wire.KV
	for pages := 1; ; pages++ {
		f, err := c.CallMessage(ctxT(t), wire.OpRange, &req)
		if err != nil {
			t.Fatalf("range %+v: %v", req, err)
		}
		if len(f.Body)+wire.HeaderSize > wire.DefaultMaxFrameSize {
			t.Fatalf("reply of %d bytes", len(f.Body))
		}
		var rep wire.RangeReply
		if err := rep.Decode(f.Body); err != nil {
			t.Fatal(err)
		}
		for _, kv := range rep.Pairs {
			out = append(out, wire.KV{Key: bytes.Clone(kv.Key), Value: bytes.Clone(kv.Value)})
		}
		if !rep.More {
			f.Release()
			return out, pages
		}
		if len(rep.Pairs) == 0 {
			t.Fatalf("More without pairs: %+v", rep)
		}
		if req.Reverse {
			req.End, req.EndUnbounded = bytes.Clone(rep.Resume), false
		} else {
			req.Start, req.StartUnbounded = bytes.Clone(rep.Resume), false
		}
		req.Ptr = rep.Next
		f.Release()
		if pages > 10000 {
			t.Fatal("range does not end")
		}
	}
}

func keysOf(kvs []wire.KV) []string {
	var ks []string
	for _, kv := range kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

func TestRange(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	var all []string
	for i := range 1000 {
		k := fmt.Sprintf("k%04d", i)
		all = append(all, k)
		put(t, c, k, "v"+k)
	}
	rev := slices.Clone(all)
	slices.Reverse(rev)
	between := func(lo, hi int) []string { return slices.Clone(all[lo:hi]) }
	revBetween := func(lo, hi int) []string { r := between(lo, hi); slices.Reverse(r); return r }
	for _, tc := range []struct {
		name  string
		req   wire.RangeRequest
		want  []string
		pages int // 0: don't check
	}{
		{"all", wire.RangeRequest{StartUnbounded: true, EndUnbounded: true}, all, 1},
		{"all reverse", wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Reverse: true}, rev, 1},
		{"bounded", wire.RangeRequest{Start: []byte("k0100"), End: []byte("k0200")}, between(100, 200), 1},
		{"bounded reverse", wire.RangeRequest{Start: []byte("k0100"), End: []byte("k0200"), Reverse: true}, revBetween(100, 200), 1},
		{"bounds between keys", wire.RangeRequest{Start: []byte("k0100x"), End: []byte("k0200x")}, between(101, 201), 1},
		{"paged", wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Limit: 64}, all, 16},
		{"paged reverse", wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Limit: 64, Reverse: true}, rev, 16},
		{"limit exactly the rest", wire.RangeRequest{Start: []byte("k0990"), EndUnbounded: true, Limit: 10}, between(990, 1000), 1},
		{"start unbounded", wire.RangeRequest{StartUnbounded: true, End: []byte("k0003")}, between(0, 3), 1},
		{"end unbounded reverse", wire.RangeRequest{Start: []byte("k0997"), EndUnbounded: true, Reverse: true}, revBetween(997, 1000), 1},
		{"empty start means the beginning", wire.RangeRequest{Start: []byte{}, End: []byte("k0002")}, between(0, 2), 1},
		{"empty: start == end", wire.RangeRequest{Start: []byte("k0005"), End: []byte("k0005")}, nil, 1},
		{"empty: start > end", wire.RangeRequest{Start: []byte("k0500"), End: []byte("k0100")}, nil, 1},
		{"empty: end is the empty key", wire.RangeRequest{StartUnbounded: true, End: []byte{}}, nil, 1},
		{"nothing in range", wire.RangeRequest{Start: []byte("z"), EndUnbounded: true}, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, pages := scanAll(t, c, tc.req)
			if !slices.Equal(keysOf(got), tc.want) {
				t.Fatalf("keys = %v\nwant %v", keysOf(got), tc.want)
			}
			for _, kv := range got {
				if string(kv.Value) != "v"+string(kv.Key) {
					t.Fatalf("value of %q = %q", kv.Key, kv.Value)
				}
			}
			if tc.pages != 0 && pages != tc.pages {
				t.Fatalf("%d replies, want %d", pages, tc.pages)
			}
		})
	}
	t.Run("keys only", func(t *testing.T) {
		got, _ := scanAll(t, c, wire.RangeRequest{Start: []byte("k0010"), End: []byte("k0020"), KeysOnly: true})
		if !slices.Equal(keysOf(got), between(10, 20)) {
			t.Fatalf("keys %v", keysOf(got))
		}
		for _, kv := range got {
			if len(kv.Value) != 0 {
				t.Fatalf("keys-only range returned a value for %q", kv.Key)
			}
		}
	})
	t.Run("server limit", func(t *testing.T) {
		var rep wire.RangeRequest = wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Limit: 1 << 30}
		f, err := c.CallMessage(ctxT(t), wire.OpRange, &rep)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Release()
		var rr wire.RangeReply
		if err := rr.Decode(f.Body); err != nil || len(rr.Pairs) != 1000 || rr.More {
			t.Fatalf("%d pairs, more %v, %v", len(rr.Pairs), rr.More, err)
		}
	})
	t.Run("bad bounds", func(t *testing.T) {
		long := bytes.Repeat([]byte("x"), 129)
		_, err := call(t, c, wire.OpRange, &wire.RangeRequest{Start: long, EndUnbounded: true}, &wire.RangeReply{})
		wantStatus(t, err, wire.StatusKeyTooLarge)
		_, err = call(t, c, wire.OpRange, &wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Epoch: s.Epoch() + 1}, &wire.RangeReply{})
		wantStatus(t, err, wire.StatusStaleEpoch)
	})
}

// A range whose values pass the frame limit comes back in several replies,
// each below the limit, with nothing lost.
func TestRangeReplyCappedByBytes(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.RegionSize = 64 << 20 })
	c := dial(t, s)
	val := bytes.Repeat([]byte("v"), 300<<10)
	var want []string
	for i := range 40 { // 12 MB of values, 4 MiB frames
		k := fmt.Sprintf("big%02d", i)
		want = append(want, k)
		if _, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte(k), Value: val}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, reverse := range []bool{false, true} {
		got, pages := scanAll(t, c, wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Reverse: reverse})
		w := slices.Clone(want)
		if reverse {
			slices.Reverse(w)
		}
		if !slices.Equal(keysOf(got), w) {
			t.Fatalf("reverse %v: keys %v", reverse, keysOf(got))
		}
		for _, kv := range got {
			if !bytes.Equal(kv.Value, val) {
				t.Fatalf("value of %q damaged", kv.Key)
			}
		}
		if pages < 3 {
			t.Fatalf("reverse %v: %d replies for 12 MB with 4 MiB frames", reverse, pages)
		}
	}
}
