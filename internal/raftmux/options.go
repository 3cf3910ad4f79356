package raftmux

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// Options configure Listen. The zero value of every field means its default.
type Options struct {
	// Logger receives the package's log lines (rejected handshakes at
	// Debug, a peer of another version at Warn). Default slog.Default().
	Logger *slog.Logger

	// AdvertiseAddr is the "host:port" peers dial to reach this mux: the
	// raft ServerAddress of every group on it (Group.Addr, and so
	// NetworkTransport.LocalAddr). Default the listener's address, which
	// must then not have an unspecified IP: listening on ":7000" or
	// "0.0.0.0:7000" needs an AdvertiseAddr (ErrNotAdvertisable).
	AdvertiseAddr string

	// HandshakeTimeout bounds the acceptor's wait for a connection's
	// header, and every Dial (connection and handshake), whatever timeout
	// raft passes. A slow or silent peer holds one pending-handshake slot,
	// or a dialer, at most this long. Default 5 s.
	HandshakeTimeout time.Duration

	// MaxPendingHandshakes bounds the connections whose header has not
	// been read yet; a connection accepted beyond it is closed at once
	// (RejectOverload). Default 1024.
	MaxPendingHandshakes int

	// AcceptBacklog is, per group, how many handshaken connections may
	// wait for the group's Accept; beyond it the dialer gets ErrBusy
	// (RejectBusy). Raft's transport accepts in a loop, so the backlog
	// only fills when it stalls. Default 64.
	AcceptBacklog int

	// ServerTLS and ClientTLS, when set (both or neither), make the mux
	// speak TLS: ServerTLS for the connections it accepts, ClientTLS for
	// those its groups dial. The TLS handshake comes before the raftmux
	// handshake, in the connection's own goroutine, within
	// HandshakeTimeout (a Dial's timeout for a dial). Both ends require
	// the other's certificate to have tlsconf.RoleServer (OU
	// cell-server): ServerTLS must verify client certificates (ClientCAs
	// with tls.RequireAndVerifyClientCert, or tlsconf.Source.ServerConfig
	// with ClientCertAuth), and an accepted connection whose verified
	// certificate is of another role, or that sent none, is refused
	// (RejectNotServer; the dialer gets ErrNotServer); a dialer refuses an
	// acceptor whose certificate is not a server's the same way. A failed
	// TLS handshake is RejectTLS. ClientTLS's ServerName, if empty, is the
	// dialled address's host (tlsconf.ForAddr). Default nil: plain TCP.
	ServerTLS, ClientTLS *tls.Config

	// Network carries the mux's listener and dials. Default TCP; tests of
	// replicas and groups give a MemNetwork shared by their muxes.
	Network Network

	// Faults, when set, injects faults into the traffic this mux dials
	// (tests only; see Faults and FaultNet). Default nil: none.
	Faults Faults
}

// Default values of Options.
const (
	DefaultHandshakeTimeout     = 5 * time.Second
	DefaultMaxPendingHandshakes = 1024
	DefaultAcceptBacklog        = 64
)

// EnsureDefaults fills in the default of every zero field and returns o.
// AdvertiseAddr is left to Listen, which knows the listener's address.
func (o *Options) EnsureDefaults() *Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Network == nil {
		o.Network = tcpNetwork{}
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxPendingHandshakes == 0 {
		o.MaxPendingHandshakes = DefaultMaxPendingHandshakes
	}
	if o.AcceptBacklog == 0 {
		o.AcceptBacklog = DefaultAcceptBacklog
	}
	return o
}

// Validate reports what is wrong with o (after EnsureDefaults).
func (o *Options) Validate() error {
	var errs []error
	if o.HandshakeTimeout < 0 {
		errs = append(errs, fmt.Errorf("raftmux: Options.HandshakeTimeout %v is negative", o.HandshakeTimeout))
	}
	if o.MaxPendingHandshakes < 1 {
		errs = append(errs, fmt.Errorf("raftmux: Options.MaxPendingHandshakes %d must be at least 1", o.MaxPendingHandshakes))
	}
	if o.AcceptBacklog < 1 {
		errs = append(errs, fmt.Errorf("raftmux: Options.AcceptBacklog %d must be at least 1", o.AcceptBacklog))
	}
	if (o.ServerTLS == nil) != (o.ClientTLS == nil) {
		errs = append(errs, errors.New("raftmux: Options.ServerTLS and Options.ClientTLS go together: set both or neither"))
	}
	if o.AdvertiseAddr != "" {
		if err := advertisable(o.AdvertiseAddr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// advertisable checks that peers can dial addr, "host:port" with a
// non-zero port and a host that is a name or a specified IP. It resolves
// nothing.
func advertisable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("raftmux: advertise address %q: %w", addr, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%w: %q has no port (set Options.AdvertiseAddr)", ErrNotAdvertisable, addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%w: %q (set Options.AdvertiseAddr)", ErrNotAdvertisable, addr)
	}
	return nil
}

// addr is an advertised address as a net.Addr.
type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }
