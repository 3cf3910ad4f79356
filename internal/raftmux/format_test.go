package raftmux

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/cellstore/cell/internal/testutil"
)

// annotate prints b as offset, hex and note per field (sizes in order).
func annotate(sb *strings.Builder, b []byte, fields ...any) {
	off := 0
	for i := 0; i < len(fields); i += 2 {
		n, note := fields[i].(int), fields[i+1].(string)
		var hex []string
		for _, c := range b[off : off+n] {
			hex = append(hex, fmt.Sprintf("%02x", c))
		}
		fmt.Fprintf(sb, "%04x  %-48s %s\n", off, strings.Join(hex, " "), note)
		off += n
	}
}

// TestFormatGolden pins the handshake bytes (format.go): a diff of
// testdata/header.golden is a wire format change.
func TestFormatGolden(t *testing.T) {
	var sb strings.Builder
	for _, h := range []header{{version: protoVersion, region: 1}, {version: protoVersion, region: 0xabcdef}} {
		b := appendHeader(nil, h)
		fmt.Fprintf(&sb, "# header, region %d\n", h.region)
		annotate(&sb, b,
			4, fmt.Sprintf("magic %q", b[:4]),
			1, fmt.Sprintf("version %d", b[offVersion]),
			3, "reserved",
			4, fmt.Sprintf("region %d", h.region),
			4, fmt.Sprintf("crc32c 0x%08x of bytes [0, 12)", binary.LittleEndian.Uint32(b[offCRC:])))
	}
	for _, st := range []status{statusOK, statusBadVersion, statusUnknownRegion, statusBadHeader, statusBusy} {
		b := appendReply(nil, st)
		fmt.Fprintf(&sb, "# reply %s\n", st)
		annotate(&sb, b,
			2, fmt.Sprintf("magic %q", b[:2]),
			1, fmt.Sprintf("version %d", b[offReplyVersion]),
			1, fmt.Sprintf("status %d (%s)", b[offReplyStatus], st))
	}
	testutil.Golden(t, "header.golden", sb.String(), "raftmux handshake format")
}

func TestDecodeHeader(t *testing.T) {
	good := appendHeader(nil, header{version: protoVersion, region: 42})
	// withCRC returns b with byte i set to v and the checksum recomputed.
	withCRC := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[:offCRC], castagnoli))
		return b
	}
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want header
		st   status
	}{
		{"good", good, header{version: protoVersion, region: 42}, statusOK},
		{"region 0", appendHeader(nil, header{version: 1}), header{version: 1}, statusOK},
		{"max region", appendHeader(nil, header{version: 1, region: 1<<32 - 1}), header{version: 1, region: 1<<32 - 1}, statusOK},
		{"other version decodes", withCRC(offVersion, 9), header{version: 9, region: 42}, statusOK},
		{"empty", nil, header{}, statusBadHeader},
		{"short", good[:headerSize-1], header{}, statusBadHeader},
		{"long", append(bytes.Clone(good), 0), header{}, statusBadHeader},
		{"bad magic", flip(0), header{}, statusBadMagic},
		{"http", []byte("GET / HTTP/1.1\r\n"), header{}, statusBadMagic},
		{"region bit flipped", flip(offRegion), header{}, statusBadHeader},
		{"crc bit flipped", flip(offCRC + 3), header{}, statusBadHeader},
		{"version bit flipped", flip(offVersion), header{}, statusBadHeader},
		{"reserved set, crc fixed", withCRC(offReserved+2, 1), header{}, statusBadHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, st := decodeHeader(tc.b)
			if st != tc.st || h != tc.want {
				t.Fatalf("decodeHeader(% x) = %+v, %s; want %+v, %s", tc.b, h, st, tc.want, tc.st)
			}
		})
	}
}

func TestDecodeReply(t *testing.T) {
	for _, st := range []status{statusOK, statusBadVersion, statusUnknownRegion, statusBadHeader, statusBusy} {
		ver, got, ok := decodeReply(appendReply(nil, st))
		if !ok || ver != protoVersion || got != st {
			t.Errorf("decodeReply(appendReply(%s)) = %d, %s, %v", st, ver, got, ok)
		}
	}
	for _, b := range [][]byte{nil, []byte("CR\x01"), []byte("CX\x01\x00"), []byte("CR\x01\x00\x00")} {
		if _, _, ok := decodeReply(b); ok {
			t.Errorf("decodeReply(%q) accepted", b)
		}
	}
}

func TestStrings(t *testing.T) {
	seen := map[string]bool{}
	for r := range numRejects {
		s := r.String()
		if strings.HasPrefix(s, "reject(") || seen[s] {
			t.Errorf("Reject %d has string %q", r, s)
		}
		seen[s] = true
	}
	if s := numRejects.String(); s != fmt.Sprintf("reject(%d)", numRejects) {
		t.Errorf("unknown Reject prints %q", s)
	}
	if s := status(77).String(); s != "status(77)" {
		t.Errorf("unknown status prints %q", s)
	}
}

// FuzzDecodeHeader: decodeHeader never panics, and what it accepts
// re-encodes byte for byte.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(appendHeader(nil, header{version: protoVersion, region: 1}))
	f.Add(appendHeader(nil, header{version: 7, region: 0xffffff}))
	f.Add([]byte("CRFT"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, st := decodeHeader(b)
		if st != statusOK {
			if h != (header{}) {
				t.Fatalf("rejected (%s) but returned %+v", st, h)
			}
			return
		}
		if again := appendHeader(nil, h); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", again, b)
		}
	})
}
