package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Frame is one received frame.
//
// Ownership: Body aliases a buffer owned by whoever returned the frame. A
// frame from Reader.ReadFrame is valid until the next read; one from
// Reader.ReadFramePooled or Conn.Call is valid until Release. Messages
// decoded from Body alias it too.
type Frame struct {
	Header Header
	Body   []byte
	pooled *[]byte
}

// Release returns the frame's buffer to the pool, if it has one, and
// clears Body. The frame and anything decoded from its body must not be
// used afterwards. Release is a no-op on a frame without a pooled buffer
// and may be called more than once.
func (f *Frame) Release() {
	if f.pooled != nil {
		putBuf(f.pooled)
		f.pooled = nil
	}
	f.Body = nil
}

// retainLimit bounds the body buffer a Reader keeps between frames; larger
// bodies are read into pooled buffers released at the next read.
const retainLimit = 64 << 10

// bodyChunk is how far a body buffer runs ahead of the bytes received: a
// body larger than this is read in chunks of bodyChunk, taken as its bytes
// arrive and joined once it is whole, so a header that claims a large
// body and a stall cost what was sent, not what was claimed.
const bodyChunk = 64 << 10

// Deadliner is the part of a net.Conn a Reader needs to bound its reads.
type Deadliner interface {
	SetReadDeadline(t time.Time) error
}

// Reader reads frames from a stream. It is not safe for concurrent use: a
// connection has one reading goroutine.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte  // reusable body buffer, cap <= retainLimit
	big *[]byte // the previous frame's pooled body, if it was large
	// chunks is readLarge's list of the chunks of a body, kept between
	// calls (empty) so that steady large reads do not allocate it.
	chunks []*[]byte

	// Timeouts (SetTimeouts); dl is nil when there are none.
	dl          Deadliner
	idle, frame time.Duration
}

// SetTimeouts bounds the reads of r through d (the connection r reads):
// with idle > 0, waiting for the first byte of a frame fails with
// ErrIdleTimeout after idle; with frame > 0, a frame whose first byte
// arrived must be complete within frame, else ErrFrameTimeout. Zero turns
// a timeout off. Both errors also match os.ErrDeadlineExceeded. A frame
// already whole in the read buffer costs no deadline call.
func (r *Reader) SetTimeouts(d Deadliner, idle, frame time.Duration) {
	r.dl, r.idle, r.frame = d, idle, frame
	if idle <= 0 && frame <= 0 {
		r.dl = nil
	}
}

// NewReader returns a Reader over r with opts' MaxFrameSize and
// ReadBufferSize (nil opts: defaults).
func NewReader(r io.Reader, opts *Options) (*Reader, error) {
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	return &Reader{br: bufio.NewReaderSize(r, o.ReadBufferSize), max: o.MaxFrameSize}, nil
}

// ReadFrame reads the next frame. The body aliases a buffer of the Reader,
// valid until the next call; steady-state reads do not allocate.
//
// Errors: io.EOF if the stream ended cleanly between frames;
// io.ErrUnexpectedEOF inside one; ErrBadMagic, ErrBadVersion, ErrBadLength
// for a corrupt stream (the returned header holds what could be parsed);
// ErrFrameTooLarge (body skipped) and ErrUnknownOp (body read and dropped)
// with the header filled in and the stream still in sync (see InSync).
func (r *Reader) ReadFrame() (Frame, error) {
	if r.big != nil {
		putBuf(r.big)
		r.big = nil
	}
	h, err := r.header()
	if err != nil {
		return Frame{Header: h}, err
	}
	n := h.BodyLen()
	var body []byte
	switch {
	case n <= cap(r.buf):
		body = r.buf[:n]
	case n <= retainLimit:
		r.buf = make([]byte, n, min(max(n, 2*cap(r.buf)), retainLimit))
		body = r.buf[:n]
	default:
		p, err := r.readLarge(n)
		if err != nil {
			return Frame{Header: h}, err
		}
		r.big, body = p, *p
	}
	if n <= retainLimit {
		if err := r.body(body); err != nil {
			return Frame{Header: h}, err
		}
	}
	if err := checkOp(&h); err != nil {
		return Frame{Header: h}, err
	}
	return Frame{Header: h, Body: body}, nil
}

// ReadFramePooled is ReadFrame with the body read into a pooled buffer
// that the caller owns until Frame.Release: use it to hand frames to other
// goroutines (a server's workers).
func (r *Reader) ReadFramePooled() (Frame, error) {
	h, err := r.header()
	if err != nil {
		return Frame{Header: h}, err
	}
	f := Frame{Header: h}
	switch n := h.BodyLen(); {
	case n > bodyChunk:
		p, err := r.readLarge(n)
		if err != nil {
			return f, err
		}
		f.pooled, f.Body = p, *p
	case n > 0:
		f.pooled = getBuf(n)
		f.Body = *f.pooled
		if err := r.body(f.Body); err != nil {
			f.Release()
			return f, err
		}
	}
	if err := checkOp(&h); err != nil {
		f.Release()
		return f, err
	}
	return f, nil
}

// header reads and checks the next header. A frame over the size limit has
// its body skipped.
func (r *Reader) header() (Header, error) {
	var h Header
	if r.dl != nil {
		if err := r.awaitFrame(); err != nil {
			return h, err
		}
	}
	p, err := r.br.Peek(HeaderSize)
	if err != nil {
		if err == io.EOF && len(p) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return h, r.frameErr(err)
	}
	err = h.Decode(p)
	_, _ = r.br.Discard(HeaderSize) // cannot fail: the bytes are buffered
	if err != nil {
		return h, err
	}
	if int64(h.Length) > int64(r.max) {
		if _, err := r.br.Discard(h.BodyLen()); err != nil {
			return h, r.frameErr(unexpected(err))
		}
		return h, fmt.Errorf("%w: %d-byte frame > %d (op %v id %d)", ErrFrameTooLarge, h.Length, r.max, h.Op, h.ID)
	}
	return h, nil
}

func (r *Reader) body(b []byte) error {
	if _, err := io.ReadFull(r.br, b); err != nil {
		return r.frameErr(unexpected(err))
	}
	return nil
}

// readLarge reads an n-byte body (n > bodyChunk) in pooled chunks of
// bodyChunk as the bytes arrive, so that a stalled body holds at most
// bodyChunk more than it received, and copies them into one pooled
// buffer once the body is whole.
func (r *Reader) readLarge(n int) (*[]byte, error) {
	chunks := r.chunks[:0]
	defer func() {
		for i, c := range chunks {
			putBuf(c)
			chunks[i] = nil
		}
		r.chunks = chunks[:0]
	}()
	for got := 0; got < n; {
		c := getBuf(min(bodyChunk, n-got))
		chunks = append(chunks, c)
		if err := r.body(*c); err != nil {
			return nil, err
		}
		got += len(*c)
	}
	p := getBuf(n)
	off := 0
	for _, c := range chunks {
		off += copy((*p)[off:], *c)
	}
	return p, nil
}

// awaitFrame waits for the next frame's first byte under the idle
// timeout (no deadline without one), then puts the frame under the frame
// timeout unless it is already whole in the buffer.
func (r *Reader) awaitFrame() error {
	if r.br.Buffered() == 0 {
		var t time.Time
		if r.idle > 0 {
			t = time.Now().Add(r.idle)
		}
		_ = r.dl.SetReadDeadline(t)
		if _, err := r.br.Peek(1); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("%w after %v: %w", ErrIdleTimeout, r.idle, err)
			}
			return err
		}
	}
	if r.frame > 0 && !r.whole() {
		_ = r.dl.SetReadDeadline(time.Now().Add(r.frame))
	}
	return nil
}

// whole reports whether the next frame is entirely in the read buffer.
func (r *Reader) whole() bool {
	n := r.br.Buffered()
	if n < 4 {
		return false
	}
	b, _ := r.br.Peek(4)
	return uint64(n) >= uint64(binary.LittleEndian.Uint32(b))
}

// frameErr marks a read that timed out inside a frame as ErrFrameTimeout.
func (r *Reader) frameErr(err error) error {
	if r.dl != nil && r.frame > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v): %w", ErrFrameTimeout, r.frame, err)
	}
	return err
}

func checkOp(h *Header) error {
	if !h.Op.Valid() {
		return fmt.Errorf("%w: %v (id %d)", ErrUnknownOp, h.Op, h.ID)
	}
	return nil
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
