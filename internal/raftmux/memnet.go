package raftmux

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
)

// Network carries a Mux's connections: its listener and its dials. The
// default is TCP; MemNetwork is an in-process one, so that tests of
// replicas and groups run raft without a socket (no ports to pick, no
// kernel in the way), while process-level tests keep TCP.
type Network interface {
	// Listen listens at address (host:port; port 0 picks one).
	Listen(address string) (net.Listener, error)
	// DialContext connects to address within ctx.
	DialContext(ctx context.Context, address string) (net.Conn, error)
}

// tcpNetwork is the default Network.
type tcpNetwork struct{}

func (tcpNetwork) Listen(address string) (net.Listener, error) { return net.Listen("tcp", address) }

func (tcpNetwork) DialContext(ctx context.Context, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", address)
}

// MemNetwork is an in-process Network: a listener is an address in a map,
// and a dial hands the listener one end of a net.Pipe. Addresses are
// host:port strings like TCP's; listening on port 0 picks the next free
// port of the host. A dial to an address nobody listens on is refused at
// once (ECONNREFUSED), as on loopback. The zero value is ready; share one
// among the muxes of a test.
type MemNetwork struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	next      int
}

var _ Network = (*MemNetwork)(nil)

// Listen implements Network.
func (n *MemNetwork) Listen(address string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("memnet: listen %q: %w", address, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listeners == nil {
		n.listeners = make(map[string]*memListener)
	}
	if port == "0" {
		for {
			n.next++
			address = net.JoinHostPort(host, strconv.Itoa(40000+n.next))
			if n.listeners[address] == nil {
				break
			}
		}
	}
	if n.listeners[address] != nil {
		return nil, fmt.Errorf("memnet: listen %s: %w", address, syscall.EADDRINUSE)
	}
	l := &memListener{n: n, addr: memAddr(address), conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[address] = l
	return l, nil
}

// DialContext implements Network.
func (n *MemNetwork) DialContext(ctx context.Context, address string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[address]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(address), Err: syscall.ECONNREFUSED}
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(address), Err: syscall.ECONNREFUSED}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// memListener is a MemNetwork's listener.
type memListener struct {
	n     *MemNetwork
	addr  memAddr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[string(l.addr)] == l {
			delete(l.n.listeners, string(l.addr))
		}
		l.n.mu.Unlock()
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

// memAddr is a MemNetwork address.
type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }
