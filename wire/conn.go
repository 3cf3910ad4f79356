package wire

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
)

// Conn is the client side of one TCP connection, multiplexing concurrent
// calls: any number of goroutines may Call at once; requests are pipelined
// and replies, which may come back in any order, are matched to their
// calls by request id.
//
// A writer goroutine batches queued requests in a bufio.Writer and flushes
// when the queue runs empty (a call made one at a time, when the writer
// is idle, on a plain socket, is written by the calling goroutine with one
// non-blocking write, the rest left to the writer); a reader goroutine
// reads replies and hands
// each to its waiting call. A call whose context ends stops waiting at once
// (its request may still be sent, and its late reply is dropped). When the
// connection fails, every pending call fails with a *ConnError and every
// later call with one too; the owner then dials a new Conn.
//
// Locking notes: Conn.mu is never held while blocking; it may be taken
// while holding nothing else.
type Conn struct {
	nc     net.Conn
	opts   Options
	bw     *batchWriter
	rd     *Reader
	sem    chan struct{} // one token per call in flight (MaxInFlight)
	nextID atomic.Uint64 // last request id used; ids start at 1

	broken     chan struct{} // closed when the connection fails or is closed
	readerDone chan struct{}

	mu struct {
		sync.Mutex
		// pending holds the calls awaiting a reply. Removing a call from
		// it is the right to deliver its one result. Nil once err is set.
		pending map[uint64]*call
		err     error // why the connection failed; sticky
		// lastAlone: the last call was the only one in flight when it
		// was sent.
		lastAlone bool
	}
}

// call is a pending Call; pooled.
type call struct {
	op   Op
	done chan result // capacity 1: receives exactly one result per use
}

type result struct {
	f   Frame
	err error
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan result, 1)} }}

// Dial connects to addr over TCP, or over TLS when opts.TLS is set, and
// returns a Conn on it. ctx bounds the connection and the TLS handshake.
//
// A failed handshake wraps ErrHandshake. Nothing was sent then, and a
// Dial that returns an error never sent a request: callers treat it as a
// definite failure. With TLS 1.3 a client learns that the server refused
// its certificate only after its own handshake ended, so when the server
// asked for one Dial confirms the connection with a Ping before returning
// it: a refused certificate fails Dial, not the first call.
func Dial(ctx context.Context, addr string, opts *Options) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("wire: dial %s: %w", addr, err)
	}
	var asked *atomic.Bool
	if opts != nil && opts.TLS != nil {
		cfg, a := askedConfig(tlsconf.ForAddr(opts.TLS, addr))
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("wire: dial %s: %w: %w", addr, ErrHandshake, err)
		}
		nc, asked = tc, a
	}
	c, err := NewConn(nc, opts)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	if asked != nil && asked.Load() {
		f, err := c.Call(ctx, OpPing, nil)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("wire: dial %s: %w: the server refused the connection after the handshake: %w", addr, ErrHandshake, err)
		}
		f.Release()
	}
	return c, nil
}

// askedConfig returns a clone of c that records in the returned flag
// whether the server asked for a client certificate.
func askedConfig(c *tls.Config) (*tls.Config, *atomic.Bool) {
	asked := new(atomic.Bool)
	c = c.Clone()
	get, certs := c.GetClientCertificate, c.Certificates
	c.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked.Store(true)
		if get != nil {
			return get(cri)
		}
		for i := range certs {
			if cri.SupportsCertificate(&certs[i]) == nil {
				return &certs[i], nil
			}
		}
		return &tls.Certificate{}, nil
	}
	return c, asked
}

// NewConn returns a Conn over nc and starts its reader and writer
// goroutines. The Conn owns nc from now on; Close releases both.
func NewConn(nc net.Conn, opts *Options) (*Conn, error) {
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	rd, err := NewReader(nc, &o)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		nc:         nc,
		opts:       o,
		rd:         rd,
		sem:        make(chan struct{}, o.MaxInFlight),
		broken:     make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	c.mu.pending = make(map[uint64]*call)
	c.bw = newBatchWriter(nc, &o, c.fail)
	go c.readLoop()
	return c, nil
}

// Call sends a request with op and body and waits for its reply. It may be
// called from many goroutines at once. body is copied before Call returns.
//
// On success the reply's status is StatusOK and the caller owns the
// returned frame until Frame.Release (decoded messages alias its Body).
// On a non-OK status Call returns the status's sentinel error, or a
// *StatusError when the reply carried detail; the returned frame then has
// only its Header (with the server's timing) set.
//
// Other errors: ErrFrameTooLarge or ErrUnknownOp before anything is sent;
// ctx.Err() when the context ends first (the request may still be
// executed); a *ConnError when the connection fails (see ConnError.Sent);
// ErrFrameTooLarge when the reply exceeds MaxFrameSize (the connection
// stays usable); ErrProtocol when the server answers with another op.
func (c *Conn) Call(ctx context.Context, op Op, body []byte) (Frame, error) {
	return c.CallFlags(ctx, op, 0, body)
}

// CallFlags is Call with the request's header flags (FlagRetry).
func (c *Conn) CallFlags(ctx context.Context, op Op, flags Flags, body []byte) (Frame, error) {
	n := HeaderSize + len(body)
	if err := c.check(op, n); err != nil {
		return Frame{}, err
	}
	if flags&^FlagRetry != 0 {
		return Frame{}, fmt.Errorf("wire: request flags %v", flags)
	}
	p := getBuf(n)
	copy((*p)[HeaderSize:], body)
	return c.roundTrip(ctx, op, flags, p)
}

// CallMessage is Call with the body encoded from req straight into the
// request buffer. req escapes to the heap (it is called through an
// interface): reuse one per goroutine on hot paths, or encode into a
// scratch buffer and use Call.
func (c *Conn) CallMessage(ctx context.Context, op Op, req Message) (Frame, error) {
	if err := c.check(op, HeaderSize); err != nil {
		return Frame{}, err
	}
	p := encodeBody(req)
	if err := c.check(op, len(*p)); err != nil {
		putBuf(p)
		return Frame{}, err
	}
	return c.roundTrip(ctx, op, 0, p)
}

// encodeBody returns a pooled buffer holding HeaderSize bytes of room for
// a header followed by m's encoding.
func encodeBody(m Message) *[]byte {
	p := getBuf(HeaderSize)
	*p = m.AppendTo((*p)[:HeaderSize])
	return p
}

func (c *Conn) check(op Op, n int) error {
	if !op.Valid() {
		return fmt.Errorf("%w: %v", ErrUnknownOp, op)
	}
	if n > c.opts.MaxFrameSize {
		return fmt.Errorf("%w: %d-byte %v request > %d", ErrFrameTooLarge, n, op, c.opts.MaxFrameSize)
	}
	return nil
}

// roundTrip sends the frame in p (header room + body) and waits for its
// reply. It owns p.
func (c *Conn) roundTrip(ctx context.Context, op Op, flags Flags, p *[]byte) (Frame, error) {
	if err := ctx.Err(); err != nil {
		putBuf(p)
		return Frame{}, err
	}
	h := Header{Op: op, Flags: flags}
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d <= 0 {
			putBuf(p)
			return Frame{}, context.DeadlineExceeded
		}
		h.SetBudget(d)
	}
	select {
	case c.sem <- struct{}{}:
	default:
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			putBuf(p)
			return Frame{}, ctx.Err()
		case <-c.broken:
			putBuf(p)
			return Frame{}, &ConnError{Err: c.Err()}
		}
	}
	defer func() { <-c.sem }()

	cl := callPool.Get().(*call)
	cl.op = op
	h.ID = c.nextID.Add(1)
	h.put(*p, uint32(len(*p)))

	c.mu.Lock()
	if err := c.mu.err; err != nil {
		c.mu.Unlock()
		putBuf(p)
		callPool.Put(cl)
		return Frame{}, &ConnError{Err: err}
	}
	c.mu.pending[h.ID] = cl
	// Written by this goroutine at once (if the writer is idle) only when
	// the call is alone and so was the one before: a client that calls one
	// at a time. The first call of a burst finds the others answered and
	// not yet sent again; alone, it would leave in a write of its own,
	// ahead of the rest.
	only := len(c.mu.pending) == 1
	alone := only && c.mu.lastAlone
	c.mu.lastAlone = only
	c.mu.Unlock()
	// An error means the connection is failing: fail delivers our result.
	_ = c.bw.enqueue(p, alone)

	var r result
	select {
	case r = <-cl.done:
	case <-ctx.Done():
		c.mu.Lock()
		_, mine := c.mu.pending[h.ID]
		delete(c.mu.pending, h.ID)
		c.mu.Unlock()
		if !mine {
			// The reader or fail took the call and is delivering its
			// result right now; drain it so the call can be reused.
			r = <-cl.done
			r.f.Release()
		}
		callPool.Put(cl)
		return Frame{}, ctx.Err()
	}
	callPool.Put(cl)

	if r.err != nil {
		return r.f, r.err
	}
	if st := r.f.Header.Status; st != StatusOK {
		err := replyError(&r.f)
		r.f.Release()
		return r.f, err
	}
	return r.f, nil
}

// replyError returns the error for a non-OK reply: the status's sentinel,
// or a *StatusError when the body carries detail.
func replyError(f *Frame) error {
	st := f.Header.Status
	if len(f.Body) == 0 {
		return st.Err()
	}
	var er ErrorReply
	if er.Decode(f.Body) != nil {
		return st.Err()
	}
	return &StatusError{
		Status:  st,
		Message: string(er.Message),
		Region:  er.Region,
		Epoch:   er.Epoch,
		Leader:  string(er.Leader),
	}
}

func (c *Conn) readLoop() {
	defer close(c.readerDone)
	for {
		f, err := c.rd.ReadFramePooled()
		switch {
		case err != nil && InSync(err):
			c.deliver(result{f: f, err: err})
		case err != nil:
			c.fail(err)
			return
		case isRefusal(&f.Header):
			err := fmt.Errorf("%w: %w", ErrRefused, replyError(&f))
			f.Release()
			c.failUnsent(err)
			return
		case !f.Header.IsReply():
			f.Release()
			c.fail(fmt.Errorf("%w: request frame from the server (op %v id %d)", ErrProtocol, f.Header.Op, f.Header.ID))
			return
		default:
			c.deliver(result{f: f})
		}
	}
}

// deliver hands r to the call waiting for r.f.Header.ID, or drops it if
// that call was abandoned.
func (c *Conn) deliver(r result) {
	id := r.f.Header.ID
	c.mu.Lock()
	cl := c.mu.pending[id]
	delete(c.mu.pending, id)
	c.mu.Unlock()
	if cl == nil {
		r.f.Release()
		return
	}
	if r.err == nil && r.f.Header.Op != cl.op {
		r.f.Release()
		r.err = fmt.Errorf("%w: %v reply to a %v request (id %d)", ErrProtocol, r.f.Header.Op, cl.op, id)
	}
	cl.done <- r
}

// fail breaks the connection for cause, once: it closes the socket, stops
// the writer and fails every pending call.
func (c *Conn) fail(cause error) { c.failAs(cause, false) }

// failUnsent is fail when the server said it read nothing from the
// connection: every pending call fails with Sent false.
func (c *Conn) failUnsent(cause error) { c.failAs(cause, true) }

func (c *Conn) failAs(cause error, unread bool) {
	c.mu.Lock()
	if c.mu.err != nil {
		c.mu.Unlock()
		return
	}
	c.mu.err = cause
	pending := c.mu.pending
	c.mu.pending = nil
	c.mu.Unlock()

	close(c.broken)
	c.bw.fail(cause)
	_ = c.nc.Close()
	// Read after the close: a frame handed to the socket later than this
	// load cannot have left.
	handed := c.bw.handed.Load()
	for id, cl := range pending {
		cl.done <- result{err: &ConnError{Sent: id <= handed && !unread, Err: cause}}
	}
}

// Close closes the connection, failing pending calls with a *ConnError
// wrapping ErrClosed, and waits for the Conn's goroutines to exit.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	<-c.readerDone
	<-c.bw.done
	return nil
}

// Done returns a channel closed when the connection has failed or been
// closed.
func (c *Conn) Done() <-chan struct{} { return c.broken }

// Err returns why the connection failed (ErrClosed after Close), or nil
// while it is usable.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// LocalAddr and RemoteAddr return the connection's addresses.
func (c *Conn) LocalAddr() net.Addr  { return c.nc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }
