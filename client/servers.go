package client

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/wire"
)

// server is one Cell server the client talks to: a few pipelined RPC
// connections (ConnsPerServer) and the server's estimator in the locality
// selector (its "server connection" in the paper's terms). Servers are
// kept for the client's lifetime, by RPC address, across topology
// refreshes, so their estimates and connections survive them.
type server struct {
	c    *Client
	id   locality.ServerID
	addr string
	est  *locality.Estimator
	next atomic.Uint32
	// slots hold the connections; a slot whose connection failed is
	// redialled by the next call that picks it.
	slots []connSlot
	// probing is set while closeIfSilent pings the server.
	probing atomic.Bool
	// suspectAt is when (unix nanoseconds) a connection to the server
	// broke or a dial failed; 0 if never.
	suspectAt atomic.Int64
	// failed is the last failed dial, shared by the slots: calls within
	// dialFailMemory of it fail at once instead of dialling again.
	failed struct {
		sync.Mutex
		at  time.Time
		err error
	}
}

// A server whose connection broke or whose dial failed is suspect for
// suspectFor: a dial to it gives up after suspectDialTimeout instead of
// Config.DialTimeout. A dead host's address often does not refuse a
// connection: the dial waits for ARP or SYN retries (3 s for an address on
// the local network), while the region table already names the host that
// took its regions over; a live server accepts in well under
// suspectDialTimeout.
const (
	suspectFor         = 10 * time.Second
	suspectDialTimeout = 500 * time.Millisecond
	// dialFailMemory is how long a failed dial answers for the server's
	// slots (at least Config.RetryBackoff): callers that queued behind a
	// dial that failed fail with it rather than each wait for a dial of
	// their own.
	dialFailMemory = 100 * time.Millisecond
)

type connSlot struct {
	conn    atomic.Pointer[wire.Conn]
	dialing atomic.Bool // a background redial is under way
	mu      sync.Mutex  // serialises dials of this slot
}

// markSuspect notes that a connection to the server broke or a dial
// failed.
func (s *server) markSuspect() { s.suspectAt.Store(time.Now().UnixNano()) }

// dialTimeout is how long a dial of the server may take.
func (s *server) dialTimeout() time.Duration {
	d := s.c.cfg.DialTimeout
	if at := s.suspectAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < suspectFor {
		d = min(d, suspectDialTimeout)
	}
	return d
}

// recentDialFailure returns the error of a dial that failed within
// dialFailMemory (or RetryBackoff, if longer), nil if none did.
func (s *server) recentDialFailure() error {
	s.failed.Lock()
	defer s.failed.Unlock()
	if !s.failed.at.IsZero() && time.Since(s.failed.at) < max(dialFailMemory, s.c.cfg.RetryBackoff) {
		return s.failed.err
	}
	return nil
}

// noteDial records the outcome of a dial (err nil: it succeeded).
func (s *server) noteDial(err error) {
	s.failed.Lock()
	defer s.failed.Unlock()
	if err == nil {
		s.failed.at, s.failed.err = time.Time{}, nil
		return
	}
	s.failed.at, s.failed.err = time.Now(), err
	s.markSuspect()
}

func newServer(c *Client, id locality.ServerID, addr string) *server {
	return &server{
		c: c, id: id, addr: addr,
		est:   c.sel.Estimator(id),
		slots: make([]connSlot, c.cfg.ConnsPerServer),
	}
}

// conn returns a live connection to the server, round-robin over its
// slots, dialling when the picked slot has none. A dial failure wraps
// errDial (nothing was sent).
func (s *server) conn(ctx context.Context) (*wire.Conn, error) {
	i := int(s.next.Add(1) % uint32(len(s.slots)))
	cn := s.slots[i].conn.Load()
	if cn != nil && alive(cn) {
		return cn, nil
	}
	if cn != nil {
		s.markSuspect() // it broke
	}
	// Another slot may have a live connection: use it rather than wait.
	for j := range s.slots {
		if cn := s.slots[j].conn.Load(); cn != nil && alive(cn) {
			if s.slots[i].dialing.CompareAndSwap(false, true) {
				go s.redial(i)
			}
			return cn, nil
		}
	}
	return s.dial(ctx, i)
}

func alive(cn *wire.Conn) bool {
	select {
	case <-cn.Done():
		return false
	default:
		return true
	}
}

// redial refills slot i in the background, ignoring failures.
func (s *server) redial(i int) {
	defer s.slots[i].dialing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.dialTimeout())
	defer cancel()
	_, _ = s.dial(ctx, i)
}

func (s *server) dial(ctx context.Context, i int) (*wire.Conn, error) {
	sl := &s.slots[i]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if cn := sl.conn.Load(); cn != nil && alive(cn) {
		return cn, nil
	}
	if s.c.isClosed() {
		return nil, ErrClosed
	}
	if err := s.recentDialFailure(); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, s.dialTimeout())
	defer cancel()
	cn, err := s.c.dialWire(dctx, s.addr, s.c.cfg.Wire)
	if err != nil {
		if ctx.Err() != nil {
			// The caller's context ended the dial; the server may be
			// fine, so the failure is not remembered for others.
			return nil, fmt.Errorf("%w %s: %w", errDial, s.addr, ctx.Err())
		}
		err = fmt.Errorf("%w %s: %w", errDial, s.addr, err)
		s.noteDial(err)
		return nil, err
	}
	s.noteDial(nil)
	if old := sl.conn.Swap(cn); old != nil {
		_ = old.Close()
	}
	if s.c.isClosed() {
		// Close ran while we dialled: do not leak the connection.
		_ = cn.Close()
		return nil, ErrClosed
	}
	s.c.log.Debug("cell client: connected", slog.String("server", s.addr), slog.Int("slot", i))
	return cn, nil
}

// call sends one request and waits for its reply. The caller releases the
// frame.
func (s *server) call(ctx context.Context, op wire.Op, body []byte) (wire.Frame, error) {
	return s.callFlags(ctx, op, 0, body)
}

// callFlags is call with the request's header flags (wire.FlagRetry).
func (s *server) callFlags(ctx context.Context, op wire.Op, flags wire.Flags, body []byte) (wire.Frame, error) {
	cn, err := s.conn(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	slots := s.c.cfg.CPUSlots
	slots.callStart()
	defer slots.callEnd()
	return cn.CallFlags(ctx, op, flags, body)
}

// hasConns reports whether the server has a connection open.
func (s *server) hasConns() bool {
	for i := range s.slots {
		if s.slots[i].conn.Load() != nil {
			return true
		}
	}
	return false
}

// close closes the server's connections.
func (s *server) close() {
	for i := range s.slots {
		sl := &s.slots[i]
		sl.mu.Lock()
		if cn := sl.conn.Swap(nil); cn != nil {
			_ = cn.Close()
		}
		sl.mu.Unlock()
	}
}
