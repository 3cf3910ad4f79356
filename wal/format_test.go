package wal

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/testutil"
	"github.com/hashicorp/raft"
)

// TestGoldenLogRecord pins the log key and record format (format.go).
func TestGoldenLogRecord(t *testing.T) {
	var sb strings.Builder
	for _, c := range []struct {
		name   string
		region uint32
		l      raft.Log
	}{
		{"command with data and extensions", 0x00abcdef, raft.Log{
			Index: 258, Term: 7, Type: raft.LogCommand,
			Data: []byte("put k=v"), Extensions: []byte("ext"),
			AppendedAt: time.Unix(1_700_000_000, 123456789),
		}},
		{"noop, zero time", 1, raft.Log{Index: 1, Term: 1, Type: raft.LogNoop}},
		{"configuration, 20 bytes of data", 2, raft.Log{
			Index: math.MaxUint64, Term: 1 << 40, Type: raft.LogConfiguration,
			Data: []byte("0123456789abcdefghij"), AppendedAt: time.Unix(0, -1),
		}},
	} {
		rec, err := appendLog(nil, &c.l)
		if err != nil {
			t.Fatal(err)
		}
		sb.WriteString("# " + c.name + "\n## key\n")
		sb.WriteString(AnnotatedLogKey(logKey(c.region, c.l.Index)))
		sb.WriteString("## record\n")
		sb.WriteString(AnnotatedLogRecord(rec))
	}
	testutil.Golden(t, "log.golden", sb.String(), "on-disk log format")
}

func TestLogRecordRoundTrip(t *testing.T) {
	for _, l := range []*raft.Log{
		{},
		{Index: 1, Term: 1},
		{Index: 5, Term: 3, Type: raft.LogBarrier, Data: []byte{0}},
		{Index: 9, Term: 9, Type: raft.LogType(200), Extensions: []byte("only ext")},
		{Index: 1 << 60, Term: 2, Data: bytes.Repeat([]byte("d"), 5000), Extensions: []byte("e"), AppendedAt: time.Unix(2_000_000_000, 5)},
		genEntry(3, 15, 4),
	} {
		rec, err := appendLog(nil, l)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec) != recHeaderLen+len(l.Data)+len(l.Extensions) {
			t.Fatalf("record of %d bytes for %+v", len(rec), l)
		}
		var got raft.Log
		if err := decodeLog(rec, &got); err != nil {
			t.Fatalf("decode %+v: %v", l, err)
		}
		if d := sameLog(&got, l); d != "" {
			t.Fatal(d)
		}
		// The decoded slices are the caller's: appending to Data must not
		// spill into Extensions.
		if len(got.Data) > 0 && len(got.Extensions) > 0 {
			ext := string(got.Extensions)
			_ = append(got.Data, 'X')
			if string(got.Extensions) != ext {
				t.Fatal("Data and Extensions share capacity")
			}
		}
		again, _ := appendLog(nil, &got)
		if !bytes.Equal(again, rec) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, rec)
		}
	}
}

func TestDecodeLogRejects(t *testing.T) {
	good, _ := appendLog(nil, &raft.Log{Index: 1, Term: 1, Data: []byte("abc"), Extensions: []byte("de")})
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, b := range map[string][]byte{
		"empty":            nil,
		"short header":     good[:recHeaderLen-1],
		"version 0":        mod(func(b []byte) []byte { b[0] = 0; return b }),
		"version 2":        mod(func(b []byte) []byte { b[0] = 2; return b }),
		"reserved u16":     mod(func(b []byte) []byte { b[offRecRsv16] = 1; return b }),
		"reserved u32":     mod(func(b []byte) []byte { b[offRecRsv32+3] = 1; return b }),
		"truncated data":   good[:len(good)-1],
		"trailing byte":    append(bytes.Clone(good), 0),
		"data len too big": mod(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offRecDataLen:], 4); return b }),
		"huge lengths": mod(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[offRecDataLen:], math.MaxUint32)
			binary.LittleEndian.PutUint32(b[offRecExtLen:], math.MaxUint32)
			return b
		}),
	} {
		var l raft.Log
		err := decodeLog(b, &l)
		if err == nil {
			t.Errorf("%s: decoded %+v", name, l)
			continue
		}
		mustErrIs(t, err, ErrCorruption)
	}
}

// TestKeyOrder checks that a region's keys sort inside its bounds and
// that no two regions' or kinds' ranges overlap.
func TestKeyOrder(t *testing.T) {
	regions := []uint32{0, 1, 2, 0xffffff, 0x1000000, math.MaxUint32 - 1, math.MaxUint32}
	var prevUpper []byte
	for _, kind := range []byte{kindLog, kindStable} {
		for _, r := range regions {
			lower, upper := regionPrefix(kind, r), prefixUpper(kind, r)
			if bytes.Compare(lower, upper) >= 0 {
				t.Fatalf("kind %d region %d: lower %x >= upper %x", kind, r, lower, upper)
			}
			if prevUpper != nil && bytes.Compare(prevUpper, lower) > 0 {
				t.Fatalf("kind %d region %d: range starts at %x, before the previous one ends at %x", kind, r, lower, prevUpper)
			}
			prevUpper = upper
			var keys [][]byte
			if kind == kindLog {
				keys = [][]byte{logKey(r, 0), logKey(r, 1), logKey(r, 256), logKey(r, math.MaxUint64)}
			} else {
				keys = [][]byte{stableKey(r, nil), stableKey(r, []byte("CurrentTerm")), stableKey(r, []byte{0xff, 0xff, 0xff, 0xff, 0xff})}
			}
			for i, k := range keys {
				if bytes.Compare(k, lower) < 0 || bytes.Compare(k, upper) >= 0 {
					t.Fatalf("key %x outside [%x, %x)", k, lower, upper)
				}
				if i > 0 && bytes.Compare(keys[i-1], k) >= 0 {
					t.Fatalf("keys out of order: %x >= %x", keys[i-1], k)
				}
			}
		}
	}
	if bytes.Compare(metaFormatKey, regionPrefix(kindLog, 0)) >= 0 {
		t.Fatal("the meta key sorts inside the log keys")
	}
	if r, i, err := parseLogKey(logKey(0xabcdef, 42)); err != nil || r != 0xabcdef || i != 42 {
		t.Fatalf("parseLogKey: %d %d %v", r, i, err)
	}
}
