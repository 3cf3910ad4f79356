package server

import (
	"net"
	"time"

	"github.com/cellstore/cell/wire"
)

// Resource limits on what clients may hold (docs/limits.md): connections
// per server and per client address (here), requests in flight per
// connection (conn.acquire), idle and frame timeouts (wire.Reader's, set
// in conn.readLoop), rows and bytes per range reply (scan.go), the frame
// size (wire). Each limit a client meets is counted in
// cell_server_refusals_total by reason.

// Reasons of cell_server_refusals_total.
const (
	refuseMaxConns   = "max_connections"
	refuseMaxPerHost = "max_connections_per_host"
	refuseIdle       = "idle_timeout"
	refuseSlow       = "frame_timeout"
	refuseInflight   = "max_inflight"
	refuseRangeRows  = "max_range_rows"
	refuseRangeBytes = "max_range_bytes"
	// refuseHandshake: a TLS handshake failed (a plain TCP client, an
	// untrusted or expired certificate, no certificate where one is
	// required, a handshake not done within FrameTimeout).
	refuseHandshake = "tls_handshake"
	// refusePermission: an op the peer's certificate does not allow.
	refusePermission = "permission_denied"
)

// refuseWriteBudget bounds the write of a refusal frame.
const refuseWriteBudget = 100 * time.Millisecond

// refusalReasons are the label values, created at start so that they
// export zero.
var refusalReasons = []string{refuseMaxConns, refuseMaxPerHost, refuseIdle, refuseSlow, refuseInflight, refuseRangeRows, refuseRangeBytes, refuseHandshake, refusePermission}

// overLimit returns why a new connection from host is refused, or "".
// REQUIRES: s.mu held.
func (rs *rpcServer) overLimit(host string) string {
	s := rs.s
	switch {
	case len(s.mu.conns) >= s.opts.MaxConnections:
		return refuseMaxConns
	case s.mu.perHost[host] >= s.opts.MaxConnectionsPerHost:
		return refuseMaxPerHost
	}
	return ""
}

// refuse closes a connection over a limit at once, after one frame that
// says why: an Overloaded reply with request id 0, which no request
// carries, so the client knows that the server read nothing from the
// connection (wire.ErrRefused).
//
// On a TLS port the connection is closed without a frame: the client is
// in its handshake, which fails (a dial error, nothing sent), and the
// handshake is not done in the accept loop.
func (rs *rpcServer) refuse(nc net.Conn, reason string) {
	s := rs.s
	s.metrics.refusals.WithLabelValues(reason).Inc()
	if s.opts.TLS != nil {
		_ = nc.Close()
		return
	}
	_ = nc.SetWriteDeadline(time.Now().Add(refuseWriteBudget))
	_, _ = nc.Write(wire.RefusalFrame("connection limit: " + reason))
	_ = nc.Close()
}
