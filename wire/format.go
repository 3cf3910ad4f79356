package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
)

// This file fixes the frame header. The constants below are part of Cell's
// wire format: a change here is a protocol change (a new Version), pinned by
// the golden test in testdata/frames.golden.
//
// Every frame is a 32-byte header followed by a body; all integers are
// little-endian at fixed offsets:
//
//	 0               4       5       6       7       8
//	 +---------------+-------+-------+-------+-------+
//	 |  length u32   | magic |version|  op   | flags |
//	 +---------------+-------+-------+-------+-------+
//	 8                                               16
//	 +-----------------------------------------------+
//	 |               request id u64                  |
//	 +-------+-------+---------------+---------------+---------------+
//	 16      18      20              24              28              32
//	 |status | rsv   | queue ns u32  | service ns u32| budget µs u32 |
//	 | u16   | u16=0 | (replies)     | (replies)     | (requests)    |
//	 +-------+-------+---------------+---------------+---------------+
//	 32: body, length-32 bytes
//
// Bytes 0..15 keep their meaning in every protocol version, so a receiver
// can name the request it rejects for a bad version.

// Header offsets and sizes.
const (
	offLength  = 0
	offMagic   = 4
	offVersion = 5
	offOp      = 6
	offFlags   = 7
	offID      = 8
	offStatus  = 16
	offRsv     = 18
	offQueue   = 20
	offService = 24
	offBudget  = 28

	// HeaderSize is the size of the frame header in bytes.
	HeaderSize = 32
)

const (
	// Magic is header byte 4 of every frame ("Cell", 0xCE).
	Magic = 0xce
	// Version is the protocol version this package speaks.
	Version = 1
)

// Flags are header byte 7.
type Flags uint8

const (
	// FlagReply marks a frame sent by the server in answer to a request.
	FlagReply Flags = 1 << 0
	// FlagRetry marks a write sent again, with the same client id and
	// sequence number, after its first attempt's outcome was lost.
	FlagRetry Flags = 1 << 1

	knownFlags = FlagReply | FlagRetry
)

// String lists the set flags, e.g. "reply", or "0" for none.
func (f Flags) String() string {
	switch f {
	case 0:
		return "0"
	case FlagReply:
		return "reply"
	case FlagRetry:
		return "retry"
	}
	return "0x" + strconv.FormatUint(uint64(f), 16)
}

var le = binary.LittleEndian

// Header is a decoded frame header.
//
// Invariant (after a successful Decode): Length >= HeaderSize, and the
// reserved bytes and unknown flag bits were zero.
type Header struct {
	// Length is the size of the whole frame, header included. Encoders
	// (AppendFrame) compute it from the body.
	Length uint32
	Op     Op
	Flags  Flags
	// ID is chosen by the client, unique among its requests in flight on
	// the connection; the reply carries the same ID.
	ID uint64
	// Status is the outcome, in replies; zero in requests.
	Status Status
	// QueueNanos is how long the request waited in the server between
	// being read off the socket and a worker starting it; ServiceNanos is
	// how long the worker took. Both in nanoseconds, saturating at
	// math.MaxUint32 (about 4.29 s); zero in requests.
	QueueNanos   uint32
	ServiceNanos uint32
	// BudgetMicros is the time the caller was still willing to wait when it
	// sent the request, in microseconds (saturating); zero means no
	// deadline. A server may drop the request with StatusExpired once the
	// budget has passed since it read it. Zero in replies.
	BudgetMicros uint32
}

// BodyLen returns the body size announced by h.
func (h *Header) BodyLen() int { return int(h.Length) - HeaderSize }

// IsReply reports whether FlagReply is set.
func (h *Header) IsReply() bool { return h.Flags&FlagReply != 0 }

// QueueTime returns the server-reported queueing time.
func (h *Header) QueueTime() time.Duration { return time.Duration(h.QueueNanos) }

// ServiceTime returns the server-reported service time.
func (h *Header) ServiceTime() time.Duration { return time.Duration(h.ServiceNanos) }

// Budget returns the caller's remaining deadline at send time, or 0 for
// none.
func (h *Header) Budget() time.Duration { return time.Duration(h.BudgetMicros) * time.Microsecond }

// Deadline returns when the caller stops waiting for request h, given when
// the server read it, and false if the request has no budget.
func (h *Header) Deadline(arrived time.Time) (time.Time, bool) {
	if h.BudgetMicros == 0 {
		return time.Time{}, false
	}
	return arrived.Add(h.Budget()), true
}

// SetTiming stores the queueing and service times, saturating.
func (h *Header) SetTiming(queue, service time.Duration) {
	h.QueueNanos = saturate32(int64(queue))
	h.ServiceNanos = saturate32(int64(service))
}

// SetBudget stores d in microseconds, rounded up and saturating; d <= 0
// means no deadline.
func (h *Header) SetBudget(d time.Duration) {
	if d <= 0 {
		h.BudgetMicros = 0
		return
	}
	h.BudgetMicros = saturate32((int64(d) + int64(time.Microsecond) - 1) / int64(time.Microsecond))
}

func saturate32(v int64) uint32 {
	switch {
	case v <= 0:
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// Reply returns the header of the reply to request h with status st:
// same op and ID, FlagReply set, timing zero.
func (h *Header) Reply(st Status) Header {
	return Header{Op: h.Op, Flags: FlagReply, ID: h.ID, Status: st}
}

// String formats the header for logs and dumps.
func (h Header) String() string {
	return fmt.Sprintf("len=%d op=%v flags=%v id=%d status=%v queue=%dns service=%dns budget=%dµs",
		h.Length, h.Op, h.Flags, h.ID, h.Status, h.QueueNanos, h.ServiceNanos, h.BudgetMicros)
}

// put writes h into b[:HeaderSize] with the given frame length.
func (h *Header) put(b []byte, length uint32) {
	_ = b[HeaderSize-1]
	le.PutUint32(b[offLength:], length)
	b[offMagic] = Magic
	b[offVersion] = Version
	b[offOp] = byte(h.Op)
	b[offFlags] = byte(h.Flags)
	le.PutUint64(b[offID:], h.ID)
	le.PutUint16(b[offStatus:], uint16(h.Status))
	le.PutUint16(b[offRsv:], 0)
	le.PutUint32(b[offQueue:], h.QueueNanos)
	le.PutUint32(b[offService:], h.ServiceNanos)
	le.PutUint32(b[offBudget:], h.BudgetMicros)
}

// AppendFrame appends the frame made of h and body to dst and returns the
// extended slice. h.Length is ignored: the frame's length is
// HeaderSize+len(body). It does not check any maximum frame size.
func AppendFrame(dst []byte, h Header, body []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	h.put(dst[n:], uint32(HeaderSize+len(body)))
	return append(dst, body...)
}

// Decode parses a header from b[:HeaderSize]. It checks the magic, the
// version, the reserved fields and that the length covers the header; it
// does not check the op or a maximum size (Reader does).
//
// On ErrBadVersion the fields that keep their offsets across versions
// (Length, Op, Flags, ID) are still filled in, so the server can name the
// request in its StatusBadVersion reply.
func (h *Header) Decode(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: %d-byte header, want %d", ErrBadLength, len(b), HeaderSize)
	}
	b = b[:HeaderSize]
	*h = Header{
		Length:       le.Uint32(b[offLength:]),
		Op:           Op(b[offOp]),
		Flags:        Flags(b[offFlags]),
		ID:           le.Uint64(b[offID:]),
		Status:       Status(le.Uint16(b[offStatus:])),
		QueueNanos:   le.Uint32(b[offQueue:]),
		ServiceNanos: le.Uint32(b[offService:]),
		BudgetMicros: le.Uint32(b[offBudget:]),
	}
	if b[offMagic] != Magic {
		return fmt.Errorf("%w: %#02x", ErrBadMagic, b[offMagic])
	}
	if b[offVersion] != Version {
		return fmt.Errorf("%w: version %d, want %d", ErrBadVersion, b[offVersion], Version)
	}
	if h.Flags&^knownFlags != 0 || le.Uint16(b[offRsv:]) != 0 {
		return fmt.Errorf("%w: reserved bits set (flags %#02x, reserved %#04x)",
			ErrBadVersion, b[offFlags], le.Uint16(b[offRsv:]))
	}
	if h.Length < HeaderSize {
		return fmt.Errorf("%w: %d < header size %d", ErrBadLength, h.Length, HeaderSize)
	}
	return nil
}
