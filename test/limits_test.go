package test

import (
	"net"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/wire"
	"github.com/cellstore/cell/wire/wiretest"
)

// TestLimitFlags: cellserver's limit flags reach the server. With
// --max-connections-per-host 2 a third connection from one address gets
// a refusal frame and is closed; --max-request-bytes 64KiB answers a
// larger request FrameTooLarge on a connection that goes on;
// --idle-timeout 1s closes an idle connection; the refusals are counted,
// and a client reads throughout.
func TestLimitFlags(t *testing.T) {
	srv := startServer(t, serverOptions{cores: 1, flags: []string{
		"--max-connections-per-host", "2", "--max-request-bytes", "64KiB", "--idle-timeout", "1s",
	}})
	c := srv.newClient(t, func(c *client.Config) { c.Provider = client.ProviderTCP })
	mustPut(t, c, "keep", "me")

	from := func(ip string) *wiretest.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		nc, err := d.Dial("tcp", srv.rpc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		return wiretest.Wrap(t, nc)
	}
	a, b := from("127.0.0.7"), from("127.0.0.7")
	a.Ping(1)
	b.Ping(2)
	refused := from("127.0.0.7")
	if h, _ := refused.Reply(); h.ID != 0 || h.Status != wire.StatusOverloaded {
		t.Fatalf("third connection from one address: %v, want a refusal", h)
	}
	refused.ExpectClosed()

	a.SendFrame(wire.OpPut, 3, make([]byte, 64<<10+1))
	a.Expect(3, wire.StatusFrameTooLarge)
	a.Ping(4)

	// b stays idle: closed after a second.
	b.ExpectClosed()
	mustGet(t, c, "keep", "me")

	m := scrape(t, srv)
	if v := m.value("cell_server_refusals_total", "reason", "max_connections_per_host"); v != 1 {
		t.Errorf("per-host refusals: %v, want 1", v)
	}
	if v := m.value("cell_server_refusals_total", "reason", "idle_timeout"); v < 1 {
		t.Errorf("idle timeouts: %v, want at least 1", v)
	}
}
