package server

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/internal/netaddr"
	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/wire"
)

// conn is one client connection: a reader goroutine (serve) that hands
// requests to the workers, and a ReplyWriter through which the workers
// answer, in any order.
type conn struct {
	s    *Server
	nc   net.Conn // a *tls.Conn over raw on a TLS port
	raw  net.Conn // the TCP connection under nc's TLS; nil on plain TCP
	rw   *wire.ReplyWriter
	host string // the client's IP address (connection limit per host)
	// role is the peer's, from its verified certificate (tlsconf.PeerRole):
	// RoleNone on plain TCP. Set by handshake before the first request.
	role tlsconf.Role
	// inflight counts requests handed to the workers and not answered
	// yet; the connection closes only when it is zero. jobs is the same
	// count, readable (begin, done).
	inflight sync.WaitGroup
	jobs     atomic.Int32
	// slots holds a token for each request read and not answered yet
	// (MaxInflightPerConn): the reader takes one before it reads a frame,
	// and waits, reading nothing, while they are all taken.
	slots chan struct{}

	// dlMu orders the reader's deadlines with stopReading's: once
	// stopping, the deadline stays in the past.
	dlMu     sync.Mutex
	stopping bool

	// lastAlone: the last reply was the only request in flight (alone).
	lastAlone atomic.Bool
}

// acceptLoop accepts connections until the listener closes.
func (rs *rpcServer) acceptLoop() {
	s := rs.s
	var delay time.Duration
	for {
		nc, err := s.rpcLn.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: back off.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("server: accept", slog.Any("err", err), slog.Duration("retry_in", delay))
				time.Sleep(delay)
				continue
			}
			s.failed(err)
			return
		}
		delay = 0
		rs.newConn(nc)
	}
}

// isTemporary reports accept errors that pass (EMFILE, ENFILE,
// ECONNABORTED...), as net/http does.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (rs *rpcServer) newConn(nc net.Conn) {
	s := rs.s
	host := netaddr.Host(nc)
	s.mu.Lock()
	if s.mu.state == stateClosed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	if reason := rs.overLimit(host); reason != "" {
		s.mu.Unlock()
		rs.refuse(nc, reason)
		return
	}
	var raw net.Conn
	if s.opts.TLS != nil {
		// The handshake is the connection goroutine's (serve).
		raw, nc = nc, tls.Server(nc, s.opts.TLS)
	}
	rw, err := wire.NewReplyWriter(nc, &s.wopts)
	if err != nil {
		s.mu.Unlock()
		_ = nc.Close()
		s.log.Error("server: reply writer", slog.Any("err", err))
		return
	}
	c := &conn{s: s, nc: nc, raw: raw, rw: rw, host: host, slots: make(chan struct{}, s.opts.MaxInflightPerConn)}
	s.mu.conns[c] = struct{}{}
	s.mu.perHost[host]++
	rs.conns.Add(1)
	s.mu.Unlock()
	s.metrics.conns.Inc()
	s.metrics.accepted.Inc()
	go c.serve()
}

// stopReading makes the reader return at its next read: Close uses it to
// stop taking requests while letting those already read finish.
func (c *conn) stopReading() {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	c.stopping = true
	_ = c.nc.SetReadDeadline(time.Now())
}

// SetReadDeadline sets the connection's read deadline for the reader's
// idle and frame timeouts (wire.Deadliner), unless stopReading ran.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	if c.stopping {
		return nil
	}
	return c.nc.SetReadDeadline(t)
}

// stopped reports whether stopReading ran.
func (c *conn) stopped() bool {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	return c.stopping
}

// acquire takes a slot for the next request, waiting while the
// connection has MaxInflightPerConn requests unanswered: the client's
// further requests wait in its socket (backpressure).
func (c *conn) acquire() {
	select {
	case c.slots <- struct{}{}:
	default:
		c.s.metrics.refusals.WithLabelValues(refuseInflight).Inc()
		c.slots <- struct{}{}
	}
}

// answered takes a job out of the count of jobs whose reply is still to
// be made, as its reply is about to be sent, and reports whether the
// reply may be written at once by its worker (wire.ReplyWriter.SendAlone):
// its request is the only one in flight on the connection, and so was the
// last one answered, as with a client that sends a request only after the
// reply to the one before. The last reply of a pipelined burst is alone
// too, but the one before it was not: it waits for the writer goroutine
// and leaves with the burst, so that the client's next burst is not cut
// in two.
//
// The count drops before the send, not when the job ends (done): a client
// may send its next request as soon as the reply's bytes leave, and that
// request is alone even if this job's worker has not finished yet.
func (c *conn) answered() bool {
	// Not the slots: the reader holds one while it waits for the next
	// request.
	only := c.jobs.Add(-1) == 0
	return c.lastAlone.Swap(only) && only
}

// release returns the slot of a request answered without a worker.
func (c *conn) release() { <-c.slots }

// begin counts a request handed to a worker or a goroutine of its own;
// respond (answered) and then done end it, or overloaded alone.
func (c *conn) begin() {
	c.inflight.Add(1)
	c.jobs.Add(1)
}

// done ends a request answered by respond: its slot is free.
func (c *conn) done() {
	<-c.slots
	c.inflight.Done()
}

// overloaded answers a request handed to the workers Overloaded, after
// queued in the server (not executed: the client retries), and ends it.
// It owns f.
func (c *conn) overloaded(f wire.Frame, queued time.Duration) {
	h := &f.Header
	c.s.metrics.observe(h.Op, wire.StatusOverloaded, queued, 0)
	_ = c.rw.WriteError(h, wire.ErrOverloaded, queued, 0)
	f.Release()
	c.jobs.Add(-1) // answered without respond
	c.done()
}

// serve reads requests until the stream ends, is corrupt, or the server
// stops, then waits for the workers to answer what it handed them, flushes
// the replies and closes the connection.
func (c *conn) serve() {
	s := c.s
	reason := c.handshake()
	if reason == "" {
		reason = c.readLoop()
	}
	c.inflight.Wait()
	// Counted before the close, so that a peer that saw the close also
	// sees it counted.
	s.metrics.conns.Dec()
	s.metrics.closed.WithLabelValues(reason).Inc()
	// Bound the final flush: a client that stopped reading must not hold
	// up a shutdown.
	_ = c.nc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	_ = c.rw.Close()
	_ = c.nc.Close()
	s.mu.Lock()
	delete(s.mu.conns, c)
	if s.mu.perHost[c.host]--; s.mu.perHost[c.host] <= 0 {
		delete(s.mu.perHost, c.host)
	}
	s.mu.Unlock()
	s.rpc.conns.Done()
}

// Reasons a connection closed (label of cell_server_connections_closed_total).
const (
	closeEOF        = "eof"
	closeCorrupt    = "corrupt"
	closeBadVersion = "bad_version"
	closeShutdown   = "shutdown"
	closeError      = "error"
	closeIdle       = "idle_timeout"
	closeSlow       = "frame_timeout"
	closeHandshake  = "tls_handshake"
)

// handshake does the TLS handshake of a connection to a TLS port, within
// FrameTimeout, and learns the peer's role; it reports whether the
// connection may be served (""), else why it closes. A failed handshake
// is counted and closes this connection only. A peer that speaks plain TCP (its first bytes are not
// a TLS record) gets a refusal frame, StatusPermissionDenied, so that its
// calls fail as not sent rather than lost.
func (c *conn) handshake() string {
	if c.raw == nil {
		return ""
	}
	s := c.s
	tc := c.nc.(*tls.Conn)
	if s.opts.FrameTimeout > 0 {
		dl := time.Now().Add(s.opts.FrameTimeout)
		_ = c.SetReadDeadline(dl)
		_ = c.raw.SetWriteDeadline(dl)
	}
	err := tc.Handshake()
	_ = c.raw.SetWriteDeadline(time.Time{})
	if err != nil {
		if c.stopped() {
			return closeShutdown
		}
		s.metrics.refusals.WithLabelValues(refuseHandshake).Inc()
		s.log.Debug("server: TLS handshake", slog.String("remote", c.raw.RemoteAddr().String()), slog.Any("err", err))
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && rh.Conn != nil {
			refusePlain(c.raw)
		}
		return closeHandshake
	}
	_ = c.SetReadDeadline(time.Time{}) // the reader sets its own
	cs := tc.ConnectionState()
	c.role = tlsconf.PeerRole(&cs)
	return ""
}

// refusePlain answers a plain TCP connection to a TLS port with a refusal
// frame and closes it after reading what the client had sent, so that
// the close does not reset the connection before the client reads it.
func refusePlain(nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(refuseWriteBudget))
	if _, err := nc.Write(wire.RefusalFrameStatus(wire.StatusPermissionDenied, "this port requires TLS")); err != nil {
		return
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, nc)
}

// opRoles is the role an op needs when the server authorizes ops
// (Options.ClientCertAuth): RoleNone for what any client may send.
var opRoles = func() (r [256]tlsconf.Role) {
	for _, op := range []wire.Op{wire.OpSplitBegin, wire.OpSplitAppend, wire.OpSplitEnd, wire.OpInsertChild, wire.OpMeganode} {
		r[op] = tlsconf.RoleServer
	}
	for _, op := range []wire.Op{wire.OpCheck, wire.OpReplicaHash, wire.OpNodeDump, wire.OpMoveReplica, wire.OpTransferLeader} {
		r[op] = tlsconf.RoleAdmin
	}
	return r
}()

// readLoop reads frames and dispatches them; it returns why it stopped.
//
// A malformed request is answered with an error status as long as the
// stream is still at a frame boundary (too large: its body was skipped;
// unknown op: its body was read; a body that does not decode: the worker
// answers BadRequest). A stream that lost its framing (bad magic, bad
// length) is closed without an answer, one of another protocol version
// after a BadVersion answer. The server itself never stops for what a
// client sends.
func (c *conn) readLoop() string {
	s := c.s
	rd, err := wire.NewReader(c.nc, &s.wopts)
	if err != nil {
		return closeError
	}
	rd.SetTimeouts(c, s.opts.IdleTimeout, s.opts.FrameTimeout)
	for {
		c.acquire()
		f, err := rd.ReadFramePooled()
		if err != nil {
			c.release()
			switch {
			case wire.InSync(err):
				s.metrics.malformed.WithLabelValues(malformedKind(err)).Inc()
				_ = c.rw.WriteError(&f.Header, err, 0, 0)
				continue
			case errors.Is(err, os.ErrDeadlineExceeded) && c.stopped():
				return closeShutdown
			case errors.Is(err, wire.ErrIdleTimeout):
				s.metrics.refusals.WithLabelValues(refuseIdle).Inc()
				return closeIdle
			case errors.Is(err, wire.ErrFrameTimeout):
				s.metrics.refusals.WithLabelValues(refuseSlow).Inc()
				s.log.Debug("server: closing a connection stalled inside a frame", slog.String("remote", c.nc.RemoteAddr().String()), slog.Any("err", err))
				return closeSlow
			case errors.Is(err, wire.ErrBadVersion):
				s.metrics.malformed.WithLabelValues("bad_version").Inc()
				_ = c.rw.WriteError(&f.Header, err, 0, 0)
				s.log.Debug("server: closing a connection of another protocol version", slog.String("remote", c.nc.RemoteAddr().String()), slog.Any("err", err))
				return closeBadVersion
			case errors.Is(err, io.EOF):
				return closeEOF
			case errors.Is(err, os.ErrDeadlineExceeded):
				return closeShutdown
			case errors.Is(err, wire.ErrBadMagic), errors.Is(err, wire.ErrBadLength), errors.Is(err, io.ErrUnexpectedEOF):
				s.metrics.malformed.WithLabelValues("corrupt").Inc()
				s.log.Debug("server: closing a corrupt stream", slog.String("remote", c.nc.RemoteAddr().String()), slog.Any("err", err))
				return closeCorrupt
			}
			s.log.Debug("server: connection read", slog.String("remote", c.nc.RemoteAddr().String()), slog.Any("err", err))
			return closeError
		}
		c.dispatch(f, time.Now())
	}
}

func malformedKind(err error) string {
	if errors.Is(err, wire.ErrFrameTooLarge) {
		return "too_large"
	}
	return "unknown_op"
}

// dispatch answers what needs no tree work at once and queues the rest for
// the workers; a full queue is answered Overloaded. It owns the request's
// slot (acquire): released here for what it answers, by done for the rest.
func (c *conn) dispatch(f wire.Frame, arrived time.Time) {
	s := c.s
	h := &f.Header
	if h.IsReply() || h.Status != wire.StatusOK {
		s.metrics.malformed.WithLabelValues("not_a_request").Inc()
		_ = c.rw.WriteError(h, wireErrorf(wire.StatusBadRequest, "a request frame with the reply flag or a status set"), 0, 0)
		f.Release()
		c.release()
		return
	}
	if h.Flags&wire.FlagRetry != 0 && h.Op != wire.OpPut && h.Op != wire.OpDelete && h.Op != wire.OpCondWrite && h.Op != wire.OpTxn {
		s.metrics.malformed.WithLabelValues("not_a_request").Inc()
		_ = c.rw.WriteError(h, wireErrorf(wire.StatusBadRequest, "the retry flag on a %v request: only writes are retried", h.Op), 0, 0)
		f.Release()
		c.release()
		return
	}
	if need := opRoles[h.Op]; need > c.role && s.authz {
		// Before the body is decoded: the role is the connection's.
		s.metrics.refusals.WithLabelValues(refusePermission).Inc()
		s.metrics.observe(h.Op, wire.StatusPermissionDenied, 0, time.Since(arrived))
		_ = c.rw.WriteError(h, wireErrorf(wire.StatusPermissionDenied, "%v needs a certificate of role %v or higher, this connection's is %v", h.Op, need, c.role), 0, 0)
		f.Release()
		c.release()
		return
	}
	switch h.Op {
	case wire.OpPing:
		// An RTT probe: answered by the reader, without a worker, so
		// that it measures the network and not the queue.
		rh := h.Reply(wire.StatusOK)
		rh.SetTiming(0, time.Since(arrived))
		s.metrics.observe(h.Op, wire.StatusOK, 0, time.Since(arrived))
		_ = c.rw.Write(rh, f.Body)
		f.Release()
		c.release()
		return
	case wire.OpCheck:
		// Long, and not tree work of the paper's kind: beside the
		// workers (checkop.go).
		c.begin()
		go c.serveCheck(f, arrived)
		return
	case wire.OpReplicaHash:
		c.begin()
		go c.serveReplicaHash(f, arrived)
		return
	case wire.OpMoveReplica, wire.OpTransferLeader:
		// Operator requests; a transfer waits for the election.
		c.begin()
		go c.serveAdmin(f, arrived)
		return
	case wire.OpMetadata, wire.OpSearch, wire.OpGet, wire.OpContains, wire.OpRange, wire.OpNodeDump, wire.OpPut, wire.OpDelete, wire.OpCondWrite, wire.OpTxn,
		wire.OpSplitBegin, wire.OpSplitAppend, wire.OpSplitEnd, wire.OpInsertChild, wire.OpMeganode:
	default:
		// Extension ops pass the frame layer; this server has none.
		s.metrics.malformed.WithLabelValues("unknown_op").Inc()
		_ = c.rw.WriteError(h, wireErrorf(wire.StatusUnknownOp, "op %v not served", h.Op), 0, 0)
		f.Release()
		c.release()
		return
	}
	c.begin()
	select {
	case s.rpc.queue <- job{c: c, f: f, arrived: arrived}:
	default:
		c.overloaded(f, 0)
	}
}
