package rsm

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
		r    Record
	}{
		{"put", Record{Kind: KindPut, Meganode: x, ClientID: 0x1122334455667788, Seq: 42, Key: []byte("apple"), Value: []byte("red")}},
		{"delete", Record{Kind: KindDelete, Meganode: x, ClientID: 7, Seq: 43, Key: []byte("apple")}},
		{"child", Record{Kind: KindChild, Meganode: x, Key: []byte("m"), Value: le.AppendUint64(nil, uint64(y))}},
		{"split start (local: apply chooses Y)", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseStart})}},
		{"split start (remote Y)", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseStart, New: remoteY})}},
		{"split copy", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseCopy, New: y, Batch: 16, Cursor: []byte("p")})}},
		{"split link (remote: Y's root)", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseLink, New: remoteY, Cursor: le.AppendUint64(nil, uint64(remoteY+1024))})}},
		{"split free", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseFree, New: y, Batch: 256})}},
		{"split root", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseRoot,
			Cursor: AppendRootEntries(nil, []LevelEntry{{Key: []byte{0}, Ptr: x}, {Key: []byte("m"), Ptr: y}})})}},
		{"split end", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseEnd, New: y})}},
		{"split abort", Record{Kind: KindSplit, Meganode: x, Key: []byte("m"), Value: AppendSplitBody(nil, &SplitBody{Phase: PhaseAbort, New: y})}},
		{"target begin", Record{Kind: KindTarget, Key: []byte("m"), Value: AppendTargetBody(nil, &TargetBody{Phase: TargetBegin, Level: 1, Right: y, Source: x, Payload: []byte("z")})}},
		{"target append (leaf entries)", Record{Kind: KindTarget, Meganode: remoteY, Value: AppendTargetBody(nil, &TargetBody{Phase: TargetAppend,
			Payload: AppendEntries(nil, false, false, []blink.Entry{{Key: []byte("m"), Value: []byte("1")}, {Key: []byte("n"), Value: []byte("22")}})})}},
		{"target append (inner entries)", Record{Kind: KindTarget, Meganode: remoteY, Value: AppendTargetBody(nil, &TargetBody{Phase: TargetAppend,
			Payload: AppendEntries(nil, true, false, []blink.Entry{{Key: []byte("m"), Child: y}})})}},
		{"target commit", Record{Kind: KindTarget, Meganode: remoteY, Value: AppendTargetBody(nil, &TargetBody{Phase: TargetCommit})}},
		{"region", Record{Kind: KindRegion, Value: AppendRegionBody(nil, Layout{Size: 1 << 30, MeganodeSize: 64 << 20, NodeSize: 1024})}},
		{"root format", Record{Kind: KindRoot, Value: AppendRootBody(nil, RootFormat)}},
		{"root publish", Record{Kind: KindRoot, Meganode: x, Value: AppendRootBody(nil, RootPublish)}},
		{"version", Record{Kind: KindVersion}},
		{"cond (put if version = 7)", Record{Kind: KindCond, Meganode: x, ClientID: 9, Seq: 3, Key: []byte("k"),
			Value: AppendCondBody(nil, &CondBody{Op: CondPut, Target: CondVersion, Compare: CmpEqual, ExpectedVersion: 7, Value: []byte("new")})}},
		{"cond (delete if value != old)", Record{Kind: KindCond, Meganode: x, Key: []byte("k"),
			Value: AppendCondBody(nil, &CondBody{Op: CondDelete, Target: CondValue, Compare: CmpNotEqual, Expected: []byte("old")})}},
		{"target append (leaf entries with words)", Record{Kind: KindTarget, Meganode: remoteY, Value: AppendTargetBody(nil, &TargetBody{Phase: TargetAppend,
			Payload: AppendEntries(nil, false, true, []blink.Entry{{Key: []byte("m"), Value: []byte("1"), Word: blink.MakeWord(40, false, false)}})})}},
		{"target commit (source clock)", Record{Kind: KindTarget, Meganode: remoteY, Value: AppendTargetBody(nil, &TargetBody{Phase: TargetCommit, Clock: 0x77})}},
		{"txn (a read, a range, a put and a delete)", Record{Kind: KindTxn, Meganode: x, ClientID: 9, Seq: 4, Value: AppendTxnBody(nil, &TxnBody{
			Reads:  []TxnRead{{Key: []byte("a"), Version: 7}},
			Ranges: []TxnRange{{Start: []byte("p/"), End: []byte("p0"), Limit: 10, Count: 2, Hash: 0x1122334455667788}},
			Writes: []TxnWrite{{Op: TxnPut, Key: []byte("a"), Value: []byte("1")}, {Op: TxnDelete, Key: []byte("c")}}})}},
	}
	var out strings.Builder
	for _, tc := range recs {
		b := AppendRecord(nil, &tc.r)
		r, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if !bytes.Equal(AppendRecord(nil, &r), b) {
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
	rows(RecordHeaderSize, RecordHeaderSize+kl, fmt.Sprintf("key %q", b[RecordHeaderSize:RecordHeaderSize+kl]))
	rows(RecordHeaderSize+kl, len(b), "value")
}

// DecodeEntries never panics, and what it accepts re-encodes to itself.
func FuzzDecodeEntries(f *testing.F) {
	f.Add(AppendEntries(nil, false, false, []blink.Entry{{Key: []byte("m"), Value: []byte("1")}}))
	f.Add(AppendEntries(nil, false, true, []blink.Entry{{Key: []byte("m"), Value: []byte("1"), Word: 7 << 2}}))
	f.Add(AppendEntries(nil, true, false, []blink.Entry{{Key: []byte("m"), Child: 77}}))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		inner, words, ents, err := DecodeEntries(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendEntries(nil, inner, words, ents), b) {
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
		AppendRegionBody(nil, Layout{Size: 1 << 30, MeganodeSize: 1 << 20, NodeSize: 4096}),
		AppendRootBody(nil, RootPublish),
		AppendTargetBody(nil, &TargetBody{Phase: TargetBegin, MaxInf: true, Level: 1, Right: x, Source: x, Payload: []byte("m")}),
		AppendTargetBody(nil, &TargetBody{Phase: TargetCommit, Right: x, Source: x, Payload: digestSeed()}),
		AppendSplitBody(nil, &SplitBody{Phase: PhaseCopy, New: x, Batch: 16, Cursor: []byte("p")}),
		AppendRootEntries(nil, []LevelEntry{{Key: []byte("a"), Ptr: x}, {Key: []byte("m"), Ptr: x + 4096}}),
		AppendCondBody(nil, &CondBody{Op: CondPut, Target: CondValue, Compare: CmpEqual, Expected: []byte("old"), Value: []byte("new")}),
		AppendTxnBody(nil, &TxnBody{Reads: []TxnRead{{Key: []byte("a"), Version: 7}},
			Ranges: []TxnRange{{Start: []byte("p"), Limit: 3, Count: 1, Hash: 9}},
			Writes: []TxnWrite{{Op: TxnPut, Key: []byte("a"), Value: []byte("1")}, {Op: TxnDelete, Key: []byte("b")}}}),
	}
	for i, s := range seeds {
		f.Add(append([]byte{[]byte{0, 1, 2, 2, 3, 4, 5, 6}[i]}, s...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		v := b[1:]
		var got []byte
		switch b[0] % 7 {
		case 0:
			body, err := DecodeRegionBody(v)
			if err != nil {
				return
			}
			got = AppendRegionBody(nil, body)
		case 1:
			p, err := DecodeRootBody(v)
			if err != nil {
				return
			}
			got = AppendRootBody(nil, p)
		case 2:
			body, err := DecodeTargetBody(v)
			if err != nil {
				return
			}
			got = AppendTargetBody(nil, &body)
		case 3:
			body, err := DecodeSplitBody(v)
			if err != nil {
				return
			}
			got = AppendSplitBody(nil, &body)
		case 4:
			ents, err := DecodeRootEntries(v)
			if err != nil {
				return
			}
			for i, e := range ents {
				if len(e.Key) == 0 || e.Ptr.IsNil() || i > 0 && bytes.Compare(ents[i-1].Key, e.Key) >= 0 {
					t.Fatalf("accepted root entry %d %q → %v", i, e.Key, e.Ptr)
				}
			}
			got = AppendRootEntries(nil, ents)
		case 5:
			body, err := DecodeCondBody(v)
			if err != nil {
				return
			}
			got = AppendCondBody(nil, &body)
		case 6:
			body, err := DecodeTxnBody(v)
			if err != nil {
				return
			}
			got = AppendTxnBody(nil, &body)
		}
		if !bytes.Equal(got, v) {
			t.Fatalf("decoder %d: accepted body does not re-encode to itself:\n in %x\nout %x", b[0]%7, v, got)
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
