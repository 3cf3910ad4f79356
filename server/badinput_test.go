package server

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
	"github.com/cellstore/cell/wire/wiretest"
)

// Typed statuses for requests the server refuses, on a connection that
// stays usable, with nothing lost.
func TestBadRequests(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "keep", "me")
	long := bytes.Repeat([]byte("k"), 129) // 1 KiB nodes: keys up to 128 bytes
	max := bytes.Repeat([]byte("k"), 128)
	other := blink.MakePtr(s.RegionID()+5, 4096)
	for _, tc := range []struct {
		name string
		op   wire.Op
		req  wire.Message
		st   wire.Status
	}{
		{"put key too large", wire.OpPut, &wire.PutRequest{Key: long, Value: []byte("v")}, wire.StatusKeyTooLarge},
		{"get key too large", wire.OpGet, &wire.GetRequest{Key: long}, wire.StatusKeyTooLarge},
		{"search key too large", wire.OpSearch, &wire.SearchRequest{Key: long}, wire.StatusKeyTooLarge},
		{"contains key too large", wire.OpContains, &wire.GetRequest{Key: long}, wire.StatusKeyTooLarge},
		{"delete key too large", wire.OpDelete, &wire.DeleteRequest{Key: long}, wire.StatusKeyTooLarge},
		{"put empty key", wire.OpPut, &wire.PutRequest{Value: []byte("v")}, wire.StatusEmptyKey},
		{"get empty key", wire.OpGet, &wire.GetRequest{}, wire.StatusEmptyKey},
		{"search empty key", wire.OpSearch, &wire.SearchRequest{}, wire.StatusEmptyKey},
		{"value too large", wire.OpPut, &wire.PutRequest{Key: []byte("v"), Value: make([]byte, wire.MaxValueSize+1)}, wire.StatusValueTooLarge},
		{"pointer into another region", wire.OpGet, &wire.GetRequest{Ptr: other, Key: []byte("keep")}, wire.StatusUnknownRegion},
		{"pointer to no meganode", wire.OpSearch, &wire.SearchRequest{Ptr: blink.MakePtr(s.RegionID(), 16<<20), Key: []byte("keep")}, wire.StatusOutOfBounds},
		{"pointer inside a node", wire.OpSearch, &wire.SearchRequest{Ptr: s.Root() + 8, Key: []byte("keep")}, wire.StatusOutOfBounds},
		{"stale epoch", wire.OpGet, &wire.GetRequest{Key: []byte("keep"), Epoch: s.Epoch() + 7}, wire.StatusStaleEpoch},
		{"stale epoch put", wire.OpPut, &wire.PutRequest{Key: []byte("x"), Value: []byte("y"), Epoch: 1234}, wire.StatusStaleEpoch},
	} {
		_, err := call(t, c, tc.op, tc.req, nil)
		if got := wire.StatusOf(err); got != tc.st {
			t.Errorf("%s: status %v (%v), want %v", tc.name, got, err, tc.st)
		}
	}
	// The largest key and value are fine.
	if _, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: max, Value: make([]byte, wire.MaxValueSize)}, nil); err != nil {
		t.Fatalf("put of the largest key and value: %v", err)
	}
	// A stale epoch reply names the current one.
	_, err := call(t, c, wire.OpGet, &wire.GetRequest{Key: []byte("keep"), Epoch: 99}, nil)
	var se *wire.StatusError
	if !asStatusError(err, &se) || se.Epoch != s.Epoch() || se.Region != s.RegionID() {
		t.Fatalf("stale epoch error %#v", err)
	}
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v after bad requests", v, ok)
	}
	if err := rootTree(t, s).CheckErr(); err != nil {
		t.Fatal(err)
	}
}

func asStatusError(err error, se **wire.StatusError) bool {
	e, ok := err.(*wire.StatusError)
	if ok {
		*se = e
	}
	return ok
}

// Malformed frames: an error status where the stream is still in sync (the
// connection goes on), a closed connection where it is not; the server
// keeps serving either way and loses nothing.
func TestMalformedFrames(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.MaxFrameSize = 64<<10 + wire.HeaderSize })
	c := dial(t, s)
	put(t, c, "keep", "me")

	t.Run("in sync", func(t *testing.T) {
		r := wiretest.Dial(t, s.Addr())
		// Body that does not decode: truncated, trailing bytes, bad flags.
		r.SendFrame(wire.OpGet, 1, []byte{1, 2, 3})
		r.Expect(1, wire.StatusBadRequest)
		good := (&wire.GetRequest{Key: []byte("keep")}).AppendTo(nil)
		r.SendFrame(wire.OpGet, 2, append(bytes.Clone(good), 0))
		r.Expect(2, wire.StatusBadRequest)
		sr := (&wire.SearchRequest{Key: []byte("keep")}).AppendTo(nil)
		sr[16] = 0x80 // unknown flag bit
		r.SendFrame(wire.OpSearch, 3, sr)
		r.Expect(3, wire.StatusBadRequest)
		// A key length that points past the body.
		bad := (&wire.PutRequest{Key: []byte("k"), Value: []byte("v")}).AppendTo(nil)
		binary.LittleEndian.PutUint32(bad[32:], 1<<31)
		r.SendFrame(wire.OpPut, 4, bad)
		r.Expect(4, wire.StatusBadRequest)
		// Unknown ops: reserved, extension, never assigned.
		r.SendFrame(0x3f, 5, nil)
		r.Expect(5, wire.StatusUnknownOp)
		r.SendFrame(0xc7, 6, []byte("ext"))
		r.Expect(6, wire.StatusUnknownOp)
		r.SendFrame(0x99, 7, []byte("zzz"))
		r.Expect(7, wire.StatusUnknownOp)
		// A reply frame sent as a request.
		r.Send(wire.AppendFrame(nil, wire.Header{Op: wire.OpGet, ID: 8, Flags: wire.FlagReply}, good))
		r.Expect(8, wire.StatusBadRequest)
		// Too large: the body is skipped, the stream stays in sync.
		r.SendFrame(wire.OpPut, 9, make([]byte, 64<<10+1))
		r.Expect(9, wire.StatusFrameTooLarge)
		r.SendFrame(wire.OpGet, 10, good)
		h, body := r.Reply()
		var gr wire.GetReply
		if h.ID != 10 || h.Status != wire.StatusOK || gr.Decode(body) != nil || string(gr.Value) != "me" {
			t.Fatalf("get after malformed frames: %v %q", h, body)
		}
		r.Ping(11)
	})
	t.Run("bad version", func(t *testing.T) {
		r := wiretest.Dial(t, s.Addr())
		f := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 42}, nil)
		f[5] = 9 // version
		r.Send(f)
		r.Expect(42, wire.StatusBadVersion)
		if !r.Closed() {
			t.Fatal("connection open after a bad version")
		}
	})
	for _, tc := range []struct {
		name  string
		frame func() []byte
	}{
		{"bad magic", func() []byte {
			f := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 1}, nil)
			f[4] = 0x00
			return f
		}},
		{"length below a header", func() []byte {
			f := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 1}, nil)
			binary.LittleEndian.PutUint32(f, 8)
			return f
		}},
		{"garbage", func() []byte { return []byte(strings.Repeat("GET / HTTP/1.1\r\n", 4)) }},
		{"truncated", func() []byte {
			return wire.AppendFrame(nil, wire.Header{Op: wire.OpGet, ID: 1}, make([]byte, 100))[:60]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := wiretest.Dial(t, s.Addr())
			r.Ping(1)
			r.Send(tc.frame())
			if tc.name == "truncated" {
				_ = r.NC.(interface{ CloseWrite() error }).CloseWrite()
			}
			if !r.Closed() {
				t.Fatal("connection open after a corrupt stream")
			}
		})
	}
	// The server still serves, on old and new connections, and lost
	// nothing.
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v", v, ok)
	}
	wiretest.Dial(t, s.Addr()).Ping(100)
	fam := gather(t, s)
	for _, kind := range []string{"too_large", "unknown_op", "bad_version", "corrupt", "not_a_request"} {
		if v := metricValue(fam, "cell_server_malformed_frames_total", map[string]string{"kind": kind}); v < 1 {
			t.Errorf("malformed frames of kind %s counted %v times", kind, v)
		}
	}
	if v := metricValue(fam, "cell_server_ops_total", map[string]string{"op": "get", "status": "BadRequest"}); v != 2 {
		t.Errorf("get BadRequest counted %v times, want 2", v)
	}
}

// Random bytes on many connections never stop the server.
func TestGarbageConnections(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "keep", "me")
	for i := range 50 {
		r := wiretest.Dial(t, s.Addr())
		b := make([]byte, 32+i*7)
		for j := range b {
			b[j] = byte(j*131 + i*17)
		}
		if i%2 == 0 {
			copy(b, wire.AppendFrame(nil, wire.Header{Op: wire.Op(i), ID: uint64(i)}, nil))
			binary.LittleEndian.PutUint32(b, uint32(len(b)))
		}
		r.Send(b)
		_ = r.NC.Close()
	}
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v", v, ok)
	}
}

// A request whose pointer names a split's target not yet in the tree (an
// empty inner meganode, which a client can name but no search reaches) is
// refused OutOfBounds, not answered Internal as if the tree were corrupt;
// the server goes on and the tree is sound. FuzzHandle found it (the input
// in testdata/fuzz/FuzzHandle/79b4153b82e6a796, after a split begin that
// the fuzzer had made earlier in the same process).
func TestRequestAtEmptyTargetRefused(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "keep", "me")
	var begun wire.SplitBeginReply
	if _, err := call(t, c, wire.OpSplitBegin, &wire.SplitBeginRequest{Source: s.Root(), Epoch: s.Epoch(), Level: 1,
		Range: wire.KeyRange{Min: []byte("0"), MaxInf: true}}, &begun); err != nil {
		t.Fatal(err)
	}
	y, key := begun.Meganode, []byte("0")
	for _, tc := range []struct {
		op  wire.Op
		req wire.Message
	}{
		{wire.OpGet, &wire.GetRequest{Ptr: y, Key: key}},
		{wire.OpContains, &wire.GetRequest{Ptr: y, Key: key}},
		{wire.OpSearch, &wire.SearchRequest{Ptr: y, Key: key, WantValue: true}},
		{wire.OpPut, &wire.PutRequest{Ptr: y, Key: key, Value: []byte("v")}},
		{wire.OpDelete, &wire.DeleteRequest{Ptr: y, Key: key}},
		{wire.OpRange, &wire.RangeRequest{Ptr: y, Start: key, EndUnbounded: true}},
		{wire.OpRange, &wire.RangeRequest{Ptr: y, StartUnbounded: true, End: []byte("9"), Reverse: true}},
	} {
		_, err := call(t, c, tc.op, tc.req, nil)
		if got := wire.StatusOf(err); got != wire.StatusOutOfBounds {
			t.Errorf("%v at the empty target %v: status %v (%v), want OutOfBounds", tc.op, y, got, err)
		}
	}
	// A separator's insertion whose start lies below the parent level it
	// names: no search led there either.
	ins := &wire.InsertChildRequest{Start: s.Root(), Level: 1, Child: s.Root(), Key: []byte("m")}
	if _, err := call(t, c, wire.OpInsertChild, ins, &wire.InsertChildReply{}); wire.StatusOf(err) != wire.StatusOutOfBounds {
		t.Errorf("insert child starting below its level: status %v (%v), want OutOfBounds", wire.StatusOf(err), err)
	}
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v", v, ok)
	}
	if err := rootTree(t, s).CheckErr(); err != nil {
		t.Fatal(err)
	}
}
