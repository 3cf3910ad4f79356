package rdma

import (
	"encoding/binary"
	"fmt"
)

// The tcp provider's frames (doc.go draws them). These constants are part of
// the wire format: changing one is a protocol version change.
const (
	frameMagic   = 0xCD // distinct from the wire package's 0xCE
	frameVersion = 1

	opRead      = 0x01 // request: read segments
	opReadReply = 0x81 // reply to opRead

	reqHeaderSize   = 32
	segDescSize     = 16
	replyHeaderSize = 16
)

// Offsets in a request header.
const (
	offLength  = 0  // u32: the whole frame's length
	offMagic   = 4  // u8: frameMagic
	offVersion = 5  // u8: frameVersion
	offOp      = 6  // u8: opRead / opReadReply
	offFlags   = 7  // u8 in requests: zero; status in replies
	offID      = 8  // u64: request id, echoed by the reply
	offKey     = 16 // u64: the remote key
	offRegion  = 24 // u32: the region ID the key was issued for
	offNSeg    = 28 // u16: number of segment descriptors, >= 1
	offRsv     = 30 // u16: zero
	// A segment descriptor: offset u64, length u32, reserved u32 (zero).
	offSegOff = 0
	offSegLen = 8
	offSegRsv = 12
	offStatus = offFlags
)

var le = binary.LittleEndian

// reqHeader is a decoded request header.
type reqHeader struct {
	id     uint64
	key    Key
	region uint32
	nseg   int
}

// appendRequest appends a read request for segs to b. REQUIRES: 1 <=
// len(segs) <= MaxSegmentsLimit and every segment shorter than 4 GiB
// (checkSegments with valid Limits ensures both).
func appendRequest(b []byte, id uint64, key Key, region uint32, segs []Segment) []byte {
	n := reqHeaderSize + segDescSize*len(segs)
	start := len(b)
	b = grow(b, n)
	h := b[start : start+n]
	le.PutUint32(h[offLength:], uint32(n))
	h[offMagic] = frameMagic
	h[offVersion] = frameVersion
	h[offOp] = opRead
	h[offFlags] = 0
	le.PutUint64(h[offID:], id)
	le.PutUint64(h[offKey:], uint64(key))
	le.PutUint32(h[offRegion:], region)
	le.PutUint16(h[offNSeg:], uint16(len(segs)))
	le.PutUint16(h[offRsv:], 0)
	for i := range segs {
		d := h[reqHeaderSize+segDescSize*i:]
		le.PutUint64(d[offSegOff:], segs[i].Off)
		le.PutUint32(d[offSegLen:], uint32(len(segs[i].Dst)))
		le.PutUint32(d[offSegRsv:], 0)
	}
	return b
}

// grow extends b by n bytes, reallocating only when its capacity is short.
func grow(b []byte, n int) []byte {
	if len(b)+n > cap(b) {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// parseRequestHeader decodes the first reqHeaderSize bytes of b. Errors
// wrap ErrProtocol: the stream cannot be trusted and the connection is
// closed.
func parseRequestHeader(b []byte) (reqHeader, error) {
	b = b[:reqHeaderSize]
	switch {
	case b[offMagic] != frameMagic:
		return reqHeader{}, fmt.Errorf("rdma: bad magic %#x: %w", b[offMagic], ErrProtocol)
	case b[offVersion] != frameVersion:
		return reqHeader{}, fmt.Errorf("rdma: unsupported frame version %d: %w", b[offVersion], ErrProtocol)
	case b[offOp] != opRead:
		return reqHeader{}, fmt.Errorf("rdma: unknown op %#x: %w", b[offOp], ErrProtocol)
	case b[offFlags] != 0 || le.Uint16(b[offRsv:]) != 0:
		return reqHeader{}, fmt.Errorf("rdma: reserved request bits set: %w", ErrProtocol)
	}
	h := reqHeader{
		id:     le.Uint64(b[offID:]),
		key:    Key(le.Uint64(b[offKey:])),
		region: le.Uint32(b[offRegion:]),
		nseg:   int(le.Uint16(b[offNSeg:])),
	}
	length := le.Uint32(b[offLength:])
	if h.nseg == 0 || uint64(length) != uint64(reqHeaderSize+segDescSize*h.nseg) {
		return reqHeader{}, fmt.Errorf("rdma: request of %d bytes with %d segments: %w", length, h.nseg, ErrProtocol)
	}
	return h, nil
}

// parseSegment decodes one segment descriptor. Errors wrap ErrProtocol.
func parseSegment(d []byte) (off, n uint64, err error) {
	d = d[:segDescSize]
	if le.Uint32(d[offSegRsv:]) != 0 {
		return 0, 0, fmt.Errorf("rdma: reserved segment bits set: %w", ErrProtocol)
	}
	return le.Uint64(d[offSegOff:]), uint64(le.Uint32(d[offSegLen:])), nil
}

// putReplyHeader writes a reply header into b[:replyHeaderSize]: status st
// and dataLen bytes of data following (zero unless st is statusOK).
func putReplyHeader(b []byte, id uint64, st status, dataLen int) {
	b = b[:replyHeaderSize]
	le.PutUint32(b[offLength:], uint32(replyHeaderSize+dataLen))
	b[offMagic] = frameMagic
	b[offVersion] = frameVersion
	b[offOp] = opReadReply
	b[offStatus] = byte(st)
	le.PutUint64(b[offID:], id)
}

// parseReplyHeader decodes the first replyHeaderSize bytes of b. Errors
// wrap ErrProtocol.
func parseReplyHeader(b []byte) (id uint64, st status, dataLen int, err error) {
	b = b[:replyHeaderSize]
	length := le.Uint32(b[offLength:])
	st = status(b[offStatus])
	switch {
	case b[offMagic] != frameMagic:
		return 0, 0, 0, fmt.Errorf("rdma: bad magic %#x in reply: %w", b[offMagic], ErrProtocol)
	case b[offVersion] != frameVersion:
		return 0, 0, 0, fmt.Errorf("rdma: unsupported frame version %d in reply: %w", b[offVersion], ErrProtocol)
	case b[offOp] != opReadReply:
		return 0, 0, 0, fmt.Errorf("rdma: unexpected op %#x in reply: %w", b[offOp], ErrProtocol)
	case st >= numStatuses:
		return 0, 0, 0, fmt.Errorf("rdma: unknown status %d in reply: %w", st, ErrProtocol)
	case length < replyHeaderSize || length > replyHeaderSize+MaxReadLenLimit:
		return 0, 0, 0, fmt.Errorf("rdma: reply of %d bytes: %w", length, ErrProtocol)
	case st != statusOK && length != replyHeaderSize:
		return 0, 0, 0, fmt.Errorf("rdma: %v reply with %d data bytes: %w", st, length-replyHeaderSize, ErrProtocol)
	}
	return le.Uint64(b[offID:]), st, int(length - replyHeaderSize), nil
}
