package wire

import (
	"bufio"
	"fmt"
	"io"
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

// Reader reads frames from a stream. It is not safe for concurrent use: a
// connection has one reading goroutine.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte  // reusable body buffer, cap <= retainLimit
	big *[]byte // the previous frame's pooled body, if it was large
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
		r.big = getBuf(n)
		body = *r.big
	}
	if err := r.body(body); err != nil {
		return Frame{Header: h}, err
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
	if n := h.BodyLen(); n > 0 {
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
	p, err := r.br.Peek(HeaderSize)
	if err != nil {
		if err == io.EOF && len(p) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return h, err
	}
	err = h.Decode(p)
	_, _ = r.br.Discard(HeaderSize) // cannot fail: the bytes are buffered
	if err != nil {
		return h, err
	}
	if int64(h.Length) > int64(r.max) {
		if _, err := r.br.Discard(h.BodyLen()); err != nil {
			return h, unexpected(err)
		}
		return h, fmt.Errorf("%w: %d-byte frame > %d (op %v id %d)", ErrFrameTooLarge, h.Length, r.max, h.Op, h.ID)
	}
	return h, nil
}

func (r *Reader) body(b []byte) error {
	if _, err := io.ReadFull(r.br, b); err != nil {
		return unexpected(err)
	}
	return nil
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
