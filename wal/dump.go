package wal

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"
)

// Dumps for people: golden tests, `cellctl`, debugging. They never panic.

// annotator prints byte ranges as offset, hex (16 bytes a line) and a note.
type annotator struct {
	sb  strings.Builder
	b   []byte
	off int
}

// field prints the next n bytes with note (n is clipped to what is left).
func (a *annotator) field(n int, note string) {
	n = min(n, len(a.b)-a.off)
	for o := 0; o < n; o += 16 {
		w := min(16, n-o)
		if o > 0 {
			note = "  (cont.)"
		}
		fmt.Fprintf(&a.sb, "%04x  %-48s %s\n", a.off+o, spacedHex(a.b[a.off+o:a.off+o+w]), note)
	}
	a.off += n
}

func spacedHex(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}

// AnnotatedLogKey returns an annotated hex dump of a log key.
func AnnotatedLogKey(k []byte) string {
	region, index, err := parseLogKey(k)
	if err != nil {
		return err.Error() + "\n" + hex.Dump(k)
	}
	a := annotator{b: k}
	a.field(1, "kind 1 (log)")
	a.field(4, fmt.Sprintf("region %d (big-endian)", region))
	a.field(8, fmt.Sprintf("index %d (big-endian)", index))
	return a.sb.String()
}

// AnnotatedLogRecord returns an annotated hex dump of a log record (format
// in format.go); a record that does not decode is dumped raw after the
// error.
func AnnotatedLogRecord(b []byte) string {
	var l raft.Log
	if err := decodeLog(b, &l); err != nil {
		return err.Error() + "\n" + hex.Dump(b)
	}
	a := annotator{b: b}
	a.field(1, fmt.Sprintf("version %d", b[offRecVersion]))
	a.field(1, fmt.Sprintf("type %d (%s)", b[offRecType], l.Type))
	a.field(2, "reserved")
	a.field(4, fmt.Sprintf("data length %d", len(l.Data)))
	a.field(8, fmt.Sprintf("index %d", l.Index))
	a.field(8, fmt.Sprintf("term %d", l.Term))
	a.field(8, fmt.Sprintf("appendedAt %d ns (%s)", unixNanos(l.AppendedAt), fmtTime(l)))
	a.field(4, fmt.Sprintf("extensions length %d", len(l.Extensions)))
	a.field(4, "reserved")
	if len(l.Data) > 0 {
		a.field(len(l.Data), fmt.Sprintf("data %q", l.Data))
	}
	if len(l.Extensions) > 0 {
		a.field(len(l.Extensions), fmt.Sprintf("extensions %q", l.Extensions))
	}
	return a.sb.String()
}

func fmtTime(l raft.Log) string {
	if l.AppendedAt.IsZero() {
		return "zero"
	}
	return l.AppendedAt.UTC().Format("2006-01-02T15:04:05.999999999Z")
}

// AnnotatedSnapshotData returns an annotated hex dump of a snapshot data
// file (format in snapformat.go), chunk by chunk; it stops at the first
// thing that does not parse and dumps the rest raw.
func AnnotatedSnapshotData(b []byte) string {
	le := binary.LittleEndian
	a := annotator{b: b}
	rest := func(why string) string {
		fmt.Fprintf(&a.sb, "%04x  %s:\n%s", a.off, why, hex.Dump(b[a.off:]))
		return a.sb.String()
	}
	if len(b) < snapHeaderLen {
		return rest("short header")
	}
	a.field(8, fmt.Sprintf("magic %q", b[:8]))
	a.field(4, fmt.Sprintf("version %d", le.Uint32(b[8:])))
	a.field(4, fmt.Sprintf("chunk size %d", le.Uint32(b[12:])))
	for i := 0; ; i++ {
		if len(b)-a.off < chunkHeaderLen {
			return rest("short chunk header")
		}
		n := le.Uint32(b[a.off:])
		if n == 0 {
			if len(b)-a.off != trailerLen {
				return rest("trailer not at the end")
			}
			t, err := parseTrailer(b[a.off:])
			if err != nil {
				return rest(err.Error())
			}
			a.field(4, "trailer mark (length 0)")
			a.field(4, fmt.Sprintf("trailer crc %#08x", le.Uint32(b[a.off:])))
			a.field(8, fmt.Sprintf("total length %d", t.total))
			a.field(4, fmt.Sprintf("stream crc %#08x", t.streamCRC))
			a.field(4, fmt.Sprintf("chunk count %d", t.chunks))
			return a.sb.String()
		}
		if uint64(len(b)-a.off-chunkHeaderLen) < uint64(n) {
			return rest("short chunk")
		}
		a.field(4, fmt.Sprintf("chunk %d length %d", i, n))
		a.field(4, fmt.Sprintf("chunk %d crc %#08x", i, le.Uint32(b[a.off:])))
		a.field(int(n), fmt.Sprintf("chunk %d payload %q", i, b[a.off:a.off+int(n)]))
	}
}

// AnnotatedSnapshotMeta returns an annotated dump of a snapshot meta file.
func AnnotatedSnapshotMeta(b []byte) string {
	if _, err := decodeMeta(b); err != nil {
		return err.Error() + "\n" + hex.Dump(b)
	}
	le := binary.LittleEndian
	a := annotator{b: b}
	a.field(8, fmt.Sprintf("magic %q", b[:8]))
	a.field(4, fmt.Sprintf("version %d", le.Uint32(b[8:])))
	a.field(4, fmt.Sprintf("JSON length %d", le.Uint32(b[12:])))
	a.field(4, fmt.Sprintf("JSON crc %#08x", le.Uint32(b[16:])))
	a.sb.WriteString("0014  JSON:\n")
	a.sb.Write(b[metaHeaderLen:])
	a.sb.WriteString("\n")
	return a.sb.String()
}
