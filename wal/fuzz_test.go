package wal

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// FuzzDecodeLog: the decoder never panics, every rejection wraps
// ErrCorruption, and whatever it accepts re-encodes byte for byte.
func FuzzDecodeLog(f *testing.F) {
	for _, l := range []*raft.Log{
		{},
		{Index: 1, Term: 1, Type: raft.LogNoop},
		{Index: 7, Term: 3, Data: []byte("data"), Extensions: []byte("ext"), AppendedAt: time.Unix(1, 2)},
		genEntry(1, 3, 2),
	} {
		rec, _ := appendLog(nil, l)
		f.Add(rec)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		err := decodeLog(b, &l)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v does not wrap ErrCorruption", err)
			}
			return
		}
		again, err := appendLog(nil, &l)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
		_ = AnnotatedLogRecord(b)
	})
}

// FuzzSnapshotFiles: the meta decoder and the dumps never panic on any
// bytes.
func FuzzSnapshotFiles(f *testing.F) {
	m := &snapMetaFile{SnapshotMeta: raft.SnapshotMeta{Version: 1, ID: "1-2-3", Index: 2, Term: 1, Size: 3}, ChunkSize: 2}
	mb, _ := encodeMeta(m)
	f.Add(mb)
	data := appendSnapHeader(nil, 2)
	data = append(data, 2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b')
	data = appendTrailer(data, trailer{total: 2, chunks: 1})
	f.Add(data)
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeMeta(b); err != nil && !errors.Is(err, ErrCorruption) {
			t.Fatalf("error %v does not wrap ErrCorruption", err)
		}
		_ = AnnotatedSnapshotMeta(b)
		_ = AnnotatedSnapshotData(b)
	})
}

// FuzzSnapshotReader writes payload as a snapshot (chunk size 7), XORs one
// byte of its data file with x, and reads it back: the reader never
// panics, and either returns exactly payload (x == 0) or fails with
// ErrCorruption, from Open or from Read, before io.EOF.
func FuzzSnapshotReader(f *testing.F) {
	f.Add([]byte("hello, snapshot!!"), uint16(20), byte(1))
	f.Add([]byte{}, uint16(3), byte(0x80))
	f.Add(bytes.Repeat([]byte{7}, 100), uint16(140), byte(0xff))
	f.Fuzz(func(t *testing.T, payload []byte, pos uint16, x byte) {
		fs := vfs.NewMem()
		s, err := OpenSnapshots(SnapshotOptions{FS: fs, Dir: "s", ChunkSize: 7, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		st := s.Region(1)
		sink, err := st.Create(1, 1, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write(payload); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		path := "s/00000001/" + sink.ID() + "/data"
		b, err := readFileAll(fs, path)
		if err != nil {
			t.Fatal(err)
		}
		b[int(pos)%len(b)] ^= x
		if err := rewrite(fs, path, b); err != nil {
			t.Fatal(err)
		}
		_, got, err := readSnapshot(st, sink.ID())
		switch {
		case x == 0 && (err != nil || !bytes.Equal(got, payload)):
			t.Fatalf("undamaged snapshot: %v", err)
		case x != 0 && err == nil:
			t.Fatalf("damaged snapshot read back without error (%d bytes)", len(got))
		case x != 0 && !errors.Is(err, ErrCorruption):
			t.Fatalf("damage reported as %v, not ErrCorruption", err)
		}
	})
}
