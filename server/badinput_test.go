package server

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
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
	ping := func(r *rawConn, id uint64) {
		t.Helper()
		r.sendFrame(wire.OpPing, id, []byte("p"))
		h, body := r.reply()
		if h.ID != id || h.Status != wire.StatusOK || string(body) != "p" {
			t.Fatalf("ping reply %v %q", h, body)
		}
	}
	expect := func(r *rawConn, id uint64, st wire.Status) {
		t.Helper()
		h, _ := r.reply()
		if h.ID != id || h.Status != st || !h.IsReply() {
			t.Fatalf("reply %v, want id %d status %v", h, id, st)
		}
	}

	t.Run("in sync", func(t *testing.T) {
		r := dialRaw(t, s)
		// Body that does not decode: truncated, trailing bytes, bad flags.
		r.sendFrame(wire.OpGet, 1, []byte{1, 2, 3})
		expect(r, 1, wire.StatusBadRequest)
		good := (&wire.GetRequest{Key: []byte("keep")}).AppendTo(nil)
		r.sendFrame(wire.OpGet, 2, append(bytes.Clone(good), 0))
		expect(r, 2, wire.StatusBadRequest)
		sr := (&wire.SearchRequest{Key: []byte("keep")}).AppendTo(nil)
		sr[16] = 0x80 // unknown flag bit
		r.sendFrame(wire.OpSearch, 3, sr)
		expect(r, 3, wire.StatusBadRequest)
		// A key length that points past the body.
		bad := (&wire.PutRequest{Key: []byte("k"), Value: []byte("v")}).AppendTo(nil)
		binary.LittleEndian.PutUint32(bad[32:], 1<<31)
		r.sendFrame(wire.OpPut, 4, bad)
		expect(r, 4, wire.StatusBadRequest)
		// Unknown ops: reserved, extension, never assigned.
		r.sendFrame(0x30, 5, nil)
		expect(r, 5, wire.StatusUnknownOp)
		r.sendFrame(0xc7, 6, []byte("ext"))
		expect(r, 6, wire.StatusUnknownOp)
		r.sendFrame(0x99, 7, []byte("zzz"))
		expect(r, 7, wire.StatusUnknownOp)
		// A reply frame sent as a request.
		r.send(wire.AppendFrame(nil, wire.Header{Op: wire.OpGet, ID: 8, Flags: wire.FlagReply}, good))
		expect(r, 8, wire.StatusBadRequest)
		// Too large: the body is skipped, the stream stays in sync.
		r.sendFrame(wire.OpPut, 9, make([]byte, 64<<10+1))
		expect(r, 9, wire.StatusFrameTooLarge)
		r.sendFrame(wire.OpGet, 10, good)
		h, body := r.reply()
		var gr wire.GetReply
		if h.ID != 10 || h.Status != wire.StatusOK || gr.Decode(body) != nil || string(gr.Value) != "me" {
			t.Fatalf("get after malformed frames: %v %q", h, body)
		}
		ping(r, 11)
	})
	t.Run("bad version", func(t *testing.T) {
		r := dialRaw(t, s)
		f := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 42}, nil)
		f[5] = 9 // version
		r.send(f)
		expect(r, 42, wire.StatusBadVersion)
		if !r.closed() {
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
			r := dialRaw(t, s)
			ping(r, 1)
			r.send(tc.frame())
			if tc.name == "truncated" {
				_ = r.nc.(interface{ CloseWrite() error }).CloseWrite()
			}
			if !r.closed() {
				t.Fatal("connection open after a corrupt stream")
			}
		})
	}
	// The server still serves, on old and new connections, and lost
	// nothing.
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v", v, ok)
	}
	ping(dialRaw(t, s), 100)
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
		r := dialRaw(t, s)
		b := make([]byte, 32+i*7)
		for j := range b {
			b[j] = byte(j*131 + i*17)
		}
		if i%2 == 0 {
			copy(b, wire.AppendFrame(nil, wire.Header{Op: wire.Op(i), ID: uint64(i)}, nil))
			binary.LittleEndian.PutUint32(b, uint32(len(b)))
		}
		r.send(b)
		_ = r.nc.Close()
	}
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v", v, ok)
	}
}
