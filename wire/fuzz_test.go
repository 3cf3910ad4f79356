package wire

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzReadFrame feeds arbitrary streams to a Reader: it never panics, and
// every frame it accepts re-encodes to the exact bytes it consumed.
func FuzzReadFrame(f *testing.F) {
	for i, s := range samples() {
		f.Add(AppendFrame(nil, Header{Op: s.op, ID: uint64(i)}, s.msg.AppendTo(nil)))
	}
	f.Add(AppendFrame(AppendFrame(nil, Header{Op: OpPing, ID: 1}, []byte("x")), Header{Op: 0x07, ID: 2}, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, Magic, Version})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, pooled := range []bool{false, true} {
			rd, err := NewReader(bytes.NewReader(data), &Options{MaxFrameSize: 512})
			if err != nil {
				t.Fatal(err)
			}
			off := 0
			for range 64 {
				var fr Frame
				if pooled {
					fr, err = rd.ReadFramePooled()
				} else {
					fr, err = rd.ReadFrame()
				}
				if err != nil {
					if !InSync(err) {
						break
					}
					off += int(fr.Header.Length)
					continue
				}
				n := int(fr.Header.Length)
				if got := AppendFrame(nil, fr.Header, fr.Body); !bytes.Equal(got, data[off:off+n]) {
					t.Fatalf("frame at %d re-encodes as %x, read from %x", off, got, data[off:off+n])
				}
				off += n
				fr.Release()
			}
		}
	})
}

// FuzzHeader: Decode never panics and an accepted header re-encodes to the
// same bytes.
func FuzzHeader(f *testing.F) {
	f.Add(AppendFrame(nil, Header{Op: OpGet, Flags: FlagReply, ID: 5, Status: StatusNotFound, QueueNanos: 7}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Header
		if h.Decode(data) != nil {
			return
		}
		got := make([]byte, HeaderSize)
		h.put(got, h.Length)
		if !bytes.Equal(got, data[:HeaderSize]) {
			t.Fatalf("header %v re-encodes as %x, read from %x", h, got, data[:HeaderSize])
		}
	})
}

// fuzzMessage checks a body decoder: it never panics; what it accepts
// re-encodes to the same bytes (the encoding is canonical) and decodes to
// the same value again.
func fuzzMessage(f *testing.F, fresh func() Message) {
	typ := reflect.TypeOf(fresh())
	for _, s := range samples() {
		if reflect.TypeOf(s.msg) == typ {
			f.Add(s.msg.AppendTo(nil))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := fresh()
		if m.Decode(data) != nil {
			return
		}
		enc := m.AppendTo(nil)
		if !bytes.Equal(enc, data) {
			t.Fatalf("%+v re-encodes as %x, decoded from %x", m, enc, data)
		}
		m2 := fresh()
		if err := m2.Decode(enc); err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", m, m2, err)
		}
	})
}

func FuzzSearchRequest(f *testing.F) { fuzzMessage(f, func() Message { return new(SearchRequest) }) }
func FuzzSearchReply(f *testing.F)   { fuzzMessage(f, func() Message { return new(SearchReply) }) }
func FuzzGetRequest(f *testing.F)    { fuzzMessage(f, func() Message { return new(GetRequest) }) }
func FuzzGetReply(f *testing.F)      { fuzzMessage(f, func() Message { return new(GetReply) }) }
func FuzzContainsReply(f *testing.F) { fuzzMessage(f, func() Message { return new(ContainsReply) }) }
func FuzzPutRequest(f *testing.F)    { fuzzMessage(f, func() Message { return new(PutRequest) }) }
func FuzzDeleteRequest(f *testing.F) { fuzzMessage(f, func() Message { return new(DeleteRequest) }) }
func FuzzRangeRequest(f *testing.F)  { fuzzMessage(f, func() Message { return new(RangeRequest) }) }
func FuzzRangeReply(f *testing.F)    { fuzzMessage(f, func() Message { return new(RangeReply) }) }
func FuzzNodeDumpRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(NodeDumpRequest) })
}
func FuzzNodeDumpReply(f *testing.F) { fuzzMessage(f, func() Message { return new(NodeDumpReply) }) }
func FuzzMetadataRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(MetadataRequest) })
}
func FuzzMetadataReply(f *testing.F) { fuzzMessage(f, func() Message { return new(MetadataReply) }) }
func FuzzErrorReply(f *testing.F)    { fuzzMessage(f, func() Message { return new(ErrorReply) }) }
func FuzzSplitBeginRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SplitBeginRequest) })
}
func FuzzSplitAppendRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SplitAppendRequest) })
}
func FuzzInsertChildRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(InsertChildRequest) })
}
func FuzzMeganodeReply(f *testing.F) { fuzzMessage(f, func() Message { return new(MeganodeReply) }) }
func FuzzCheckRequest(f *testing.F)  { fuzzMessage(f, func() Message { return new(CheckRequest) }) }
func FuzzCheckReply(f *testing.F)    { fuzzMessage(f, func() Message { return new(CheckReply) }) }
func FuzzMeganodeRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(MeganodeRequest) })
}
func FuzzInsertChildReply(f *testing.F) {
	fuzzMessage(f, func() Message { return new(InsertChildReply) })
}
func FuzzSplitBeginReply(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SplitBeginReply) })
}
func FuzzSplitAppendReply(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SplitAppendReply) })
}
func FuzzSplitEndRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(SplitEndRequest) })
}
func FuzzReplicaHashRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ReplicaHashRequest) })
}
func FuzzReplicaHashReply(f *testing.F) {
	fuzzMessage(f, func() Message { return new(ReplicaHashReply) })
}
func FuzzMoveReplicaRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(MoveReplicaRequest) })
}
func FuzzTransferLeaderRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(TransferLeaderRequest) })
}
