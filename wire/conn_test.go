package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

func mustDial(t testing.TB, addr string, o *Options) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *Conn) pendingCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.pending)
}

func mustPing(t testing.TB, c *Conn) {
	t.Helper()
	f, err := c.Call(context.Background(), OpPing, []byte("ping"))
	if err != nil || string(f.Body) != "ping" {
		t.Fatalf("ping: %q %v", f.Body, err)
	}
	f.Release()
}

// TestConnConcurrentCalls runs many goroutines over one Conn against a
// server that answers in random order.
func TestConnConcurrentCalls(t *testing.T) {
	srv := startServer(t, nil, echo(200*time.Microsecond))
	c := mustDial(t, srv.addr(), nil)
	const goroutines, calls = 16, 100
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			for i := range calls {
				body = fmt.Appendf(body[:0], "g%d-call%d", g, i)
				op := []Op{OpPing, OpGet, OpSearch, Op(0xc5)}[i%4]
				f, err := c.Call(context.Background(), op, body)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(f.Body, body) || f.Header.Op != op || !f.Header.IsReply() {
					t.Errorf("call %s: got %v %q", body, f.Header, f.Body)
				}
				f.Release()
			}
		}()
	}
	wg.Wait()
	if n := c.pendingCount(); n != 0 {
		t.Fatalf("%d calls still pending", n)
	}
}

// TestConnOutOfOrderReplies: the server answers two requests in the
// reverse of their order; each caller still gets its own reply.
func TestConnOutOfOrderReplies(t *testing.T) {
	var mu sync.Mutex
	var held []Frame
	second := make(chan struct{})
	srv := startServer(t, nil, func(rw *ReplyWriter, f Frame, _ time.Time) {
		mu.Lock()
		held = append(held, f)
		if len(held) < 2 {
			mu.Unlock()
			<-second
			return
		}
		defer close(second)
		defer mu.Unlock()
		for i := len(held) - 1; i >= 0; i-- {
			if err := rw.Write(held[i].Header.Reply(StatusOK), held[i].Body); err != nil {
				t.Error(err)
			}
			held[i].Release()
		}
	})
	c := mustDial(t, srv.addr(), nil)
	first := make(chan []byte, 1)
	go func() {
		f, err := c.Call(context.Background(), OpGet, []byte("first"))
		if err != nil {
			t.Error(err)
		}
		first <- bytes.Clone(f.Body)
		f.Release()
	}()
	waitFor(t, "first request to reach the server", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 1 })
	f, err := c.Call(context.Background(), OpGet, []byte("second"))
	if err != nil || string(f.Body) != "second" {
		t.Fatalf("second: %q %v", f.Body, err)
	}
	f.Release()
	if got := <-first; string(got) != "first" {
		t.Fatalf("first: %q", got)
	}
}

// blocker is a handler that holds requests of op until released, and
// echoes everything else at once.
type blocker struct {
	op      Op
	arrived chan Header
	release chan struct{}
	once    sync.Once
}

// newBlocker returns a blocker. Register b.unblock as a cleanup after
// starting the server, so that it runs before the server is stopped.
func newBlocker(op Op) *blocker {
	return &blocker{op: op, arrived: make(chan Header, 100), release: make(chan struct{})}
}

func (b *blocker) unblock() { b.once.Do(func() { close(b.release) }) }

// next returns the header of the next held request.
func (b *blocker) next(t *testing.T) Header {
	t.Helper()
	select {
	case h := <-b.arrived:
		return h
	case <-time.After(5 * time.Second):
		t.Fatal("request did not reach the server")
		return Header{}
	}
}

func (b *blocker) handle(rw *ReplyWriter, f Frame, arrived time.Time) {
	if f.Header.Op == b.op {
		b.arrived <- f.Header
		<-b.release
	}
	echo(0)(rw, f, arrived)
}

func TestConnCancel(t *testing.T) {
	b := newBlocker(OpGet)
	srv := startServer(t, nil, b.handle)
	t.Cleanup(b.unblock)
	c := mustDial(t, srv.addr(), nil)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, OpGet, []byte("slow"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancellation took %v", d)
	}
	h := b.next(t)
	if h.BudgetMicros == 0 || h.Budget() > 100*time.Millisecond {
		t.Fatalf("request budget %v, want (0, 100ms]", h.Budget())
	}
	if n := c.pendingCount(); n != 0 {
		t.Fatalf("%d calls pending after cancellation", n)
	}

	// Explicit cancellation, and a context already done.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { b.next(t); cancel2() }()
	if _, err := c.Call(ctx2, OpGet, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want canceled", err)
	}
	if _, err := c.Call(ctx2, OpPing, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("done context: got %v", err)
	}

	// The late replies are dropped and the connection keeps working.
	b.unblock()
	mustPing(t, c)
	waitFor(t, "no pending calls", func() bool { return c.pendingCount() == 0 })
}

func TestConnMaxInFlight(t *testing.T) {
	b := newBlocker(OpGet)
	srv := startServer(t, nil, b.handle)
	t.Cleanup(b.unblock)
	c := mustDial(t, srv.addr(), &Options{MaxInFlight: 2})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := c.Call(context.Background(), OpGet, nil)
			if err != nil {
				t.Error(err)
			}
			f.Release()
		}()
	}
	b.next(t)
	b.next(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, OpPing, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third call: got %v, want to wait for a slot", err)
	}
	b.unblock()
	wg.Wait()
	mustPing(t, c)
}

func TestConnServerClosesConnection(t *testing.T) {
	b := newBlocker(OpPut)
	srv := startServer(t, nil, b.handle)
	t.Cleanup(b.unblock)
	c := mustDial(t, srv.addr(), nil)
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.Call(context.Background(), OpPut, []byte("w"))
			errs <- err
		}()
	}
	for range n {
		b.next(t)
	}
	srv.killConns()
	for range n {
		err := <-errs
		var ce *ConnError
		if !errors.Is(err, ErrConnLost) || !errors.As(err, &ce) || !ce.Sent {
			t.Fatalf("pending call: got %v, want a sent ConnError", err)
		}
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed")
	}
	_, err := c.Call(context.Background(), OpPing, nil)
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Sent || c.Err() == nil {
		t.Fatalf("call on a broken conn: got %v", err)
	}
}

func TestConnClose(t *testing.T) {
	b := newBlocker(OpGet)
	srv := startServer(t, nil, b.handle)
	t.Cleanup(b.unblock)
	c := mustDial(t, srv.addr(), nil)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), OpGet, nil)
		errc <- err
	}()
	b.next(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) || !errors.Is(err, ErrConnLost) {
		t.Fatalf("pending call: got %v", err)
	}
	if _, err := c.Call(context.Background(), OpPing, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after close: got %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestConnFrameTooLarge(t *testing.T) {
	srv := startServer(t, &Options{MaxFrameSize: 1024}, func(rw *ReplyWriter, f Frame, arrived time.Time) {
		if f.Header.Op == OpRange { // a reply larger than the client accepts
			defer f.Release()
			_ = rw.Write(f.Header.Reply(StatusOK), make([]byte, 600))
			return
		}
		echo(0)(rw, f, arrived)
	})

	t.Run("client refuses to send", func(t *testing.T) {
		c := mustDial(t, srv.addr(), &Options{MaxFrameSize: 256})
		_, err := c.Call(context.Background(), OpPut, make([]byte, 256))
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("got %v", err)
		}
		_, err = c.CallMessage(context.Background(), OpPut, &PutRequest{Value: make([]byte, 256)})
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("CallMessage: got %v", err)
		}
		mustPing(t, c)
	})
	t.Run("server rejects and stays in sync", func(t *testing.T) {
		c := mustDial(t, srv.addr(), nil)
		f, err := c.Call(context.Background(), OpPut, make([]byte, 2000))
		var se *StatusError
		if !errors.Is(err, ErrFrameTooLarge) || !errors.As(err, &se) || se.Status != StatusFrameTooLarge {
			t.Fatalf("got %v", err)
		}
		if f.Header.Status != StatusFrameTooLarge || f.Body != nil {
			t.Fatalf("frame on error: %v", f.Header)
		}
		mustPing(t, c)
	})
	t.Run("client skips a large reply", func(t *testing.T) {
		c := mustDial(t, srv.addr(), &Options{MaxFrameSize: 512})
		if _, err := c.Call(context.Background(), OpRange, nil); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("got %v", err)
		}
		mustPing(t, c)
	})
}

func TestConnStatusErrors(t *testing.T) {
	srv := startServer(t, nil, func(rw *ReplyWriter, f Frame, _ time.Time) {
		defer f.Release()
		var err error
		switch f.Header.Op {
		case OpGet:
			err = fmt.Errorf("lookup: %w", ErrNotFound)
		case OpPut:
			err = &StatusError{Status: StatusWrongServer, Region: 4, Leader: "10.0.0.9:7000", Message: "not leader"}
		case OpDelete:
			err = errors.New("disk on fire")
		}
		_ = rw.WriteError(&f.Header, err, time.Microsecond, 2*time.Microsecond)
	})
	c := mustDial(t, srv.addr(), nil)
	ctx := context.Background()

	f, err := c.Call(ctx, OpGet, nil)
	if err != ErrNotFound { // the bare sentinel: no allocation for a miss
		t.Fatalf("get: got %#v", err)
	}
	if f.Header.ServiceTime() != 2*time.Microsecond || f.Header.QueueTime() != time.Microsecond {
		t.Fatalf("timing lost on error: %v", f.Header)
	}

	_, err = c.Call(ctx, OpPut, nil)
	var se *StatusError
	if !errors.Is(err, ErrWrongServer) || !errors.As(err, &se) || se.Leader != "10.0.0.9:7000" || se.Region != 4 {
		t.Fatalf("put: got %v", err)
	}

	_, err = c.Call(ctx, OpDelete, nil)
	if !errors.Is(err, ErrInternal) || !errors.As(err, &se) || se.Message != "disk on fire" {
		t.Fatalf("delete: got %v", err)
	}

	if _, err := c.Call(ctx, Op(0x03), nil); !errors.Is(err, ErrUnknownOp) {
		t.Fatalf("unknown op: got %v", err)
	}
}

// rawServer accepts one connection and runs fn on it.
func rawServer(t *testing.T, fn func(nc net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		fn(nc)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func TestConnCorruptStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(req Header) []byte
		want  error
	}{
		{"garbage", func(Header) []byte { return []byte("HTTP/1.1 400 Bad Request\r\n\r\nxxxxxxxxxx") }, ErrBadMagic},
		{"request instead of reply", func(req Header) []byte { return AppendFrame(nil, req, nil) }, ErrProtocol},
		{"short length", func(req Header) []byte {
			b := AppendFrame(nil, req.Reply(StatusOK), nil)
			le.PutUint32(b, 8)
			return b
		}, ErrBadLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := rawServer(t, func(nc net.Conn) {
				f, err := mustReader(t, nc, nil).ReadFrame()
				if err != nil {
					return
				}
				_, _ = nc.Write(tc.reply(f.Header))
				_, _ = nc.Read(make([]byte, 1)) // until the client hangs up
			})
			c := mustDial(t, addr, nil)
			_, err := c.Call(context.Background(), OpPing, nil)
			var ce *ConnError
			if !errors.Is(err, tc.want) || !errors.As(err, &ce) || !ce.Sent {
				t.Fatalf("got %v, want a ConnError wrapping %v", err, tc.want)
			}
		})
	}
}

// TestConnReplyWithWrongOp: a reply whose op differs from its request's
// fails that call only.
func TestConnReplyWithWrongOp(t *testing.T) {
	addr := rawServer(t, func(nc net.Conn) {
		rd := mustReader(t, nc, nil)
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				return
			}
			h := f.Header.Reply(StatusOK)
			if h.Op == OpGet {
				h.Op = OpPut
			}
			_, _ = nc.Write(AppendFrame(nil, h, nil))
		}
	})
	c := mustDial(t, addr, nil)
	if _, err := c.Call(context.Background(), OpGet, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v", err)
	}
	f, err := c.Call(context.Background(), OpPing, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
}

// TestServerBadVersion: the server names the request in a BadVersion reply,
// then closes the connection.
func TestServerBadVersion(t *testing.T) {
	srv := startServer(t, nil, echo(0))
	nc, err := net.Dial("tcp", srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := AppendFrame(nil, Header{Op: OpGet, ID: 1234}, []byte("body"))
	req[offVersion] = 2
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	rd := mustReader(t, nc, nil)
	f, err := rd.ReadFrame()
	if err != nil || f.Header.Status != StatusBadVersion || f.Header.ID != 1234 {
		t.Fatalf("got %v %v", f.Header, err)
	}
	if _, err := rd.ReadFrame(); err == nil {
		t.Fatal("connection still open after bad version")
	}
}

// TestConnSentClassification: requests still queued behind a blocked write
// when the connection fails are reported as not sent.
func TestConnSentClassification(t *testing.T) {
	client, server := net.Pipe() // writes block until the peer reads
	c, err := NewConn(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errs := make(chan error, 3)
	call := func(n int) {
		_, err := c.Call(context.Background(), OpPut, make([]byte, n))
		errs <- err
	}
	go call(100 << 10) // larger than the write buffer: its write blocks
	waitFor(t, "first write to start", func() bool { return c.bw.handed.Load() == 1 })
	go call(10)
	go call(10)
	waitFor(t, "two queued requests", func() bool {
		c.bw.mu.Lock()
		defer c.bw.mu.Unlock()
		return len(c.bw.mu.queue) == 2
	})
	server.Close()
	var sent, unsent int
	for range 3 {
		var ce *ConnError
		if err := <-errs; !errors.As(err, &ce) {
			t.Fatalf("got %v", err)
		} else if ce.Sent {
			sent++
		} else {
			unsent++
		}
	}
	if sent != 1 || unsent != 2 {
		t.Fatalf("sent %d unsent %d, want 1 and 2", sent, unsent)
	}
}

func TestConnCallMessage(t *testing.T) {
	srv := startServer(t, nil, func(rw *ReplyWriter, f Frame, _ time.Time) {
		defer f.Release()
		var req GetRequest
		if err := req.Decode(f.Body); err != nil {
			_ = rw.WriteError(&f.Header, err, 0, 0)
			return
		}
		_ = rw.WriteMessage(f.Header.Reply(StatusOK), &GetReply{Value: append([]byte("value of "), req.Key...)})
	})
	c := mustDial(t, srv.addr(), nil)
	f, err := c.CallMessage(context.Background(), OpGet, &GetRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	var rep GetReply
	if err := rep.Decode(f.Body); err != nil || string(rep.Value) != "value of k" {
		t.Fatalf("got %q %v", rep.Value, err)
	}
	// A malformed body is answered with BadRequest.
	if _, err := c.Call(context.Background(), OpGet, []byte{1}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("got %v", err)
	}
}
