package raftmux

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// This file fixes the handshake of a raftmux connection. The constants below
// are part of Cell's wire format, pinned byte by byte by
// testdata/header.golden: a change here is a protocol change and needs a new
// protoVersion.
//
// # Header (dialer to acceptor, the first bytes of every connection)
//
// All integers little-endian, fixed offsets, 16 bytes:
//
//	 0           4       5                   8                  12                 16
//	 +-----------+-------+-------------------+------------------+------------------+
//	 | "CRFT"    | ver   | reserved (0 0 0)  | region u32       | crc32c u32       |
//	 +-----------+-------+-------------------+------------------+------------------+
//
// The checksum is CRC-32C (Castagnoli) of bytes [0, 12). A header is
// well-formed when the magic matches, the checksum matches and the reserved
// bytes are zero; the acceptor then also requires ver == protoVersion.
//
// # Reply (acceptor to dialer, 4 bytes)
//
//	 0           2       3       4
//	 +-----------+-------+-------+
//	 | "CR"      | ver   |status |
//	 +-----------+-------+-------+
//
// ver is the acceptor's protoVersion, status a status value. After statusOK
// the connection belongs to the region's raft transport on both sides (raft's
// own msgpack stream follows); after any other status the acceptor closes it.
// A header with the wrong magic gets no reply (the peer is not a raftmux):
// the acceptor just closes.

// protoVersion is the handshake version this package speaks.
const protoVersion = 1

// Sizes and offsets of the header and the reply.
const (
	headerSize = 16
	replySize  = 4

	offMagic    = 0
	offVersion  = 4
	offReserved = 5 // 3 bytes
	offRegion   = 8
	offCRC      = 12

	offReplyMagic   = 0
	offReplyVersion = 2
	offReplyStatus  = 3
)

// Magic strings of the header and the reply.
const (
	headerMagic = "CRFT"
	replyMagic  = "CR"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a decoded connection header.
type header struct {
	version uint8
	region  uint32
}

// appendHeader appends the encoding of h to b.
func appendHeader(b []byte, h header) []byte {
	var buf [headerSize]byte
	copy(buf[offMagic:], headerMagic)
	buf[offVersion] = h.version
	binary.LittleEndian.PutUint32(buf[offRegion:], h.region)
	binary.LittleEndian.PutUint32(buf[offCRC:], crc32.Checksum(buf[:offCRC], castagnoli))
	return append(b, buf[:]...)
}

// decodeHeader decodes b, which must be exactly headerSize bytes. It returns
// the header and statusOK, or why b is not a well-formed header:
// statusBadMagic, or statusBadHeader (wrong length or checksum, non-zero
// reserved bytes). The version is returned as found; the caller checks it.
func decodeHeader(b []byte) (header, status) {
	if len(b) != headerSize {
		return header{}, statusBadHeader
	}
	if string(b[offMagic:offMagic+len(headerMagic)]) != headerMagic {
		return header{}, statusBadMagic
	}
	if binary.LittleEndian.Uint32(b[offCRC:]) != crc32.Checksum(b[:offCRC], castagnoli) {
		return header{}, statusBadHeader
	}
	if b[offReserved] != 0 || b[offReserved+1] != 0 || b[offReserved+2] != 0 {
		return header{}, statusBadHeader
	}
	return header{version: b[offVersion], region: binary.LittleEndian.Uint32(b[offRegion:])}, statusOK
}

// status is the acceptor's verdict on a header, sent in the reply. The
// values are part of the wire format.
type status uint8

const (
	// statusOK: the connection goes to the region's Accept.
	statusOK status = 0
	// statusBadVersion: the header's version is not the acceptor's.
	statusBadVersion status = 1
	// statusUnknownRegion: the acceptor has no open Group for the region.
	statusUnknownRegion status = 2
	// statusBadHeader: wrong checksum or non-zero reserved bytes.
	statusBadHeader status = 3
	// statusBusy: the region's accept backlog is full.
	statusBusy status = 4
	// statusNotServer: with TLS, the dialer's certificate does not have
	// the server role. Sent before the header is read.
	statusNotServer status = 5
	// statusBadMagic is never sent (a peer with the wrong magic gets no
	// reply); decodeHeader returns it.
	statusBadMagic status = 255
)

func (s status) String() string {
	switch s {
	case statusOK:
		return "ok"
	case statusBadVersion:
		return "bad-version"
	case statusUnknownRegion:
		return "unknown-region"
	case statusBadHeader:
		return "bad-header"
	case statusBusy:
		return "busy"
	case statusNotServer:
		return "not-server"
	case statusBadMagic:
		return "bad-magic"
	default:
		return fmt.Sprintf("status(%d)", uint8(s))
	}
}

// appendReply appends a reply carrying s to b.
func appendReply(b []byte, s status) []byte {
	return append(b, replyMagic[0], replyMagic[1], protoVersion, byte(s))
}

// decodeReply decodes a reply; ok is false when b is not one (wrong length
// or magic).
func decodeReply(b []byte) (ver uint8, s status, ok bool) {
	if len(b) != replySize || string(b[offReplyMagic:offReplyMagic+len(replyMagic)]) != replyMagic {
		return 0, 0, false
	}
	return b[offReplyVersion], status(b[offReplyStatus]), true
}
