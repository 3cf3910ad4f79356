package rdma

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/monotime"
	"github.com/cellstore/cell/internal/netaddr"
)

// TCPOptions configure a tcp responder. The zero value of every field means
// its default.
type TCPOptions struct {
	// Limits bound each request; a request over them is answered with
	// ErrTooLarge or ErrTooManySegments. Defaults: see Limits.
	Limits
	// AdvertiseAddr is the address put in RemoteKeys, for clients to dial.
	// Default: the listener's address (fine on loopback and for tests; a
	// server listening on ":port" sets its reachable host:port here).
	AdvertiseAddr string
	// ReadBufferSize is the per-connection read buffer. Default 64 KiB.
	ReadBufferSize int
	// WriteBufferSize is the per-connection reply buffer to start with.
	// Replies are gathered in it and written together once no request is
	// waiting in the read buffer; it grows to hold the largest reply
	// (MaxReadLen plus a header). Default 64 KiB.
	WriteBufferSize int
	// WriteTimeout bounds each write of replies: a client that stops
	// reading its replies loses its connection instead of pinning a
	// goroutine and a buffer. Default 30s.
	WriteTimeout time.Duration
	// IdleTimeout, if positive, closes a connection on which no request
	// started for this long. Default 0: none (cellserver sets its
	// --idle-timeout). The client redials a closed connection.
	IdleTimeout time.Duration
	// FrameTimeout, if positive, closes a connection on which a request
	// started and did not arrive whole within this. Default 0: none
	// (cellserver sets its --frame-timeout).
	FrameTimeout time.Duration
	// MaxConns, if positive, bounds the connections open at once, and
	// MaxConnsPerHost those from one client IP address: a connection
	// past either is closed at once, before anything is read or
	// allocated for it, and counted (ResponderStats.RefusedMaxConns,
	// RefusedMaxConnsPerHost); open ones are unaffected, and the client's
	// read fails as not served. Each open connection holds a read and a
	// reply buffer (ReadBufferSize + WriteBufferSize). Default 0: no
	// bound (cellserver sets its --max-connections and
	// --max-connections-per-host).
	MaxConns, MaxConnsPerHost int
	// TLS, if set, makes the responder speak TLS: each accepted
	// connection's handshake runs in its own goroutine (never in the
	// accept loop), bounded by FrameTimeout (DefaultTLSHandshakeTimeout
	// when FrameTimeout is 0); a connection whose handshake fails or times
	// out is closed and counted in ResponderStats.TLSRefused. Set
	// ClientAuth (tls.RequireAndVerifyClientCert, as
	// tlsconf.Source.ServerConfig does with ClientCertAuth) to admit only
	// clients with a certificate from ClientCAs. Default nil: plain TCP.
	TLS *tls.Config
	// Logger receives connection errors and malformed-frame reports.
	// Default slog.Default().
	Logger *slog.Logger
	// TestingKnobs are test hooks; nil in production.
	TestingKnobs TCPResponderKnobs
}

// TCPResponderKnobs are test hooks of a responder.
type TCPResponderKnobs struct {
	// BeforeServe fires in a connection's goroutine for every well-formed
	// request, before its key and ranges are checked.
	BeforeServe func(key Key)
	// AfterCopy fires when a request's ranges have been copied, while its
	// registration is still pinned (Deregister waits for it) and before
	// the responder re-checks that the key was not revoked meanwhile.
	AfterCopy func(key Key)
}

// Defaults of TCPOptions.
const (
	DefaultTCPBufferSize         = 64 << 10
	DefaultResponderWriteTimeout = 30 * time.Second
	// DefaultTLSHandshakeTimeout bounds a TLS handshake on either side
	// when no other timeout does (a responder without FrameTimeout).
	DefaultTLSHandshakeTimeout = 10 * time.Second
	// maxTombstones is how many deregistered keys a responder remembers,
	// to answer ErrRevoked rather than ErrBadKey.
	maxTombstones = 1024
)

// EnsureDefaults fills zero fields with their defaults.
func (o *TCPOptions) EnsureDefaults() {
	o.Limits.EnsureDefaults()
	if o.ReadBufferSize == 0 {
		o.ReadBufferSize = DefaultTCPBufferSize
	}
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = DefaultTCPBufferSize
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultResponderWriteTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options are usable. Errors wrap
// ErrInvalidOptions.
func (o *TCPOptions) Validate() error {
	if err := o.Limits.Validate(); err != nil {
		return err
	}
	if o.ReadBufferSize < reqHeaderSize || o.WriteBufferSize < replyHeaderSize {
		return fmt.Errorf("rdma: buffer sizes %d/%d too small: %w", o.ReadBufferSize, o.WriteBufferSize, ErrInvalidOptions)
	}
	if o.WriteTimeout < 0 || o.IdleTimeout < 0 || o.FrameTimeout < 0 {
		return fmt.Errorf("rdma: negative timeout: %w", ErrInvalidOptions)
	}
	if o.MaxConns < 0 || o.MaxConnsPerHost < 0 {
		return fmt.Errorf("rdma: negative connection limit: %w", ErrInvalidOptions)
	}
	return nil
}

// TCPResponder is the server side of the tcp provider: a passive responder
// on its own TCP port that checks each request's key and ranges and copies
// the bytes out of the registered region with 8-byte atomic loads. It runs
// no tree code and takes no lock on the read path: registrations are an
// immutable map behind an atomic pointer, replaced on every Register and
// Deregister. One goroutine per connection reads requests, serves them in
// order and writes the replies, batched.
type TCPResponder struct {
	opts  TCPOptions
	ln    net.Listener
	addr  string
	regs  atomic.Pointer[regTable]
	stats responderCounters
	wg    sync.WaitGroup

	mu struct {
		sync.Mutex
		closed  bool
		conns   map[net.Conn]struct{}
		perHost map[string]int // open connections by client IP address
		tombs   []Key          // deregistered keys still in regs, oldest first
	}
}

var _ Server = (*TCPResponder)(nil)

// registration is one registered region, or the tombstone of a revoked one
// (mem nil).
type registration struct {
	key    Key
	region uint32
	mem    []byte
	// revoked is set by Deregister before it waits for active to drain.
	revoked atomic.Bool
	// active counts copies in progress out of mem.
	active atomic.Int64
	// leaseUntil is the registration's read lease (SetLease): a
	// monotime reading after which reads fail; 0: no lease.
	leaseUntil atomic.Int64
}

// leased reports whether reg may be read now (its lease, if any, holds).
func (reg *registration) leased() bool {
	lu := reg.leaseUntil.Load()
	return lu == 0 || monotime.Now() <= lu
}

// regTable is immutable once published.
type regTable map[Key]*registration

// Listen starts a responder listening on addr ("127.0.0.1:0" picks a free
// port) and serving connections until Close.
func Listen(addr string, opts TCPOptions) (*TCPResponder, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: listen on %s: %w", addr, err)
	}
	r := &TCPResponder{opts: opts, ln: ln, addr: opts.AdvertiseAddr}
	if r.addr == "" {
		r.addr = ln.Addr().String()
	}
	r.regs.Store(&regTable{})
	r.mu.conns = make(map[net.Conn]struct{})
	r.mu.perHost = make(map[string]int)
	r.wg.Add(1)
	go r.acceptLoop()
	r.opts.Logger.Info("rdma: tcp responder listening", slog.String("addr", ln.Addr().String()), slog.String("advertise", r.addr))
	return r, nil
}

// Addr returns the address clients dial (AdvertiseAddr or the listener's).
func (r *TCPResponder) Addr() string { return r.addr }

// Provider returns "tcp".
func (r *TCPResponder) Provider() string { return ProviderTCP }

// Caps returns the tcp provider's capabilities with the responder's limits.
func (r *TCPResponder) Caps() Caps { return tcpCaps(r.opts.Limits) }

func tcpCaps(l Limits) Caps {
	return Caps{OrderedReads: true, VectorReads: true, MaxReadLen: l.MaxReadLen, MaxSegments: l.MaxSegments}
}

// Register makes region readable through the responder.
func (r *TCPResponder) Register(region Region) (RemoteKey, error) {
	mem := region.Bytes()
	if !atomicmem.Aligned(mem) || len(mem)%atomicmem.Word != 0 {
		return RemoteKey{}, fmt.Errorf("rdma: region %d memory not 8-byte aligned: %w", region.ID(), ErrMisaligned)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return RemoteKey{}, ErrClosed
	}
	old := *r.regs.Load()
	k := newKey(func(k Key) bool { _, ok := old[k]; return ok })
	next := maps.Clone(old)
	next[k] = &registration{key: k, region: region.ID(), mem: mem}
	r.regs.Store(&next)
	return RemoteKey{Provider: ProviderTCP, Key: k, Region: region.ID(), Len: uint64(len(mem)), Addr: r.addr}, nil
}

// SetLease sets k's read lease: reads that end after until (a
// monotime.Now reading) fail as revoked, until a later SetLease extends
// it; 0 removes the lease. The server holding a region's raft leadership
// renews it: a paused or deposed leader's memory is never read after its
// lease, whatever its process does.
func (r *TCPResponder) SetLease(k Key, until int64) error {
	reg := (*r.regs.Load())[k]
	if reg == nil || reg.mem == nil {
		return fmt.Errorf("rdma: lease of %v: %w", k, ErrBadKey)
	}
	reg.leaseUntil.Store(until)
	return nil
}

// Deregister revokes k: requests that arrive later fail with ErrRevoked
// (ErrBadKey once k is among the oldest of more than 1024 revoked keys), a
// request copying while Deregister runs fails with ErrRevoked, and
// Deregister returns only once no copy out of the region is in progress.
func (r *TCPResponder) Deregister(k Key) error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	old := *r.regs.Load()
	reg := old[k]
	if reg == nil || reg.mem == nil {
		r.mu.Unlock()
		return fmt.Errorf("rdma: deregister %v: %w", k, ErrBadKey)
	}
	reg.revoked.Store(true)
	next := maps.Clone(old)
	tomb := &registration{key: k, region: reg.region}
	tomb.revoked.Store(true)
	next[k] = tomb
	r.mu.tombs = append(r.mu.tombs, k)
	if len(r.mu.tombs) > maxTombstones {
		delete(next, r.mu.tombs[0])
		r.mu.tombs = r.mu.tombs[1:]
	}
	r.regs.Store(&next)
	r.mu.Unlock()
	waitIdle(reg)
	return nil
}

// waitIdle waits until no copy out of a revoked registration is in
// progress. Copies are bounded memory copies (at most MaxReadLen bytes,
// no I/O), so this is a short wait.
func waitIdle(reg *registration) {
	for i := 0; reg.active.Load() != 0; i++ {
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// Close stops listening, closes every connection (clients fail their
// pending reads with ErrDisconnected), revokes every registration and waits
// for the connection goroutines to exit.
func (r *TCPResponder) Close() error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil
	}
	r.mu.closed = true
	conns := r.mu.conns
	r.mu.conns = nil
	r.mu.Unlock()

	err := r.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	regs := *r.regs.Swap(&regTable{})
	for _, reg := range regs {
		reg.revoked.Store(true)
	}
	for _, reg := range regs {
		waitIdle(reg)
	}
	r.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("rdma: close responder: %w", err)
	}
	return nil
}

func (r *TCPResponder) acceptLoop() {
	defer r.wg.Done()
	backoff := time.Duration(0)
	for {
		nc, err := r.ln.Accept()
		if err != nil {
			r.mu.Lock()
			closed := r.mu.closed
			r.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off as
			// net/http does, and keep serving the open connections.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			r.opts.Logger.Warn("rdma: accept failed", slog.Any("error", err), slog.Duration("retry_in", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		r.mu.Lock()
		if r.mu.closed {
			r.mu.Unlock()
			_ = nc.Close()
			return
		}
		host := netaddr.Host(nc)
		if over := r.overLimitLocked(host); over != nil {
			r.mu.Unlock()
			over.Add(1)
			_ = nc.Close()
			continue
		}
		r.mu.conns[nc] = struct{}{}
		r.mu.perHost[host]++
		r.wg.Add(1)
		r.mu.Unlock()
		r.stats.conns.Add(1)
		go r.serveConn(nc)
	}
}

// overLimitLocked returns the counter of the limit a new connection from
// host is over, or nil.
// REQUIRES: r.mu held.
func (r *TCPResponder) overLimitLocked(host string) *atomic.Int64 {
	switch {
	case r.opts.MaxConns > 0 && len(r.mu.conns) >= r.opts.MaxConns:
		return &r.stats.refusedMax
	case r.opts.MaxConnsPerHost > 0 && r.mu.perHost[host] >= r.opts.MaxConnsPerHost:
		return &r.stats.refusedPerHost
	}
	return nil
}

// session is the state of one connection's goroutine.
type session struct {
	r     *TCPResponder
	nc    net.Conn
	br    *bufio.Reader
	out   []byte // replies not yet written
	hdr   [reqHeaderSize]byte
	segs  []byte // segment descriptors of the current request
	local responderCounts
}

func (r *TCPResponder) serveConn(nc net.Conn) {
	defer r.wg.Done()
	conn := nc
	if r.opts.TLS != nil {
		tc, err := r.handshake(nc)
		if err != nil {
			r.stats.tlsRefused.Add(1)
			r.opts.Logger.Warn("rdma: TLS handshake refused", slog.String("remote", nc.RemoteAddr().String()), slog.Any("error", err))
			r.dropConn(nc)
			return
		}
		conn = tc
	}
	s := &session{
		r:    r,
		nc:   conn,
		br:   bufio.NewReaderSize(conn, r.opts.ReadBufferSize),
		out:  make([]byte, 0, r.opts.WriteBufferSize),
		segs: make([]byte, segDescSize*r.opts.MaxSegments),
	}
	r.stats.open.Add(1)
	err := s.loop()
	s.flushStats()
	r.stats.open.Add(-1)
	if errors.Is(err, ErrProtocol) {
		r.stats.malformed.Add(1)
		r.opts.Logger.Warn("rdma: closing connection after a malformed frame", slog.String("remote", nc.RemoteAddr().String()), slog.Any("error", err))
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		r.opts.Logger.Debug("rdma: connection ended", slog.String("remote", nc.RemoteAddr().String()), slog.Any("error", err))
	}
	_ = conn.Close()
	r.dropConn(nc)
}

// handshake runs the server side of a TLS handshake on nc, bounded by the
// frame timeout (or DefaultTLSHandshakeTimeout).
func (r *TCPResponder) handshake(nc net.Conn) (*tls.Conn, error) {
	timeout := r.opts.FrameTimeout
	if timeout <= 0 {
		timeout = DefaultTLSHandshakeTimeout
	}
	tc := tls.Server(nc, r.opts.TLS)
	_ = nc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return tc, nil
}

// dropConn closes nc and forgets it.
func (r *TCPResponder) dropConn(nc net.Conn) {
	_ = nc.Close()
	host := netaddr.Host(nc)
	r.mu.Lock()
	if _, ok := r.mu.conns[nc]; ok {
		delete(r.mu.conns, nc)
		if r.mu.perHost[host]--; r.mu.perHost[host] <= 0 {
			delete(r.mu.perHost, host)
		}
	}
	r.mu.Unlock()
}

// loop serves requests until the connection ends (io.EOF) or misbehaves;
// it never returns nil.
func (s *session) loop() error {
	lim := &s.r.opts.Limits
	for {
		// Write the gathered replies before waiting for more requests:
		// pipelined requests already buffered are answered in one write.
		if !s.nextBuffered() || len(s.out) >= s.r.opts.WriteBufferSize {
			if err := s.flush(); err != nil {
				return err
			}
		}
		if err := s.awaitRequest(); err != nil {
			return err
		}
		if _, err := io.ReadFull(s.br, s.hdr[:]); err != nil {
			return err
		}
		h, err := parseRequestHeader(s.hdr[:])
		if err != nil {
			return err
		}
		tooMany := h.nseg > lim.MaxSegments
		if tooMany {
			if _, err := s.br.Discard(segDescSize * h.nseg); err != nil {
				return err
			}
		} else if _, err := io.ReadFull(s.br, s.segs[:segDescSize*h.nseg]); err != nil {
			return err
		}
		if hook := s.r.opts.TestingKnobs.BeforeServe; hook != nil {
			hook(h.key)
		}
		if err := s.serve(&h, tooMany); err != nil {
			return err
		}
	}
}

// awaitRequest waits for the next request's first byte under the idle
// timeout, then puts the request under the frame timeout unless it is
// already whole in the read buffer. Without timeouts it does nothing.
func (s *session) awaitRequest() error {
	idle, frame := s.r.opts.IdleTimeout, s.r.opts.FrameTimeout
	if idle <= 0 && frame <= 0 {
		return nil
	}
	if s.br.Buffered() == 0 {
		var t time.Time
		if idle > 0 {
			t = time.Now().Add(idle)
		}
		_ = s.nc.SetReadDeadline(t)
		if _, err := s.br.Peek(1); err != nil {
			return err
		}
	}
	if frame > 0 && !s.nextBuffered() {
		_ = s.nc.SetReadDeadline(time.Now().Add(frame))
	}
	return nil
}

// nextBuffered reports whether the whole next request is already in the
// read buffer, so that serving it cannot block.
func (s *session) nextBuffered() bool {
	n := s.br.Buffered()
	if n < reqHeaderSize {
		return false
	}
	b, _ := s.br.Peek(reqHeaderSize)
	return uint64(n) >= uint64(le.Uint32(b[offLength:]))
}

// serve answers one request into s.out.
func (s *session) serve(h *reqHeader, tooMany bool) error {
	reg := (*s.r.regs.Load())[h.key]
	st, total, err := s.check(h, reg, tooMany)
	if err != nil {
		return err
	}
	if st != statusOK {
		s.reply(h.id, st)
		return nil
	}
	if len(s.out)+replyHeaderSize+total > cap(s.out) && len(s.out) > 0 {
		if err := s.flush(); err != nil {
			return err
		}
	}
	start := len(s.out)
	s.out = grow(s.out, replyHeaderSize+total)
	// Pin the registration: Deregister waits for active to drain, so the
	// region's memory stays mapped while it is read.
	reg.active.Add(1)
	if reg.revoked.Load() {
		st = statusRevoked
	} else {
		pos := start + replyHeaderSize
		for i := range h.nseg {
			off, n, _ := parseSegment(s.segs[segDescSize*i:])
			atomicmem.LoadTo(s.out[pos:pos+int(n)], reg.mem[off:off+n])
			pos += int(n)
		}
		if hook := s.r.opts.TestingKnobs.AfterCopy; hook != nil {
			hook(h.key)
		}
		// A copy that overlapped Deregister, or that ended after the
		// lease, is not returned as valid.
		if reg.revoked.Load() || !reg.leased() {
			st = statusRevoked
		}
	}
	reg.active.Add(-1)
	if st != statusOK {
		s.out = s.out[:start]
		s.reply(h.id, st)
		return nil
	}
	putReplyHeader(s.out[start:], h.id, statusOK, total)
	s.local.reads++
	s.local.segments += uint64(h.nseg)
	s.local.bytes += uint64(total)
	return nil
}

// check judges a request against its registration and the limits. An
// error (a malformed segment descriptor) closes the connection.
func (s *session) check(h *reqHeader, reg *registration, tooMany bool) (status, int, error) {
	switch {
	case reg == nil || reg.region != h.region:
		return statusBadKey, 0, nil
	case reg.mem == nil || reg.revoked.Load() || !reg.leased():
		return statusRevoked, 0, nil
	case tooMany:
		return statusTooManySegments, 0, nil
	}
	length := uint64(len(reg.mem))
	total := uint64(0)
	for i := range h.nseg {
		off, n, err := parseSegment(s.segs[segDescSize*i:])
		if err != nil {
			return 0, 0, err
		}
		if st := checkRange(off, n, length); st != statusOK {
			return st, 0, nil
		}
		total += n
	}
	if total > uint64(s.r.opts.MaxReadLen) {
		return statusTooLarge, 0, nil
	}
	return statusOK, int(total), nil
}

// reply appends a data-less reply with status st.
func (s *session) reply(id uint64, st status) {
	start := len(s.out)
	s.out = grow(s.out, replyHeaderSize)
	putReplyHeader(s.out[start:], id, st, 0)
	s.local.rejected[st]++
}

// flush publishes the local counters and writes the gathered replies (in
// that order: a client that got a reply finds it counted).
func (s *session) flush() error {
	if len(s.out) == 0 {
		return nil
	}
	s.flushStats()
	err := s.nc.SetWriteDeadline(time.Now().Add(s.r.opts.WriteTimeout))
	if err == nil {
		_, err = s.nc.Write(s.out)
	}
	s.out = s.out[:0]
	if cap(s.out) > 4*s.r.opts.WriteBufferSize {
		// Do not keep a buffer grown for one huge reply.
		s.out = make([]byte, 0, s.r.opts.WriteBufferSize)
	}
	return err
}

func (s *session) flushStats() {
	s.r.stats.add(&s.local)
	s.local = responderCounts{}
}

// responderCounts are a connection's counters not yet published.
type responderCounts struct {
	reads, segments, bytes uint64
	rejected               [numStatuses]uint64
}

// responderCounters are the published counters.
type responderCounters struct {
	conns, open, malformed atomic.Int64
	tlsRefused             atomic.Int64
	refusedMax             atomic.Int64
	refusedPerHost         atomic.Int64
	reads, segments, bytes atomic.Uint64
	rejected               [numStatuses]atomic.Uint64
}

func (c *responderCounters) add(l *responderCounts) {
	if l.reads != 0 {
		c.reads.Add(l.reads)
		c.segments.Add(l.segments)
		c.bytes.Add(l.bytes)
	}
	for i, n := range l.rejected {
		if n != 0 {
			c.rejected[i].Add(n)
		}
	}
}

// ResponderStats are a responder's counters, for metrics (a Prometheus
// collector reads them on scrape). Counters only grow, except OpenConns.
type ResponderStats struct {
	// Conns counts connections accepted; OpenConns are open now.
	Conns, OpenConns int64
	// Malformed counts connections closed because of a malformed frame.
	Malformed int64
	// TLSRefused counts connections closed because their TLS handshake
	// failed or timed out (a plain client, an untrusted or expired
	// certificate, none where one is required).
	TLSRefused int64
	// RefusedMaxConns and RefusedMaxConnsPerHost count connections
	// closed at once for being over MaxConns or MaxConnsPerHost.
	RefusedMaxConns, RefusedMaxConnsPerHost int64
	// Reads counts requests served with data, Segments their ranges and
	// Bytes the bytes copied.
	Reads, Segments, Bytes uint64
	// Rejected counts requests refused, by cause.
	BadKey, Revoked, OutOfBounds, Misaligned, TooLarge, TooManySegments uint64
}

// Stats returns the responder's counters. A connection publishes its
// counts just before it writes a batch of replies.
func (r *TCPResponder) Stats() ResponderStats {
	c := &r.stats
	return ResponderStats{
		Conns:                  c.conns.Load(),
		OpenConns:              c.open.Load(),
		Malformed:              c.malformed.Load(),
		TLSRefused:             c.tlsRefused.Load(),
		RefusedMaxConns:        c.refusedMax.Load(),
		RefusedMaxConnsPerHost: c.refusedPerHost.Load(),
		Reads:                  c.reads.Load(),
		Segments:               c.segments.Load(),
		Bytes:                  c.bytes.Load(),
		BadKey:                 c.rejected[statusBadKey].Load(),
		Revoked:                c.rejected[statusRevoked].Load(),
		OutOfBounds:            c.rejected[statusOutOfBounds].Load(),
		Misaligned:             c.rejected[statusMisaligned].Load(),
		TooLarge:               c.rejected[statusTooLarge].Load(),
		TooManySegments:        c.rejected[statusTooManySegments].Load(),
	}
}
