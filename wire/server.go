package wire

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Server side. A server reads requests from a connection with one Reader
// (ReadFramePooled, to hand frames to worker goroutines) and answers
// through one ReplyWriter shared by those workers, in any order:
//
//	rd, _ := wire.NewReader(nc, opts)
//	rw, _ := wire.NewReplyWriter(nc, opts)
//	for {
//		f, err := rd.ReadFramePooled()
//		if err != nil {
//			if wire.InSync(err) { // too large, unknown op: answer and go on
//				rw.WriteError(&f.Header, err, 0, 0)
//				continue
//			}
//			if errors.Is(err, wire.ErrBadVersion) {
//				rw.WriteError(&f.Header, err, 0, 0)
//			}
//			break // corrupt stream or EOF: close the connection
//		}
//		arrived := time.Now()
//		workers <- job{f, arrived} // the worker replies, then f.Release()
//	}
//	rw.Close()
//	nc.Close()

// ReplyWriter writes replies to one connection. It is safe for concurrent
// use: worker goroutines queue replies as they finish, and a writer
// goroutine batches them and flushes when the queue runs empty, so a
// worker never blocks on the socket. A reply sent alone (SendAlone) while
// the writer is idle, on a plain TCP or Unix socket, is written by its
// worker with one non-blocking write (no hand-off); what the socket does
// not take then goes to the writer goroutine.
//
// After a write error every later write fails with that error, and the
// underlying writer is closed if it is an io.Closer, so that the
// connection's reader stops too.
type ReplyWriter struct {
	bw  *batchWriter
	max int
}

// NewReplyWriter returns a ReplyWriter over w (nil opts: defaults) and
// starts its writer goroutine; Close stops it.
func NewReplyWriter(w io.Writer, opts *Options) (*ReplyWriter, error) {
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	var onError func(error)
	if cl, ok := w.(io.Closer); ok {
		onError = func(error) { _ = cl.Close() }
	}
	return &ReplyWriter{bw: newBatchWriter(w, &o, onError), max: o.MaxFrameSize}, nil
}

// Write queues the reply h with body and returns without waiting for the
// socket; body is copied. h is normally req.Reply(status) with SetTiming
// applied; Write sets FlagReply, clears the budget and computes the
// length. A reply larger than MaxFrameSize is refused with
// ErrFrameTooLarge (answer StatusFrameTooLarge, or send less).
func (w *ReplyWriter) Write(h Header, body []byte) error {
	n := HeaderSize + len(body)
	if n > w.max {
		return fmt.Errorf("%w: %d-byte %v reply > %d", ErrFrameTooLarge, n, h.Op, w.max)
	}
	p := getBuf(n)
	copy((*p)[HeaderSize:], body)
	return w.write(h, p)
}

// WriteMessage is Write with the body encoded from m straight into the
// reply buffer. m escapes to the heap (it is called through an interface):
// keep one per worker.
func (w *ReplyWriter) WriteMessage(h Header, m Message) error {
	r, err := w.Encode(h, m)
	if err != nil {
		return err
	}
	return w.Send(r)
}

var errNotEncoded = errors.New("wire: Send of a Reply that Encode did not make")

// Reply is a reply frame encoded and checked against the frame limit
// (Encode) but not yet queued (Send). A server that counts its replies
// counts each between the two, so that a client holding a reply finds it
// counted.
type Reply struct{ p *[]byte }

// Encode encodes the reply h with m's body (nil: an empty body) as
// WriteMessage would, and refuses a reply larger than MaxFrameSize with
// ErrFrameTooLarge; the reply is not queued until Send.
func (w *ReplyWriter) Encode(h Header, m Message) (Reply, error) {
	var p *[]byte
	if m == nil {
		p = getBuf(HeaderSize)
	} else {
		p = encodeBody(m)
	}
	if n := len(*p); n > w.max {
		putBuf(p)
		return Reply{}, fmt.Errorf("%w: %d-byte %v reply > %d", ErrFrameTooLarge, n, h.Op, w.max)
	}
	h.Flags = FlagReply // a request's FlagRetry is not echoed
	h.BudgetMicros = 0
	h.put(*p, uint32(len(*p)))
	return Reply{p: p}, nil
}

// Send queues a reply that Encode made, once: it returns without waiting
// for the socket. Sending the zero Reply is an error.
func (w *ReplyWriter) Send(r Reply) error {
	if r.p == nil {
		return errNotEncoded
	}
	return w.bw.enqueue(r.p, false)
}

// SendAlone is Send for a reply that no other reply of the connection is
// about to follow (its request was the only one in flight): when the
// writer is idle and the connection a plain socket, the caller writes it
// at once with one non-blocking write, instead of handing it to the writer
// goroutine. Replies of a pipelined connection should go through Send, so
// that a burst leaves in one write.
func (w *ReplyWriter) SendAlone(r Reply) error {
	if r.p == nil {
		return errNotEncoded
	}
	return w.bw.enqueue(r.p, true)
}

func (w *ReplyWriter) write(h Header, p *[]byte) error {
	h.Flags = FlagReply // a request's FlagRetry is not echoed
	h.BudgetMicros = 0
	h.put(*p, uint32(len(*p)))
	return w.bw.enqueue(p, false)
}

// WriteError answers request req with the status of err (StatusOf) and the
// given timing. The body carries detail when there is some: the fields of
// a *StatusError, or err's text for statuses that are not routine
// (Internal, BadRequest, FrameTooLarge, UnknownOp, BadVersion); routine
// statuses (NotFound, ...) get an empty body and cost no allocation.
func (w *ReplyWriter) WriteError(req *Header, err error, queue, service time.Duration) error {
	h := req.Reply(StatusOf(err))
	h.SetTiming(queue, service)
	var er ErrorReply
	var se *StatusError
	switch {
	case errors.As(err, &se):
		er = ErrorReply{Region: se.Region, Epoch: se.Epoch, Message: []byte(se.Message), Leader: []byte(se.Leader)}
	case h.Status == StatusInternal, h.Status == StatusBadRequest, h.Status == StatusFrameTooLarge,
		h.Status == StatusUnknownOp, h.Status == StatusBadVersion:
		er.Message = []byte(err.Error())
	default:
		return w.Write(h, nil)
	}
	var scratch [256]byte
	return w.Write(h, er.AppendTo(scratch[:0]))
}

// DirectWrites counts the replies written by their sender at once
// (SendAlone), whole or in part: for tests and diagnostics.
func (w *ReplyWriter) DirectWrites() uint64 { return w.bw.directs.Load() }

// Idle reports whether the writer has nothing queued or buffered and no
// write in flight, so that the next reply sent alone is written by its
// sender: for tests and diagnostics.
func (w *ReplyWriter) Idle() bool {
	w.bw.mu.Lock()
	defer w.bw.mu.Unlock()
	return w.bw.mu.idle
}

// Close writes and flushes the replies already queued, stops the writer
// goroutine and returns the first write error, if any. It does not close
// the underlying writer. Writes after Close fail with ErrClosed.
func (w *ReplyWriter) Close() error { return w.bw.close() }

// Err returns the first write error, or nil.
func (w *ReplyWriter) Err() error { return w.bw.err() }

// RefusalFrame is what a server writes on a connection it refuses (a
// connection limit) before closing it, having read nothing from it: an
// Overloaded reply with request id 0, which no request carries, and msg
// as detail. A Conn that receives it fails its calls with a *ConnError
// wrapping ErrRefused, with Sent false.
func RefusalFrame(msg string) []byte { return RefusalFrameStatus(StatusOverloaded, msg) }

// RefusalFrameStatus is RefusalFrame with another status than Overloaded:
// StatusPermissionDenied for a plain TCP connection to a TLS port. st
// must not be StatusOK.
func RefusalFrameStatus(st Status, msg string) []byte {
	h := Header{Op: OpPing, Flags: FlagReply, Status: st}
	return AppendFrame(nil, h, (&ErrorReply{Message: []byte(msg)}).AppendTo(nil))
}

// isRefusal reports whether f is a RefusalFrame.
func isRefusal(h *Header) bool {
	return h.ID == 0 && h.IsReply() && h.Status != StatusOK
}
