package raftmux

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/internal/tlsconf"
)

// Group is the raft.StreamLayer of one region on a Mux: give it to
// raft.NewNetworkTransport (or NewNetworkTransportWithConfig). Its Accept
// returns the connections other muxes dialed for the region, its Dial
// connects to the region's Group on another mux, and its Addr is the mux's
// advertised address.
//
// All methods are safe for concurrent use.
type Group struct {
	m      *Mux
	region uint32
	ch     chan net.Conn   // handshaken connections waiting for Accept
	slots  chan struct{}   // one per connection in ch or on its way there
	done   chan struct{}   // closed by Close
	ctx    context.Context // cancelled by Close: stops Dials in progress
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		closed bool
		conns  map[*conn]struct{} // open connections, accepted and dialed
	}
}

var _ raft.StreamLayer = (*Group)(nil)

func newGroup(m *Mux, region uint32) *Group {
	g := &Group{
		m:      m,
		region: region,
		ch:     make(chan net.Conn, m.opts.AcceptBacklog),
		slots:  make(chan struct{}, m.opts.AcceptBacklog),
		done:   make(chan struct{}),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.mu.conns = map[*conn]struct{}{}
	return g
}

// Region returns the group's region ID.
func (g *Group) Region() uint32 { return g.region }

// Addr returns the mux's advertised address (implements net.Listener).
func (g *Group) Addr() net.Addr { return g.m.addr }

// Accept waits for the next connection dialed for the region (implements
// net.Listener). After Close it returns an error wrapping both ErrClosed and
// net.ErrClosed.
func (g *Group) Accept() (net.Conn, error) {
	select {
	case <-g.done:
		return nil, g.closedErr()
	default:
	}
	select {
	case c := <-g.ch:
		<-g.slots
		return c, nil
	case <-g.done:
		return nil, g.closedErr()
	}
}

func (g *Group) closedErr() error {
	return fmt.Errorf("%w: region %d: %w", ErrClosed, g.region, net.ErrClosed)
}

// Close unregisters the group from its mux, so that later connections for
// the region are refused (the dialer gets ErrUnknownRegion) and Group may
// be called again for it; makes Accept return an error; stops Dials in
// progress; and closes every connection of the group, accepted or dialed,
// so that nothing of this raft group stays on the wire (raft's
// NetworkTransport.Close calls it). Later calls return nil.
func (g *Group) Close() error {
	g.m.unregister(g)
	g.mu.Lock()
	if g.mu.closed {
		g.mu.Unlock()
		return nil
	}
	g.mu.closed = true
	conns := make([]*conn, 0, len(g.mu.conns))
	for c := range g.mu.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()

	g.cancel()
	close(g.done)
	for _, c := range conns { // including those still in g.ch
		_ = c.Close()
	}
	return nil
}

// reserve takes a backlog slot for a connection about to be delivered;
// false when the backlog is full.
func (g *Group) reserve() bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (g *Group) unreserve() { <-g.slots }

// deliver queues c, which holds a reserved slot, for Accept. If the group
// is closed it frees the slot and returns false (the caller closes c).
func (g *Group) deliver(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		g.unreserve()
		return false
	}
	g.m.stats.add(g.m.stats.mu.accepted, g.region) // counted before Accept can return c
	g.ch <- g.trackLocked(c)                       // never blocks: len(g.ch) <= len(g.slots)
	return true
}

// track registers c as a connection of the group, or closes it and returns
// ErrClosed if the group is closed.
func (g *Group) track(c net.Conn) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		_ = c.Close()
		return nil, ErrClosed
	}
	return g.trackLocked(c), nil
}

// REQUIRES: g.mu held, group not closed.
func (g *Group) trackLocked(c net.Conn) *conn {
	tc := &conn{Conn: c, g: g}
	g.mu.conns[tc] = struct{}{}
	g.m.stats.open.Add(1)
	return tc
}

func (g *Group) forget(c *conn) {
	g.mu.Lock()
	delete(g.mu.conns, c)
	g.mu.Unlock()
	g.m.stats.open.Add(-1)
}

// Dial connects to the region's Group on the mux at address and completes
// the handshake within timeout (HandshakeTimeout if timeout <= 0 or more),
// implementing raft.StreamLayer. Errors wrap ErrUnknownRegion, ErrVersion,
// ErrBusy or ErrHandshake when the peer's mux refused or failed the
// handshake, ErrClosed when the group closed, an injected fault's error
// (ErrPartitioned, ErrDropped), or the network's error.
func (g *Group) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := g.dial(string(address), timeout)
	if err != nil {
		g.m.stats.add(g.m.stats.mu.dialFailed, g.region)
		return nil, fmt.Errorf("raftmux: region %d: dial %s: %w", g.region, address, err)
	}
	g.m.stats.add(g.m.stats.mu.dialed, g.region)
	return c, nil
}

func (g *Group) dial(to string, timeout time.Duration) (net.Conn, error) {
	// At most HandshakeTimeout, whatever raft asks (its transport passes
	// its whole RPC timeout): a dial to a host that stopped answering
	// (killed, no reset) would otherwise hold raft's caller that long, a
	// leadership transfer among them, during which the leader refuses
	// every write.
	if timeout <= 0 || timeout > g.m.opts.HandshakeTimeout {
		timeout = g.m.opts.HandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	defer cancel()
	from := g.m.addr.String()
	f := g.m.opts.Faults
	if f != nil {
		if err := f.Dial(ctx, from, to, g.region); err != nil {
			return nil, g.orClosed(err)
		}
	}
	raw, err := g.m.opts.Network.DialContext(ctx, to)
	if err != nil {
		return nil, g.orClosed(err)
	}
	c := raw
	if g.m.opts.ClientTLS != nil {
		tc, err := g.tlsHandshake(ctx, raw, to)
		if err != nil {
			_ = raw.Close()
			return nil, g.orClosed(err)
		}
		c = tc
	}
	if err := g.handshake(ctx, c); err != nil {
		_ = c.Close()
		return nil, g.orClosed(err)
	}
	if f != nil {
		c = f.Conn(raw, from, to, g.region)
	}
	return g.track(c)
}

// orClosed returns ErrClosed (with err) if the group closed, else err.
func (g *Group) orClosed(err error) error {
	if g.ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// tlsHandshake runs the client side of the TLS handshake on raw within ctx
// and checks that the acceptor's certificate is a server's.
func (g *Group) tlsHandshake(ctx context.Context, raw net.Conn, to string) (*tls.Conn, error) {
	tc := tls.Client(raw, tlsconf.ForAddr(g.m.opts.ClientTLS, to))
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("%w: TLS: %w", ErrHandshake, err)
	}
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return nil, fmt.Errorf("%w: the acceptor sent no certificate", ErrNotServer)
	}
	if role := tlsconf.RoleOf(cs.PeerCertificates[0]); role != tlsconf.RoleServer {
		return nil, fmt.Errorf("%w: the acceptor's certificate %q has role %s", ErrNotServer, cs.PeerCertificates[0].Subject.CommonName, role)
	}
	return tc, nil
}

// handshake writes the header on c and reads the reply, within ctx.
func (g *Group) handshake(ctx context.Context, c net.Conn) error {
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	// Close (ctx cancelled) interrupts the exchange at once.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	err := exchange(c, g.region)
	if !stop() && err == nil {
		err = fmt.Errorf("%w: %w", ErrHandshake, context.Cause(ctx))
	}
	if err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

// exchange is the dialer's side of the handshake (format.go).
func exchange(c net.Conn, region uint32) error {
	if _, err := c.Write(appendHeader(nil, header{version: protoVersion, region: region})); err != nil {
		return fmt.Errorf("%w: write header: %w", ErrHandshake, err)
	}
	var buf [replySize]byte
	if _, err := io.ReadFull(c, buf[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: peer closed the connection (not a raftmux, overloaded, or it rejected the header): %w", ErrHandshake, err)
		}
		return fmt.Errorf("%w: read reply: %w", ErrHandshake, err)
	}
	ver, st, ok := decodeReply(buf[:])
	if !ok {
		return fmt.Errorf("%w: not a raftmux reply: % x", ErrHandshake, buf)
	}
	switch st {
	case statusOK:
		return nil
	case statusBadVersion:
		return fmt.Errorf("%w: peer speaks version %d, this mux %d", ErrVersion, ver, protoVersion)
	case statusUnknownRegion:
		return ErrUnknownRegion
	case statusBusy:
		return ErrBusy
	case statusNotServer:
		return fmt.Errorf("%w: the acceptor refused this mux's certificate", ErrNotServer)
	default:
		return fmt.Errorf("%w: peer refused the header: %s", ErrHandshake, st)
	}
}

// conn is a connection of a Group, accepted or dialed: closing it removes
// it from the group.
type conn struct {
	net.Conn
	g    *Group
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.g.forget(c) })
	return err
}
