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
