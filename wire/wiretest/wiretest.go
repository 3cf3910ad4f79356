// Package wiretest is a raw wire connection for tests that send hand-made
// (and malformed) frames to a server and read its replies, like
// net/http/httptest for the wire protocol. Every method fails the test on
// an unexpected error.
package wiretest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/cellstore/cell/wire"
)

// Timeout bounds every wait for a reply or for the server to close.
const Timeout = 10 * time.Second

// Conn is a TCP connection to a wire server for hand-made frames.
type Conn struct {
	tb testing.TB
	// NC is the underlying connection, for tests that half-close or
	// close it themselves.
	NC net.Conn
	rd *wire.Reader
}

// Dial connects to addr; the connection is closed when the test ends.
func Dial(tb testing.TB, addr string) *Conn {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = nc.Close() })
	rd, err := wire.NewReader(nc, &wire.Options{MaxFrameSize: 64 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	return &Conn{tb: tb, NC: nc, rd: rd}
}

// Wrap is Dial over a connection the caller opened (and closes).
func Wrap(tb testing.TB, nc net.Conn) *Conn {
	tb.Helper()
	rd, err := wire.NewReader(nc, &wire.Options{MaxFrameSize: 64 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	return &Conn{tb: tb, NC: nc, rd: rd}
}

// Send writes raw bytes.
func (c *Conn) Send(b []byte) {
	c.tb.Helper()
	if _, err := c.NC.Write(b); err != nil {
		c.tb.Fatal(err)
	}
}

// SendFrame sends a request frame with op, id and body.
func (c *Conn) SendFrame(op wire.Op, id uint64, body []byte) {
	c.tb.Helper()
	c.Send(wire.AppendFrame(nil, wire.Header{Op: op, ID: id}, body))
}

// Reply reads the next frame: a copy of its header and body.
func (c *Conn) Reply() (wire.Header, []byte) {
	c.tb.Helper()
	_ = c.NC.SetReadDeadline(time.Now().Add(Timeout))
	f, err := c.rd.ReadFrame()
	if errors.Is(err, wire.ErrUnknownOp) {
		return f.Header, nil // the reply to an unknown op carries it back
	}
	if err != nil {
		c.tb.Fatalf("read reply: %v", err)
	}
	return f.Header, bytes.Clone(f.Body)
}

// Expect reads the next reply and requires its id and status.
func (c *Conn) Expect(id uint64, st wire.Status) {
	c.tb.Helper()
	h, _ := c.Reply()
	if h.ID != id || h.Status != st || !h.IsReply() {
		c.tb.Fatalf("reply %+v, want id %d status %v", h, id, st)
	}
}

// Ping sends a ping with id and requires its echo: the stream is in sync.
func (c *Conn) Ping(id uint64) {
	c.tb.Helper()
	c.SendFrame(wire.OpPing, id, []byte("p"))
	h, body := c.Reply()
	if h.ID != id || h.Status != wire.StatusOK || string(body) != "p" {
		c.tb.Fatalf("ping reply %+v %q", h, body)
	}
}

// Closed reports whether the server closed the connection (EOF or reset
// before any further frame); it fails the test if nothing happens within
// Timeout.
func (c *Conn) Closed() bool {
	c.tb.Helper()
	_ = c.NC.SetReadDeadline(time.Now().Add(Timeout))
	_, err := c.rd.ReadFrame()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.tb.Fatalf("connection still open after %v", Timeout)
	}
	var oe *net.OpError
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.As(err, &oe))
}

// ExpectClosed requires the server to close the connection.
func (c *Conn) ExpectClosed() {
	c.tb.Helper()
	if !c.Closed() {
		c.tb.Fatal("the connection is still open (a frame arrived or the read failed otherwise), want it closed")
	}
}
