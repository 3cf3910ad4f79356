package rdma

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
)

// TCPClientOptions configure a tcp client. The zero value of every field
// means its default.
type TCPClientOptions struct {
	// Limits are checked before a request is sent; keep them no larger
	// than the responders' (a responder rejects what exceeds its own).
	Limits
	// ConnsPerEndpoint is the number of connections kept to each
	// responder; reads are spread over them round-robin, many in flight on
	// each. Default 2.
	ConnsPerEndpoint int
	// DialTimeout bounds connecting to a responder (the read's context
	// may end it sooner). Default 5s.
	DialTimeout time.Duration
	// WriteTimeout bounds each write of requests to a connection; a
	// responder that stops reading fails the connection. Default 10s.
	WriteTimeout time.Duration
	// ReadBufferSize is the per-connection read buffer. Default 64 KiB.
	ReadBufferSize int
	// TLS, if set, makes the client speak TLS to responders (which must
	// have TCPOptions.TLS): the handshake follows the dial, bounded by the
	// same DialTimeout and the read's context. Without a ServerName the
	// responder's certificate is verified for the host of the address in
	// its RemoteKey (tlsconf.ForAddr). A failed handshake fails the read
	// with an error that wraps ErrDisconnected and the tls error. Default
	// nil: plain TCP.
	TLS *tls.Config
	// Logger receives connection failures. Default slog.Default().
	Logger *slog.Logger
}

// Defaults of TCPClientOptions.
const (
	DefaultConnsPerEndpoint = 2
	DefaultDialTimeout      = 5 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
)

// EnsureDefaults fills zero fields with their defaults.
func (o *TCPClientOptions) EnsureDefaults() {
	o.Limits.EnsureDefaults()
	if o.ConnsPerEndpoint == 0 {
		o.ConnsPerEndpoint = DefaultConnsPerEndpoint
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.ReadBufferSize == 0 {
		o.ReadBufferSize = DefaultTCPBufferSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options are usable. Errors wrap
// ErrInvalidOptions.
func (o *TCPClientOptions) Validate() error {
	if err := o.Limits.Validate(); err != nil {
		return err
	}
	if o.ConnsPerEndpoint < 1 || o.ConnsPerEndpoint > 1024 {
		return fmt.Errorf("rdma: %d connections per endpoint not in [1, 1024]: %w", o.ConnsPerEndpoint, ErrInvalidOptions)
	}
	if o.DialTimeout < 0 || o.WriteTimeout < 0 || o.ReadBufferSize < replyHeaderSize {
		return fmt.Errorf("rdma: negative timeout or tiny read buffer: %w", ErrInvalidOptions)
	}
	return nil
}

// TCPClient is the client side of the tcp provider. It keeps a small pool
// of connections per responder address and multiplexes any number of reads
// in flight over them: each request carries an id, and a reader goroutine
// per connection matches replies to their ops by id (the responder happens
// to answer in order, but the client does not rely on it). Requests posted
// concurrently are written together (one write per batch).
type TCPClient struct {
	opts   TCPClientOptions
	dialer net.Dialer
	eps    atomic.Pointer[map[string]*endpoint]
	mu     sync.Mutex // serialises changes to eps
	closed atomic.Bool
	wg     sync.WaitGroup // connection reader goroutines
	calls  sync.Pool      // *syncCall
}

var _ Client = (*TCPClient)(nil)

// syncCall is the op and completion queue of one synchronous read, pooled
// so that Read does not allocate.
type syncCall struct {
	op Op
	cq CQ
}

// NewTCPClient returns a client; it connects to responders on first use.
func NewTCPClient(opts TCPClientOptions) (*TCPClient, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &TCPClient{opts: opts}
	c.eps.Store(&map[string]*endpoint{})
	c.calls.New = func() any {
		sc := &syncCall{}
		sc.cq.ch = make(chan *Op, 1)
		return sc
	}
	return c, nil
}

// Provider returns "tcp".
func (c *TCPClient) Provider() string { return ProviderTCP }

// Caps returns the tcp provider's capabilities with the client's limits.
func (c *TCPClient) Caps() Caps { return tcpCaps(c.opts.Limits) }

// Read implements Client.
func (c *TCPClient) Read(ctx context.Context, rk *RemoteKey, off uint64, dst []byte) error {
	sc := c.calls.Get().(*syncCall)
	sc.op.Prepare(rk, off, dst)
	err := c.do(ctx, sc)
	sc.op.Remote, sc.op.one[0], sc.op.Segs = nil, Segment{}, nil
	c.calls.Put(sc)
	return err
}

// ReadV implements Client.
func (c *TCPClient) ReadV(ctx context.Context, rk *RemoteKey, segs []Segment) error {
	if len(segs) == 0 {
		return nil
	}
	sc := c.calls.Get().(*syncCall)
	sc.op.PrepareV(rk, segs)
	err := c.do(ctx, sc)
	sc.op.Remote, sc.op.Segs = nil, nil
	c.calls.Put(sc)
	return err
}

// do posts a synchronous call and waits for it, cancelling it if ctx ends
// first. It always waits for the completion, so that the destination is
// the caller's again when it returns.
func (c *TCPClient) do(ctx context.Context, sc *syncCall) error {
	cn, gen, err := c.post(ctx, &sc.op, &sc.cq, false)
	if err != nil {
		return err
	}
	select {
	case <-sc.cq.ch:
	case <-ctx.Done():
		cn.cancelOp(&sc.op, gen, ctxErr(ctx))
		<-sc.cq.ch
	}
	sc.cq.taken(&sc.op)
	return sc.op.err
}

// Post implements Client.
func (c *TCPClient) Post(ctx context.Context, op *Op, cq *CQ) error {
	_, _, err := c.post(ctx, op, cq, true)
	return err
}

// post checks op, begins it and sends its request, retrying once on a new
// connection if the chosen one turned out dead. With watch, ctx is armed
// to cancel the op; otherwise the caller watches it.
func (c *TCPClient) post(ctx context.Context, op *Op, cq *CQ, watch bool) (*tcpConn, uint64, error) {
	rk := op.Remote
	if c.closed.Load() {
		return nil, 0, ErrClosed
	}
	if rk == nil || rk.Provider != ProviderTCP {
		return nil, 0, wrongProvider(ProviderTCP, rk)
	}
	if _, err := checkSegments(op.Segs, rk.Len, &c.opts.Limits); err != nil {
		return nil, 0, err
	}
	select {
	case <-ctx.Done():
		return nil, 0, ctxErr(ctx)
	default:
	}
	gen, err := op.begin(cq)
	if err != nil {
		return nil, 0, err
	}
	if len(op.Segs) == 0 {
		op.complete(nil) // nothing to read; only Post gets here
		return nil, gen, nil
	}
	ep := c.endpoint(rk.Addr)
	for attempt := 0; ; attempt++ {
		cn, err := ep.get(ctx)
		if err == nil {
			if err = cn.post(ctx, op, gen, watch); err == nil {
				return cn, gen, nil
			}
		}
		if attempt == 1 || errors.Is(err, ErrClosed) || ctx.Err() != nil {
			op.abort()
			return nil, 0, err
		}
	}
}

// wrongProvider is the error for a remote key another provider issued.
func wrongProvider(want string, rk *RemoteKey) error {
	if rk == nil {
		return fmt.Errorf("rdma: nil remote key: %w", ErrBadKey)
	}
	return fmt.Errorf("rdma: remote key of provider %q given to a %s client: %w", rk.Provider, want, ErrBadKey)
}

// endpoint returns the connection pool for addr, creating it.
func (c *TCPClient) endpoint(addr string) *endpoint {
	if ep := (*c.eps.Load())[addr]; ep != nil {
		return ep
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.eps.Load()
	if ep := old[addr]; ep != nil {
		return ep
	}
	ep := &endpoint{c: c, addr: addr, conns: make([]atomic.Pointer[tcpConn], c.opts.ConnsPerEndpoint)}
	next := maps.Clone(old)
	next[addr] = ep
	c.eps.Store(&next)
	return ep
}

// Close implements Client: reads in flight fail with ErrClosed.
func (c *TCPClient) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	for _, ep := range *c.eps.Load() {
		ep.dialMu.Lock()
		for i := range ep.conns {
			if cn := ep.conns[i].Load(); cn != nil {
				cn.fail(ErrClosed)
			}
		}
		ep.dialMu.Unlock()
	}
	c.wg.Wait()
	return nil
}

// endpoint is the connection pool of one responder address.
type endpoint struct {
	c      *TCPClient
	addr   string
	next   atomic.Uint32
	conns  []atomic.Pointer[tcpConn]
	dialMu sync.Mutex // serialises dials and Close
}

// get returns a live connection, round-robin, dialing when a slot is empty
// or its connection died.
func (ep *endpoint) get(ctx context.Context) (*tcpConn, error) {
	i := int(ep.next.Add(1) % uint32(len(ep.conns)))
	if cn := ep.conns[i].Load(); cn != nil && !cn.dead.Load() {
		return cn, nil
	}
	return ep.dial(ctx, i)
}

func (ep *endpoint) dial(ctx context.Context, i int) (*tcpConn, error) {
	ep.dialMu.Lock()
	defer ep.dialMu.Unlock()
	if cn := ep.conns[i].Load(); cn != nil && !cn.dead.Load() {
		return cn, nil
	}
	c := ep.c
	if c.closed.Load() {
		return nil, ErrClosed
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	nc, err := c.dialer.DialContext(dctx, "tcp", ep.addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx)
		}
		return nil, fmt.Errorf("rdma: dial responder %s: %w: %w", ep.addr, ErrDisconnected, err)
	}
	if c.opts.TLS != nil {
		tc := tls.Client(nc, tlsconf.ForAddr(c.opts.TLS, ep.addr))
		if err := tc.HandshakeContext(dctx); err != nil {
			_ = nc.Close()
			if ctx.Err() != nil {
				return nil, ctxErr(ctx)
			}
			return nil, fmt.Errorf("rdma: TLS handshake with responder %s failed: %w: %w", ep.addr, ErrDisconnected, err)
		}
		nc = tc
	}
	cn := &tcpConn{ep: ep, slot: i, nc: nc, pending: make(map[uint64]*Op)}
	ep.conns[i].Store(cn)
	c.wg.Add(1)
	go cn.readLoop()
	return cn, nil
}

// tcpConn is one connection to a responder with its reads in flight.
//
// Locking notes: wmu < pmu < Op.mu.
type tcpConn struct {
	ep   *endpoint
	slot int
	nc   net.Conn
	dead atomic.Bool

	// wmu guards the request buffers. One poster at a time is the
	// flusher: it writes wbuf while others append to the spare buffer.
	wmu      sync.Mutex
	wbuf     []byte
	spare    []byte
	flushing bool
	nextID   uint64

	// pmu guards pending (ops in flight by request id) and err (set once,
	// when the connection fails; no op is added after that).
	pmu     sync.Mutex
	pending map[uint64]*Op
	err     error
}

// post sends op's request. The request bytes are queued and op is made
// findable by the reader (and cancellable) before anything is written, so
// neither a reply nor a cancellation can overtake it; after arming the
// cancellation post no longer touches op. An error means cn is dead and op
// was not posted.
func (cn *tcpConn) post(ctx context.Context, op *Op, gen uint64, watch bool) error {
	cn.wmu.Lock()
	cn.nextID++
	id := cn.nextID
	start := len(cn.wbuf)
	cn.wbuf = appendRequest(cn.wbuf, id, op.Remote.Key, op.Remote.Region, op.Segs)
	op.reqID = id
	op.conn = cn
	cn.pmu.Lock()
	if cn.err != nil {
		err := cn.err
		cn.pmu.Unlock()
		cn.wbuf = cn.wbuf[:start]
		cn.wmu.Unlock()
		op.conn = nil
		return err
	}
	cn.pending[id] = op
	cn.pmu.Unlock()
	if watch {
		op.watch(ctx, gen, cn)
	}
	cn.flushLocked()
	return nil
}

// flushLocked writes the queued requests unless another poster is already
// writing (it will write them too). REQUIRES: cn.wmu held; released on
// return.
func (cn *tcpConn) flushLocked() {
	if cn.flushing {
		cn.wmu.Unlock()
		return
	}
	cn.flushing = true
	for len(cn.wbuf) > 0 {
		buf := cn.wbuf
		cn.wbuf = cn.spare[:0]
		cn.wmu.Unlock()
		err := cn.nc.SetWriteDeadline(time.Now().Add(cn.ep.c.opts.WriteTimeout))
		if err == nil {
			_, err = cn.nc.Write(buf)
		}
		cn.wmu.Lock()
		cn.spare = buf[:0]
		if err != nil {
			cn.wbuf = cn.wbuf[:0]
			cn.flushing = false
			cn.wmu.Unlock()
			cn.fail(err)
			return
		}
	}
	cn.flushing = false
	cn.wmu.Unlock()
}

// cancelOp completes post gen of op with err if it is still waiting for
// its reply; a reply that arrives later is discarded.
func (cn *tcpConn) cancelOp(op *Op, gen uint64, err error) {
	if !op.cancel(gen) {
		return // claimed by the reader or a failure: it completes op
	}
	cn.pmu.Lock()
	if cn.pending[op.reqID] == op {
		delete(cn.pending, op.reqID)
	}
	cn.pmu.Unlock()
	op.complete(err)
}

// readLoop reads replies and completes their ops until the connection
// fails.
func (cn *tcpConn) readLoop() {
	defer cn.ep.c.wg.Done()
	br := bufio.NewReaderSize(cn.nc, cn.ep.c.opts.ReadBufferSize)
	var hdr [replyHeaderSize]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			cn.fail(err)
			return
		}
		id, st, n, err := parseReplyHeader(hdr[:])
		if err != nil {
			cn.fail(err)
			return
		}
		cn.pmu.Lock()
		op := cn.pending[id]
		delete(cn.pending, id)
		cn.pmu.Unlock()
		if op == nil || !op.claim() {
			// Cancelled: drop the reply; the canceller completes op.
			if _, err := br.Discard(n); err != nil {
				cn.fail(err)
				return
			}
			continue
		}
		if st != statusOK {
			op.complete(fmt.Errorf("rdma: read of region %d via %s: %w", op.Remote.Region, cn.ep.addr, st.err()))
			continue
		}
		if err := cn.receive(br, op, n); err != nil {
			op.complete(err)
			cn.fail(err)
			return
		}
		op.complete(nil)
	}
}

// receive reads n bytes of reply data into op's segments.
func (cn *tcpConn) receive(br *bufio.Reader, op *Op, n int) error {
	want := 0
	for i := range op.Segs {
		want += len(op.Segs[i].Dst)
	}
	if want != n {
		return fmt.Errorf("rdma: reply of %d bytes to a read of %d: %w", n, want, ErrProtocol)
	}
	for i := range op.Segs {
		if _, err := io.ReadFull(br, op.Segs[i].Dst); err != nil {
			return cn.connErr(err)
		}
	}
	return nil
}

// connErr is the error ops fail with when the connection broke.
func (cn *tcpConn) connErr(cause error) error {
	if errors.Is(cause, ErrClosed) || errors.Is(cause, ErrProtocol) {
		return cause
	}
	if cn.ep.c.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("rdma: connection to %s: %w: %w", cn.ep.addr, ErrDisconnected, cause)
}

// fail marks the connection dead, closes it, and completes every op in
// flight on it with the failure. Idempotent.
func (cn *tcpConn) fail(cause error) {
	err := cn.connErr(cause)
	cn.pmu.Lock()
	if cn.err != nil {
		cn.pmu.Unlock()
		return
	}
	cn.err = err
	pending := cn.pending
	cn.pending = nil
	cn.pmu.Unlock()
	cn.dead.Store(true)
	_ = cn.nc.Close()
	cn.ep.conns[cn.slot].CompareAndSwap(cn, nil)
	if !errors.Is(err, ErrClosed) {
		cn.ep.c.opts.Logger.Debug("rdma: connection failed", slog.String("addr", cn.ep.addr), slog.Int("in_flight", len(pending)), slog.Any("error", err))
	}
	for _, op := range pending {
		if op.claim() {
			op.complete(err)
		}
	}
}
