package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// handler answers one request. It runs in its own goroutine, so replies
// leave in whatever order handlers finish; it must Release f.
type handler func(rw *ReplyWriter, f Frame, arrived time.Time)

// testServer serves the protocol on a loopback listener the way a Cell
// server would: one reader per connection, requests handed to other
// goroutines, one ReplyWriter shared by them.
type testServer struct {
	t      testing.TB
	ln     net.Listener
	opts   *Options
	handle handler
	// inline runs handle on the reading goroutine with frames from
	// ReadFrame (replies in order, no goroutine or buffer per request).
	inline bool
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startServer(t testing.TB, opts *Options, h handler) *testServer {
	return startServerMode(t, opts, h, false)
}

func startServerMode(t testing.TB, opts *Options, h handler, inline bool) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{t: t, ln: ln, opts: opts, handle: h, inline: inline}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) addr() string { return s.ln.Addr().String() }

func (s *testServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, nc)
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(nc)
	}
}

func (s *testServer) serve(nc net.Conn) {
	defer s.wg.Done()
	defer nc.Close()
	rd, err := NewReader(nc, s.opts)
	if err != nil {
		s.t.Error(err)
		return
	}
	rw, err := NewReplyWriter(nc, s.opts)
	if err != nil {
		s.t.Error(err)
		return
	}
	var handlers sync.WaitGroup
	defer func() {
		handlers.Wait()
		_ = rw.Close()
	}()
	for {
		var f Frame
		var err error
		if s.inline {
			f, err = rd.ReadFrame()
		} else {
			f, err = rd.ReadFramePooled()
		}
		if err != nil {
			if InSync(err) {
				_ = rw.WriteError(&f.Header, err, 0, 0)
				continue
			}
			if errors.Is(err, ErrBadVersion) {
				_ = rw.WriteError(&f.Header, err, 0, 0)
			}
			return
		}
		arrived := time.Now()
		if s.inline {
			s.handle(rw, f, arrived)
			continue
		}
		handlers.Add(1)
		go s.handleAsync(&handlers, rw, f, arrived)
	}
}

func (s *testServer) handleAsync(wg *sync.WaitGroup, rw *ReplyWriter, f Frame, arrived time.Time) {
	defer wg.Done()
	s.handle(rw, f, arrived)
}

// killConns closes every server-side connection.
func (s *testServer) killConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nc := range s.conns {
		_ = nc.Close()
	}
}

func (s *testServer) stop() {
	_ = s.ln.Close()
	s.killConns()
	s.wg.Wait()
}

// echo replies with the request's body after a random delay of up to
// maxDelay, so that replies come back out of order.
func echo(maxDelay time.Duration) handler {
	return func(rw *ReplyWriter, f Frame, arrived time.Time) {
		defer f.Release()
		if maxDelay > 0 {
			time.Sleep(rand.N(maxDelay))
		}
		start := time.Now()
		h := f.Header.Reply(StatusOK)
		h.SetTiming(start.Sub(arrived), time.Since(start))
		_ = rw.Write(h, f.Body)
	}
}

func TestReplyWriterOrderAndErrors(t *testing.T) {
	client, server := net.Pipe()
	rw, err := NewReplyWriter(server, nil)
	if err != nil {
		t.Fatal(err)
	}
	rd := mustReader(t, client, nil)
	req := Header{Op: OpGet, ID: 41, BudgetMicros: 99}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = rw.WriteError(&req, ErrNotFound, time.Microsecond, 2*time.Microsecond)
		_ = rw.WriteError(&req, &StatusError{Status: StatusStaleEpoch, Region: 3, Epoch: 8}, 0, 0)
		_ = rw.WriteMessage(req.Reply(StatusOK), &GetReply{Value: []byte("v")})
		_ = rw.Close()
	}()

	f, err := rd.ReadFrame()
	if err != nil || f.Header.Status != StatusNotFound || len(f.Body) != 0 || !f.Header.IsReply() ||
		f.Header.ID != 41 || f.Header.BudgetMicros != 0 || f.Header.QueueNanos != 1000 || f.Header.ServiceNanos != 2000 {
		t.Fatalf("not found reply: %v %v", f.Header, err)
	}
	f, err = rd.ReadFrame()
	if err != nil || f.Header.Status != StatusStaleEpoch {
		t.Fatalf("stale epoch reply: %v %v", f.Header, err)
	}
	var se *StatusError
	if err := replyError(&f); !errors.As(err, &se) || se.Epoch != 8 || se.Region != 3 || !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("got %v", err)
	}
	f, err = rd.ReadFrame()
	var gr GetReply
	if err != nil || gr.Decode(f.Body) != nil || string(gr.Value) != "v" {
		t.Fatalf("get reply: %v %v", f.Header, err)
	}
	<-closed // reading the last reply does not mean Close has run
	if err := rw.Write(req.Reply(StatusOK), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

func TestReplyWriterFailsOnWriteError(t *testing.T) {
	client, server := net.Pipe()
	rw, err := NewReplyWriter(server, nil)
	if err != nil {
		t.Fatal(err)
	}
	client.Close()
	req := Header{Op: OpPing, ID: 1}
	_ = rw.Write(req.Reply(StatusOK), nil)
	deadline := time.Now().Add(5 * time.Second)
	for rw.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rw.Err() == nil {
		t.Fatal("write error not reported")
	}
	if err := rw.Write(req.Reply(StatusOK), nil); err == nil {
		t.Fatal("write after failure succeeded")
	}
	if err := rw.Close(); err == nil {
		t.Fatal("Close hid the write error")
	}
}

func TestReplyWriterRefusesLargeReply(t *testing.T) {
	rw, err := NewReplyWriter(discard{}, &Options{MaxFrameSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	req := Header{Op: OpRange, ID: 1}
	if err := rw.Write(req.Reply(StatusOK), make([]byte, 33)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v", err)
	}
	if err := rw.WriteMessage(req.Reply(StatusOK), &NodeDumpReply{Data: make([]byte, 40)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v", err)
	}
	if err := rw.Write(req.Reply(StatusOK), make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Encode makes a reply without queueing it, so that a server can count it
// before the client can see it; Send queues it, byte for byte what
// WriteMessage writes.
func TestReplyWriterEncodeThenSend(t *testing.T) {
	req := Header{Op: OpGet, ID: 7, BudgetMicros: 5}
	var unsent bytes.Buffer
	rw, err := NewReplyWriter(&unsent, &Options{MaxFrameSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Encode(req.Reply(StatusOK), &GetReply{Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Encode(req.Reply(StatusOK), &NodeDumpReply{Data: make([]byte, 40)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized Encode: %v", err)
	}
	if err := rw.Send(Reply{}); err == nil {
		t.Fatal("Send of the zero Reply succeeded")
	}
	if err := rw.Close(); err != nil { // writes what was queued
		t.Fatal(err)
	}
	if n := unsent.Len(); n != 0 {
		t.Fatalf("%d bytes written without a Send", n)
	}

	var out bytes.Buffer
	if rw, err = NewReplyWriter(&out, &Options{MaxFrameSize: 64}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []Message{&GetReply{Value: []byte("v")}, nil} {
		r, err := rw.Encode(req.Reply(StatusOK), m)
		if err != nil {
			t.Fatal(err)
		}
		if err := rw.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.WriteMessage(req.Reply(StatusOK), &GetReply{Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	rd := mustReader(t, bytes.NewReader(out.Bytes()), nil)
	var bodies [][]byte
	for range 3 {
		f, err := rd.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if !f.Header.IsReply() || f.Header.ID != 7 || f.Header.BudgetMicros != 0 {
			t.Fatalf("header %v", f.Header)
		}
		bodies = append(bodies, bytes.Clone(f.Body))
	}
	if len(bodies[1]) != 0 || !bytes.Equal(bodies[0], bodies[2]) {
		t.Fatalf("bodies %q", bodies)
	}
}
