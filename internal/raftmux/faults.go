package raftmux

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Faults injects faults into the raft traffic of a Mux (tests only). A Mux
// consults it for the connections it dials, never for those it accepts:
// every byte of a connection, in both directions, passes through its
// dialer's Conn, so a Faults shared by all the muxes of a test sees all
// their traffic.
//
// Nodes are named by their advertised address (Mux.Addr().String(), the
// raft ServerAddress): from is the dialing mux, to the address dialed.
//
// Implementations must be safe for concurrent use.
type Faults interface {
	// Dial runs before the mux dials to for region on behalf of from. It
	// may block (a delay) until ctx, which carries the dial's timeout, is
	// done; a non-nil error fails the Dial (wrapped) before any packet is
	// sent.
	Dial(ctx context.Context, from, to string, region uint32) error

	// Conn is given every connection the mux dialed, once its handshake
	// succeeded, and returns the connection raft uses instead: c itself
	// or a wrapper around it. A wrapper owns c (its Close must close c)
	// and may fail, delay or tear any Read or Write.
	Conn(c net.Conn, from, to string, region uint32) net.Conn
}

// Link is one direction of traffic between two muxes, for FaultNet's
// filter: bytes of region's raft group sent by From to To.
type Link struct {
	From, To string
	Region   uint32
}

// FaultNet is the Faults of a simulated network, shared by every Mux of a
// test (like memberlist's MockNetwork with partitions, and raft's fuzzy
// TransportHooks). All its methods are safe for concurrent use and take
// effect at once: changing a partition or the filter closes every existing
// connection it now cuts, and every Read and Write checks the current
// rules, so an isolated node's established connections stop delivering,
// not just its new dials.
//
// Delays and drops apply to each Read and Write call of a dialed
// connection (raft's transport buffers, so roughly to each message).
type FaultNet struct {
	mu struct {
		sync.Mutex
		parts    []map[string]bool // each a side cut off from the rest
		filter   func(Link) error
		delay    time.Duration
		dropRate float64
		rng      *rand.Rand
		conns    map[*faultConn]struct{}
	}
}

var _ Faults = (*FaultNet)(nil)

// NewFaultNet returns a FaultNet that lets everything through. seed seeds
// the drop decisions (log it, so a failure can be replayed).
func NewFaultNet(seed uint64) *FaultNet {
	f := &FaultNet{}
	f.mu.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f.mu.conns = map[*faultConn]struct{}{}
	return f
}

// Partition cuts every link between a node in side and a node not in it,
// both ways, until Heal. Partitions accumulate: two calls make up to three
// groups that cannot talk to each other. Established connections across the
// cut are closed.
func (f *FaultNet) Partition(side ...string) {
	set := map[string]bool{}
	for _, s := range side {
		set[s] = true
	}
	f.mu.Lock()
	f.mu.parts = append(f.mu.parts, set)
	cut := f.cutLocked()
	f.mu.Unlock()
	closeAll(cut)
}

// Isolate cuts node off from every other node, both ways, until Heal.
func (f *FaultNet) Isolate(node string) { f.Partition(node) }

// Heal removes every partition. The filter, delay and drop rate stay.
func (f *FaultNet) Heal() {
	f.mu.Lock()
	f.mu.parts = nil
	f.mu.Unlock()
}

// SetFilter installs fn, consulted for every dial and every Read and Write
// (with the direction the bytes travel): a non-nil error refuses the
// traffic, and the connection is closed with it (wrap ErrPartitioned to be
// recognisable). nil removes the filter. Use it for what partitions cannot
// say, such as cutting one region's traffic only. fn must not call the
// FaultNet.
func (f *FaultNet) SetFilter(fn func(Link) error) {
	f.mu.Lock()
	f.mu.filter = fn
	cut := f.cutLocked()
	f.mu.Unlock()
	closeAll(cut)
}

// SetDelay makes every dial, Read and Write wait d first (a Read: after
// its bytes arrived, before they are returned). 0 removes the delay. A
// delay does not honour the connection's deadlines (Close interrupts it);
// keep it well below raft's timeouts.
func (f *FaultNet) SetDelay(d time.Duration) {
	f.mu.Lock()
	f.mu.delay = d
	f.mu.Unlock()
}

// SetDropRate makes each Read and Write fail with probability p (0 to 1):
// a dropped Write first sends a random prefix of its bytes (a torn
// message), then the connection is closed and the call returns ErrDropped;
// a dropped Read discards what it read and does the same.
func (f *FaultNet) SetDropRate(p float64) {
	f.mu.Lock()
	f.mu.dropRate = p
	f.mu.Unlock()
}

// Allowed reports whether bytes of region may travel from → to now
// (partitions and filter; delay and drops aside).
func (f *FaultNet) Allowed(from, to string, region uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkLocked(Link{From: from, To: to, Region: region}) == nil
}

// checkLocked returns why l is refused, or nil.
// REQUIRES: f.mu held.
func (f *FaultNet) checkLocked(l Link) error {
	for _, side := range f.mu.parts {
		if side[l.From] != side[l.To] {
			return fmt.Errorf("%w: %s -> %s", ErrPartitioned, l.From, l.To)
		}
	}
	if f.mu.filter != nil {
		return f.mu.filter(l)
	}
	return nil
}

// cutLocked removes from f.mu.conns, and returns, the connections the
// current rules refuse in either direction.
// REQUIRES: f.mu held.
func (f *FaultNet) cutLocked() []*faultConn {
	var cut []*faultConn
	for c := range f.mu.conns {
		if f.checkLocked(c.out) != nil || f.checkLocked(c.in()) != nil {
			cut = append(cut, c)
			delete(f.mu.conns, c)
		}
	}
	return cut
}

func closeAll(cs []*faultConn) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// Dial implements Faults.
func (f *FaultNet) Dial(ctx context.Context, from, to string, region uint32) error {
	f.mu.Lock()
	d := f.mu.delay
	f.mu.Unlock()
	if err := sleep(ctx.Done(), d); err != nil {
		return fmt.Errorf("raftmux: injected delay: %w", context.Cause(ctx))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkLocked(Link{From: from, To: to, Region: region})
}

// Conn implements Faults.
func (f *FaultNet) Conn(c net.Conn, from, to string, region uint32) net.Conn {
	fc := &faultConn{Conn: c, f: f, out: Link{From: from, To: to, Region: region}, closed: make(chan struct{})}
	f.mu.Lock()
	cut := f.checkLocked(fc.out) != nil || f.checkLocked(fc.in()) != nil
	if !cut {
		f.mu.conns[fc] = struct{}{}
	}
	f.mu.Unlock()
	if cut { // cut while the handshake ran
		_ = fc.Close()
	}
	return fc
}

// decide returns the error a Read or Write on l fails with, or nil, and
// the delay to wait first; for a dropped Write, keep is how many of its n
// bytes to send before failing.
func (f *FaultNet) decide(l Link, n int) (delay time.Duration, keep int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(l); err != nil {
		return 0, 0, err
	}
	if f.mu.dropRate > 0 && f.mu.rng.Float64() < f.mu.dropRate {
		if n > 0 {
			keep = f.mu.rng.IntN(n)
		}
		return f.mu.delay, keep, fmt.Errorf("%w: %s -> %s", ErrDropped, l.From, l.To)
	}
	return f.mu.delay, 0, nil
}

func (f *FaultNet) forget(c *faultConn) {
	f.mu.Lock()
	delete(f.mu.conns, c)
	f.mu.Unlock()
}

// Conns returns the number of live connections the FaultNet wraps.
func (f *FaultNet) Conns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mu.conns)
}

// faultConn is a dialed connection under a FaultNet. Writes travel out
// (dialer to acceptor), Reads in.
type faultConn struct {
	net.Conn
	f      *FaultNet
	out    Link
	once   sync.Once
	closed chan struct{}
}

func (c *faultConn) in() Link { return Link{From: c.out.To, To: c.out.From, Region: c.out.Region} }

func (c *faultConn) Write(p []byte) (int, error) {
	delay, keep, err := c.f.decide(c.out, len(p))
	if err := sleep(c.closed, delay); err != nil {
		return 0, net.ErrClosed
	}
	if err != nil {
		n := 0
		if keep > 0 {
			n, _ = c.Conn.Write(p[:keep])
		}
		_ = c.Close()
		return n, err
	}
	return c.Conn.Write(p)
}

func (c *faultConn) Read(p []byte) (int, error) {
	n, rerr := c.Conn.Read(p)
	if n == 0 {
		return n, rerr
	}
	delay, _, err := c.f.decide(c.in(), n)
	if err := sleep(c.closed, delay); err != nil {
		return 0, net.ErrClosed
	}
	if err != nil {
		_ = c.Close()
		return 0, err
	}
	return n, rerr
}

func (c *faultConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		err = c.Conn.Close()
		close(c.closed)
		c.f.forget(c)
	})
	return err
}

// sleep waits d, or returns net.ErrClosed when done is closed first.
func sleep(done <-chan struct{}, d time.Duration) error {
	if d <= 0 {
		select {
		case <-done:
			return net.ErrClosed
		default:
			return nil
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-done:
		return net.ErrClosed
	}
}
