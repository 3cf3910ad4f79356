package server

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/testutil"
	"github.com/cellstore/cell/wire"
)

// The log's record format (apply.go) is pinned by an annotated hex dump of
// one record of every kind and phase: a change of the format is a diff of
// testdata/records.golden. Every record also decodes and re-encodes to
// itself.
func TestRecordsGolden(t *testing.T) {
	x := blink.MakePtr(3, 0x1000)
	y := blink.MakePtr(3, 0x21000)
	remoteY := blink.MakePtr(9, 0x41000)
	recs := []struct {
		what string
		r    writeRecord
	}{
		{"put", writeRecord{Kind: recPut, Meganode: x, ClientID: 0x1122334455667788, Seq: 42, Key: []byte("apple"), Value: []byte("red")}},
		{"delete", writeRecord{Kind: recDelete, Meganode: x, ClientID: 7, Seq: 43, Key: []byte("apple")}},
		{"child", writeRecord{Kind: recChild, Meganode: x, Key: []byte("m"), Value: le.AppendUint64(nil, uint64(y))}},
		{"split start (local: apply chooses Y)", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseStart})}},
		{"split start (remote Y)", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseStart, New: remoteY})}},
		{"split copy", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseCopy, New: y, Batch: 16, Cursor: []byte("p")})}},
		{"split link (remote: Y's root)", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseLink, New: remoteY, Cursor: le.AppendUint64(nil, uint64(remoteY+1024))})}},
		{"split free", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseFree, New: y, Batch: 256})}},
		{"split root", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseRoot,
			Cursor: appendRootEntries(nil, []levelEntry{{key: []byte{0}, ptr: x}, {key: []byte("m"), ptr: y}})})}},
		{"split end", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseEnd, New: y})}},
		{"split abort", writeRecord{Kind: recSplit, Meganode: x, Key: []byte("m"), Value: appendSplitBody(nil, &splitBody{Phase: phaseAbort, New: y})}},
		{"target begin", writeRecord{Kind: recTarget, Key: []byte("m"), Value: appendTargetBody(nil, &targetBody{Phase: targetBegin, Level: 1, Right: y, Source: x, Payload: []byte("z")})}},
		{"target append (leaf entries)", writeRecord{Kind: recTarget, Meganode: remoteY, Value: appendTargetBody(nil, &targetBody{Phase: targetAppend,
			Payload: appendEntries(nil, false, []blink.Entry{{Key: []byte("m"), Value: []byte("1")}, {Key: []byte("n"), Value: []byte("22")}})})}},
		{"target append (inner entries)", writeRecord{Kind: recTarget, Meganode: remoteY, Value: appendTargetBody(nil, &targetBody{Phase: targetAppend,
			Payload: appendEntries(nil, true, []blink.Entry{{Key: []byte("m"), Child: y}})})}},
		{"target commit", writeRecord{Kind: recTarget, Meganode: remoteY, Value: appendTargetBody(nil, &targetBody{Phase: targetCommit})}},
		{"region", writeRecord{Kind: recRegion, Value: appendRegionBody(nil, regionBody{Size: 1 << 30, MeganodeSize: 64 << 20, NodeSize: 1024})}},
		{"root format", writeRecord{Kind: recRoot, Value: appendRootBody(nil, rootFormat)}},
		{"root publish", writeRecord{Kind: recRoot, Meganode: x, Value: appendRootBody(nil, rootPublish)}},
	}
	var out strings.Builder
	for _, tc := range recs {
		b := appendRecord(nil, &tc.r)
		r, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if !bytes.Equal(appendRecord(nil, &r), b) {
			t.Fatalf("%s does not re-encode to itself", tc.what)
		}
		fmt.Fprintf(&out, "# %s (%d bytes)\n", tc.what, len(b))
		dumpRecord(&out, b)
		out.WriteString("\n")
	}
	testutil.Golden(t, "records.golden", out.String(), "log record format")
}

// dumpRecord writes an annotated hex dump of a record: the header's
// fields, then the key and the value in rows of 16 bytes.
func dumpRecord(w *strings.Builder, b []byte) {
	row := func(off int, p []byte, note string) {
		var hex strings.Builder
		for i, c := range p {
			if i > 0 {
				hex.WriteByte(' ')
			}
			fmt.Fprintf(&hex, "%02x", c)
		}
		fmt.Fprintf(w, "%04x  %-47s  %s\n", off, hex.String(), note)
	}
	field := func(off, n int, note string) { row(off, b[off:off+n], note) }
	field(0, 1, fmt.Sprintf("version %d", b[0]))
	field(1, 1, fmt.Sprintf("kind %d", b[1]))
	field(2, 2, "reserved")
	field(4, 4, fmt.Sprintf("key length %d", le.Uint32(b[4:])))
	field(8, 8, fmt.Sprintf("meganode %v", blink.Ptr(le.Uint64(b[8:]))))
	field(16, 8, fmt.Sprintf("client id %#x", le.Uint64(b[16:])))
	field(24, 8, fmt.Sprintf("sequence %d", le.Uint64(b[24:])))
	field(32, 4, fmt.Sprintf("value length %d", le.Uint32(b[32:])))
	field(36, 4, "reserved")
	kl := int(le.Uint32(b[4:]))
	rows := func(start, end int, what string) {
		for off := start; off < end; off += 16 {
			note := ""
			if off == start {
				note = what
			}
			row(off, b[off:min(off+16, end)], note)
		}
	}
	rows(recHeaderSize, recHeaderSize+kl, fmt.Sprintf("key %q", b[recHeaderSize:recHeaderSize+kl]))
	rows(recHeaderSize+kl, len(b), "value")
}

// decodeEntries never panics, and what it accepts re-encodes to itself.
func FuzzDecodeEntries(f *testing.F) {
	f.Add(appendEntries(nil, false, []blink.Entry{{Key: []byte("m"), Value: []byte("1")}}))
	f.Add(appendEntries(nil, true, []blink.Entry{{Key: []byte("m"), Child: 77}}))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		inner, ents, err := decodeEntries(b)
		if err != nil {
			return
		}
		if !bytes.Equal(appendEntries(nil, inner, ents), b) {
			t.Fatal("accepted entries do not re-encode to themselves")
		}
	})
}

// The bodies of region, root, target and split records and a root
// record's entries decode without panicking, and what each decoder
// accepts re-encodes to itself, so one value has one encoding. The first
// byte of an input picks the decoder.
func FuzzDecodeBodies(f *testing.F) {
	x := blink.MakePtr(3, 0x1000)
	seeds := [][]byte{
		appendRegionBody(nil, regionBody{Size: 1 << 30, MeganodeSize: 1 << 20, NodeSize: 4096}),
		appendRootBody(nil, rootPublish),
		appendTargetBody(nil, &targetBody{Phase: targetBegin, MaxInf: true, Level: 1, Right: x, Source: x, Payload: []byte("m")}),
		appendTargetBody(nil, &targetBody{Phase: targetCommit, Right: x, Source: x, Payload: digestSeed()}),
		appendSplitBody(nil, &splitBody{Phase: phaseCopy, New: x, Batch: 16, Cursor: []byte("p")}),
		appendRootEntries(nil, []levelEntry{{key: []byte("a"), ptr: x}, {key: []byte("m"), ptr: x + 4096}}),
	}
	for i, s := range seeds {
		f.Add(append([]byte{[]byte{0, 1, 2, 2, 3, 4}[i]}, s...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		v := b[1:]
		var got []byte
		switch b[0] % 5 {
		case 0:
			body, err := decodeRegionBody(v)
			if err != nil {
				return
			}
			got = appendRegionBody(nil, body)
		case 1:
			p, err := decodeRootBody(v)
			if err != nil {
				return
			}
			got = appendRootBody(nil, p)
		case 2:
			body, err := decodeTargetBody(v)
			if err != nil {
				return
			}
			got = appendTargetBody(nil, &body)
		case 3:
			body, err := decodeSplitBody(v)
			if err != nil {
				return
			}
			got = appendSplitBody(nil, &body)
		case 4:
			ents, err := decodeRootEntries(v)
			if err != nil {
				return
			}
			for i, e := range ents {
				if len(e.key) == 0 || e.ptr.IsNil() || i > 0 && bytes.Compare(ents[i-1].key, e.key) >= 0 {
					t.Fatalf("accepted root entry %d %q → %v", i, e.key, e.ptr)
				}
			}
			got = appendRootEntries(nil, ents)
		}
		if !bytes.Equal(got, v) {
			t.Fatalf("decoder %d: accepted body does not re-encode to itself:\n in %x\nout %x", b[0]%5, v, got)
		}
	})
}

// digestSeed is a session digest with a client and an evicted filter of
// two levels, one of them legacy.
func digestSeed() []byte {
	var t sessions
	t.record(7, 3, false, 1)
	t.markEvicted(99)
	t.evicted.merge(&evictedFilter{levels: []filterLevel{{scheme: schemeLegacy, bits: make([]byte, legacyFilterBits/8)}}})
	return t.appendDigest(nil, wire.DefaultMaxFrameSize)
}
