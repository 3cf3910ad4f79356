package rdma

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// TestRequestLayout pins the request frame byte for byte (doc.go's
// diagram).
func TestRequestLayout(t *testing.T) {
	segs := []Segment{{Off: 0x1122334455667788, Dst: make([]byte, 0x400)}, {Off: 8, Dst: make([]byte, 16)}}
	got := hex.EncodeToString(appendRequest(nil, 0x0102030405060708, 0x7a6b5c4d3e2f1001, 0xabcdef, segs))
	want := strings.Join([]string{
		"40000000", "cd", "01", "01", "00", // length 64, magic, version, op, flags
		"0807060504030201",         // request id
		"01102f3e4d5c6b7a",         // key
		"efcdab00", "0200", "0000", // region, nseg, rsv
		"8877665544332211", "00040000", "00000000", // segment 0
		"0800000000000000", "10000000", "00000000", // segment 1
	}, "")
	if got != want {
		t.Fatalf("request\n got %s\nwant %s", got, want)
	}
	h, err := parseRequestHeader(appendRequest(nil, 0x0102030405060708, 0x7a6b5c4d3e2f1001, 0xabcdef, segs))
	if err != nil || h.id != 0x0102030405060708 || h.key != 0x7a6b5c4d3e2f1001 || h.region != 0xabcdef || h.nseg != 2 {
		t.Fatalf("parse: %+v %v", h, err)
	}
}

// TestReplyLayout pins the reply header.
func TestReplyLayout(t *testing.T) {
	b := make([]byte, replyHeaderSize)
	putReplyHeader(b, 0x0102030405060708, statusOK, 0x400)
	if got, want := hex.EncodeToString(b), "10040000"+"cd"+"01"+"81"+"00"+"0807060504030201"; got != want {
		t.Fatalf("reply\n got %s\nwant %s", got, want)
	}
	putReplyHeader(b, 9, statusRevoked, 0)
	if got, want := hex.EncodeToString(b), "10000000"+"cd"+"01"+"81"+"02"+"0900000000000000"; got != want {
		t.Fatalf("revoked reply\n got %s\nwant %s", got, want)
	}
	id, st, n, err := parseReplyHeader(b)
	if err != nil || id != 9 || st != statusRevoked || n != 0 {
		t.Fatalf("parse: %d %v %d %v", id, st, n, err)
	}
}

// TestStatusCodes pins the status values and their errors.
func TestStatusCodes(t *testing.T) {
	for _, c := range []struct {
		st   status
		code byte
		err  error
		name string
	}{
		{statusOK, 0, nil, "ok"},
		{statusBadKey, 1, ErrBadKey, "bad-key"},
		{statusRevoked, 2, ErrRevoked, "revoked"},
		{statusOutOfBounds, 3, ErrOutOfBounds, "out-of-bounds"},
		{statusMisaligned, 4, ErrMisaligned, "misaligned"},
		{statusTooLarge, 5, ErrTooLarge, "too-large"},
		{statusTooManySegments, 6, ErrTooManySegments, "too-many-segments"},
		{numStatuses, 7, ErrProtocol, "status(7)"},
	} {
		if byte(c.st) != c.code || !errors.Is(c.st.err(), c.err) || c.st.err() == nil && c.err != nil || c.st.String() != c.name {
			t.Errorf("status %d: code %d err %v name %q", c.code, byte(c.st), c.st.err(), c.st.String())
		}
	}
}

// TestParseReplyRejects: malformed reply headers are protocol errors.
func TestParseReplyRejects(t *testing.T) {
	good := make([]byte, replyHeaderSize)
	putReplyHeader(good, 1, statusOK, 8)
	for name, f := range map[string]func(b []byte){
		"magic":         func(b []byte) { b[offMagic] = 0 },
		"version":       func(b []byte) { b[offVersion] = 0 },
		"op":            func(b []byte) { b[offOp] = opRead },
		"status":        func(b []byte) { b[offStatus] = byte(numStatuses) },
		"short":         func(b []byte) { le.PutUint32(b, replyHeaderSize-1) },
		"huge":          func(b []byte) { le.PutUint32(b, replyHeaderSize+MaxReadLenLimit+8) },
		"data on error": func(b []byte) { b[offStatus] = byte(statusBadKey) },
	} {
		b := append([]byte(nil), good...)
		f(b)
		if _, _, _, err := parseReplyHeader(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

// FuzzParseRequest: parsing any bytes never panics, and an accepted
// request re-encodes to the same bytes.
func FuzzParseRequest(f *testing.F) {
	f.Add(appendRequest(nil, 1, 2, 3, []Segment{{Off: 8, Dst: make([]byte, 8)}}))
	f.Add(appendRequest(nil, 1<<63, 1<<62, 1<<23, make([]Segment, 3)))
	f.Add(make([]byte, reqHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < reqHeaderSize {
			return
		}
		h, err := parseRequestHeader(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if len(b) < reqHeaderSize+segDescSize*h.nseg {
			return
		}
		// appendRequest reads only each Dst's length: they share one
		// buffer, and a length beyond it (up to 4 GiB) is written into
		// the encoding afterwards rather than allocated.
		const maxDst = 64 << 10
		dst := make([]byte, maxDst)
		segs := make([]Segment, h.nseg)
		lens := make([]uint64, h.nseg)
		for i := range segs {
			off, n, err := parseSegment(b[reqHeaderSize+segDescSize*i:])
			if err != nil {
				return
			}
			segs[i] = Segment{Off: off, Dst: dst[:min(n, maxDst)]}
			lens[i] = n
		}
		again := appendRequest(nil, h.id, h.key, h.region, segs)
		for i, n := range lens {
			if n > maxDst {
				le.PutUint32(again[reqHeaderSize+segDescSize*i+offSegLen:], uint32(n))
			}
		}
		if string(again) != string(b[:len(again)]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b[:len(again)])
		}
	})
}

// FuzzParseReply: parsing any reply header never panics; an accepted one
// re-encodes to the same bytes.
func FuzzParseReply(f *testing.F) {
	b := make([]byte, replyHeaderSize)
	putReplyHeader(b, 7, statusOK, 1024)
	f.Add(append([]byte(nil), b...))
	putReplyHeader(b, 7, statusTooLarge, 0)
	f.Add(append([]byte(nil), b...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < replyHeaderSize {
			return
		}
		id, st, n, err := parseReplyHeader(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		again := make([]byte, replyHeaderSize)
		putReplyHeader(again, id, st, n)
		if string(again) != string(b[:replyHeaderSize]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b[:replyHeaderSize])
		}
	})
}
