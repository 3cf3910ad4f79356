package rdma

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestTCPResponderTimeouts: with IdleTimeout and FrameTimeout, the
// responder closes a connection left idle and one stalled inside a
// request, and the client reads on across its idle connections being
// closed (it redials).
func TestTCPResponderTimeouts(t *testing.T) {
	srv, cl, rk, _ := newTCP(t, TCPOptions{IdleTimeout: 150 * time.Millisecond, FrameTimeout: 50 * time.Millisecond}, TCPClientOptions{ConnsPerEndpoint: 1})
	valid := appendRequest(nil, 1, rk.Key, rk.Region, []Segment{{Off: 0, Dst: make([]byte, 8)}})
	for name, send := range map[string][]byte{"idle": nil, "stalled in a header": valid[:10], "stalled in the segments": valid[:reqHeaderSize+4]} {
		nc, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(send); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := io.ReadAll(nc); err != nil || len(n) != 0 {
			t.Fatalf("%s: %d bytes, %v; want the connection closed", name, len(n), err)
		}
		_ = nc.Close()
	}
	ctx := context.Background()
	for i := range 3 {
		if err := cl.Read(ctx, &rk, 0, make([]byte, 8)); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		time.Sleep(300 * time.Millisecond) // the responder closes the idle connection
	}
}

// TestTCPResponderConnLimits: past MaxConns, or MaxConnsPerHost from one
// address, a new connection is closed at once and counted; the open ones
// read on, and once one closes a new connection is admitted again.
func TestTCPResponderConnLimits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        TCPOptions
		second      string // the address the over-limit connection comes from
		max, onHost int64
	}{
		{"per server", TCPOptions{MaxConns: 2}, "127.0.0.3", 1, 0},
		{"per host", TCPOptions{MaxConns: 10, MaxConnsPerHost: 2}, "127.0.0.2", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _, rk, _ := newTCP(t, tc.opts, TCPClientOptions{ConnsPerEndpoint: 1})
			dial := func(from string) net.Conn {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
				nc, err := d.Dial("tcp", srv.Addr())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = nc.Close() })
				return nc
			}
			// read sends one valid request on nc and waits for its reply.
			read := func(nc net.Conn) error {
				req := appendRequest(nil, 7, rk.Key, rk.Region, []Segment{{Off: 0, Dst: make([]byte, 8)}})
				if _, err := nc.Write(req); err != nil {
					return err
				}
				_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err := io.ReadFull(nc, make([]byte, replyHeaderSize+8))
				return err
			}
			a, b := dial("127.0.0.2"), dial("127.0.0.2")
			for _, nc := range []net.Conn{a, b} {
				if err := read(nc); err != nil {
					t.Fatalf("read under the limit: %v", err)
				}
			}
			over := dial(tc.second)
			_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := io.ReadAll(over); err != nil || len(n) != 0 {
				t.Fatalf("connection over the limit: %d bytes, %v; want it closed", len(n), err)
			}
			if err := read(a); err != nil {
				t.Fatalf("open connection after the refusal: %v", err)
			}
			st := srv.Stats()
			if st.RefusedMaxConns != tc.max || st.RefusedMaxConnsPerHost != tc.onHost {
				t.Fatalf("refused %d over the server's limit and %d over the host's; want %d and %d", st.RefusedMaxConns, st.RefusedMaxConnsPerHost, tc.max, tc.onHost)
			}
			// One closes: the next connection is served.
			_ = b.Close()
			deadline := time.Now().Add(10 * time.Second)
			open := func() int { // the connections the limits count
				srv.mu.Lock()
				defer srv.mu.Unlock()
				return len(srv.mu.conns)
			}
			for open() > 1 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if err := read(dial(tc.second)); err != nil {
				t.Fatalf("read after a connection closed: %v", err)
			}
		})
	}
}
