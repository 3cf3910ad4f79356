package raftmux

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
)

// Mux is one server's raft listener: it accepts the connections of every
// raft group the server hosts and hands each to its region's Group.
//
// Locking notes: Mux.mu < Group.mu is never needed: no code holds both.
type Mux struct {
	ln    net.Listener
	addr  addr
	opts  Options
	log   *slog.Logger
	stats *counters
	slots chan struct{} // one per handshake in progress, cap MaxPendingHandshakes
	done  chan struct{} // closed by Close
	wg    sync.WaitGroup

	mu struct {
		sync.Mutex
		closed  bool
		groups  map[uint32]*Group
		pending map[net.Conn]struct{} // accepted, handshake not finished
	}
}

// Listen opens the TCP listener on address ("host:port"; port 0 picks a
// free one) and starts accepting. Close the Mux to stop.
func Listen(address string, opts Options) (*Mux, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ln, err := opts.Network.Listen(address)
	if err != nil {
		return nil, fmt.Errorf("raftmux: listen on %q: %w", address, err)
	}
	adv := opts.AdvertiseAddr
	if adv == "" {
		adv = ln.Addr().String()
		if err := advertisable(adv); err != nil {
			_ = ln.Close()
			return nil, err
		}
	}
	m := &Mux{
		ln:    ln,
		addr:  addr(adv),
		opts:  opts,
		log:   opts.Logger.With("raftmux", adv),
		stats: newCounters(),
		slots: make(chan struct{}, opts.MaxPendingHandshakes),
		done:  make(chan struct{}),
	}
	m.mu.groups = map[uint32]*Group{}
	m.mu.pending = map[net.Conn]struct{}{}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Addr returns the advertised address of the mux (Options.AdvertiseAddr, or
// the listener's): the raft ServerAddress of each of its groups.
func (m *Mux) Addr() net.Addr { return m.addr }

// Group opens the StreamLayer of region on the mux: connections whose
// header names region go to its Accept, and its Dial opens connections to
// region on other muxes. It fails with ErrRegionTaken while region has an
// open Group, and with ErrClosed after Close.
func (m *Mux) Group(region uint32) (*Group, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, ErrClosed
	}
	if _, ok := m.mu.groups[region]; ok {
		return nil, fmt.Errorf("%w: region %d", ErrRegionTaken, region)
	}
	g := newGroup(m, region)
	m.mu.groups[region] = g
	return g, nil
}

// Regions returns the regions with an open Group, in increasing order.
func (m *Mux) Regions() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []uint32
	for r := range m.mu.groups {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}

// Stats returns the mux's counters.
func (m *Mux) Stats() Stats {
	s := m.stats.stats()
	s.Pending = len(m.slots)
	return s
}

// Close stops the listener, closes every Group (and so every connection of
// the mux) and connections still in their handshake, and returns when the
// mux's goroutines have exited. Dials in progress fail with ErrClosed.
// Later calls return nil.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return nil
	}
	m.mu.closed = true
	var groups []*Group
	for _, g := range m.mu.groups {
		groups = append(groups, g)
	}
	var pending []net.Conn
	for c := range m.mu.pending {
		pending = append(pending, c)
	}
	m.mu.Unlock()

	close(m.done)
	err := m.ln.Close()
	for _, c := range pending {
		_ = c.Close()
	}
	for _, g := range groups {
		_ = g.Close()
	}
	m.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (m *Mux) isClosed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// group returns the open Group of region, or nil.
func (m *Mux) group(region uint32) *Group {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.groups[region]
}

// unregister removes g from the groups if it is still there.
func (m *Mux) unregister(g *Group) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.groups[g.region] == g {
		delete(m.mu.groups, g.region)
	}
}

// acceptLoop accepts connections until Close and starts a handshake
// goroutine for each, never waiting on a peer itself.
func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.log.Warn("raftmux: accept failed", "err", err, "retry-in", backoff)
			select {
			case <-m.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		select {
		case m.slots <- struct{}{}:
		default:
			m.stats.rejected[RejectOverload].Add(1)
			m.log.Debug("raftmux: too many pending handshakes, connection closed", "remote", c.RemoteAddr())
			_ = c.Close()
			continue
		}
		m.mu.Lock()
		if m.mu.closed {
			m.mu.Unlock()
			_ = c.Close()
			<-m.slots
			return
		}
		m.mu.pending[c] = struct{}{}
		m.mu.Unlock()
		m.wg.Add(1)
		go m.handshake(c)
	}
}

// handshake runs the TLS handshake on raw if the mux speaks TLS and checks
// the peer's role, then reads the header, all within HandshakeTimeout,
// replies, and hands the connection to its region's Group, or closes it and
// counts why.
func (m *Mux) handshake(raw net.Conn) {
	defer m.wg.Done()
	handed := false
	c := raw // the *tls.Conn over raw with TLS
	defer func() {
		if !handed {
			_ = c.Close()
		}
		m.mu.Lock()
		delete(m.mu.pending, raw)
		m.mu.Unlock()
		<-m.slots // last: Stats.Pending counts slots
	}()

	_ = raw.SetDeadline(time.Now().Add(m.opts.HandshakeTimeout))
	if m.opts.ServerTLS != nil {
		tc := tls.Server(raw, m.opts.ServerTLS)
		if err := tc.Handshake(); err != nil {
			switch {
			case m.isClosed():
				m.reject(raw, RejectClosed, err)
			case errors.Is(err, os.ErrDeadlineExceeded):
				m.reject(raw, RejectTimeout, err)
			default:
				m.reject(raw, RejectTLS, err)
			}
			return
		}
		c = tc
		cs := tc.ConnectionState()
		if role := tlsconf.PeerRole(&cs); role != tlsconf.RoleServer {
			m.log.Debug("raftmux: peer certificate is not a server's", "remote", raw.RemoteAddr(), "role", role)
			m.refuse(c, statusNotServer, RejectNotServer)
			return
		}
	}
	var buf [headerSize]byte
	if _, err := io.ReadFull(c, buf[:]); err != nil {
		switch {
		case m.isClosed():
			m.reject(c, RejectClosed, err)
		case errors.Is(err, os.ErrDeadlineExceeded):
			m.reject(c, RejectTimeout, err)
		default:
			m.reject(c, RejectIO, err)
		}
		return
	}
	h, st := decodeHeader(buf[:])
	switch {
	case st == statusBadMagic:
		m.reject(c, RejectBadMagic, nil)
		return
	case st != statusOK:
		m.refuse(c, st, RejectBadHeader)
		return
	case h.version != protoVersion:
		m.log.Warn("raftmux: peer speaks another handshake version", "remote", c.RemoteAddr(), "version", h.version, "want", protoVersion)
		m.refuse(c, statusBadVersion, RejectBadVersion)
		return
	}
	g := m.group(h.region)
	if g == nil {
		m.refuse(c, statusUnknownRegion, RejectUnknownRegion)
		return
	}
	if !g.reserve() {
		m.refuse(c, statusBusy, RejectBusy)
		return
	}
	if _, err := c.Write(appendReply(nil, statusOK)); err != nil {
		g.unreserve()
		m.reject(c, RejectIO, err)
		return
	}
	_ = raw.SetDeadline(time.Time{})
	if !g.deliver(c) {
		m.reject(c, RejectClosed, nil)
		return
	}
	handed = true
}

// refuse counts the rejection and replies st to c (best effort; counted
// first, so that a dialer that has the reply sees the count).
func (m *Mux) refuse(c net.Conn, st status, why Reject) {
	m.reject(c, why, nil)
	_, _ = c.Write(appendReply(nil, st))
}

func (m *Mux) reject(c net.Conn, why Reject, err error) {
	m.stats.rejected[why].Add(1)
	m.log.Debug("raftmux: connection rejected", "remote", c.RemoteAddr(), "reason", why, "err", err)
}
