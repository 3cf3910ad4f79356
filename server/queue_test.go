package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/wire"
	"github.com/cellstore/cell/wire/wiretest"
)

// gate blocks workers in TestingKnobs.BeforeHandle until opened.
type gate struct {
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 1024), open: make(chan struct{})} }

func (g *gate) hook(wire.Op) {
	g.entered <- struct{}{}
	<-g.open
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// A full queue answers Overloaded at once instead of queueing without
// bound; nothing is executed twice or lost.
func TestOverloaded(t *testing.T) {
	g := newGate()
	s, _ := newTestServer(t, func(o *Options) {
		o.Cores = 1
		o.QueueDepth = 4
		o.TestingKnobs.BeforeHandle = g.hook
	})
	t.Cleanup(g.release)
	c := dial(t, s)
	const n = 20
	var ok, overloaded atomic.Int32
	var wg sync.WaitGroup
	// One request occupies the worker, four fill the queue, the rest are
	// refused.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte("first"), Value: []byte("v")}, nil); err != nil {
			t.Error(err)
		}
	}()
	<-g.entered
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(t, c, wire.OpGet, &wire.GetRequest{Key: []byte("first")}, &wire.GetReply{})
			switch {
			case err == nil, errors.Is(err, wire.ErrNotFound):
				// A get may run before the put it queued behind is
				// applied: the put's worker proposed it and moved on.
				ok.Add(1)
			case errors.Is(err, wire.ErrOverloaded):
				overloaded.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for overloaded.Load() < n-4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d overloaded replies, want %d", overloaded.Load(), n-4)
		}
		time.Sleep(time.Millisecond)
	}
	if d := len(s.queue); d != 4 {
		t.Fatalf("queue depth %d, want 4", d)
	}
	g.release()
	wg.Wait()
	if ok.Load() != 4 || overloaded.Load() != n-4 {
		t.Fatalf("%d ok, %d overloaded; want 4 and %d", ok.Load(), overloaded.Load(), n-4)
	}
	fam := gather(t, s)
	if v := metricValue(fam, "cell_server_ops_total", map[string]string{"op": "get", "status": "Overloaded"}); v != n-4 {
		t.Fatalf("overloaded counted %v times", v)
	}
}

// A request whose budget ran out while queued is answered Expired, not
// executed.
func TestExpired(t *testing.T) {
	g := newGate()
	s, _ := newTestServer(t, func(o *Options) { o.TestingKnobs.BeforeHandle = g.hook })
	t.Cleanup(g.release)
	r := wiretest.Dial(t, s.Addr())
	r.SendFrame(wire.OpPut, 1, (&wire.PutRequest{Key: []byte("a"), Value: []byte("1")}).AppendTo(nil))
	<-g.entered // the worker holds request 1
	h := wire.Header{Op: wire.OpPut, ID: 2}
	h.SetBudget(time.Millisecond)
	r.Send(wire.AppendFrame(nil, h, (&wire.PutRequest{Key: []byte("b"), Value: []byte("2")}).AppendTo(nil)))
	time.Sleep(20 * time.Millisecond)
	g.release()
	got := map[uint64]wire.Header{}
	for range 2 {
		h, _ := r.Reply()
		got[h.ID] = h
	}
	if got[1].Status != wire.StatusOK || got[2].Status != wire.StatusExpired {
		t.Fatalf("replies %v", got)
	}
	if got[2].QueueNanos < uint32(10*time.Millisecond) {
		t.Fatalf("expired reply reports %d ns of queueing", got[2].QueueNanos)
	}
	c := dial(t, s)
	if _, ok := get(t, c, "b"); ok {
		t.Fatal("the expired put was executed")
	}
}

// Replies carry queueing and service times, and come back out of order
// when workers finish out of order.
func TestTimingAndOutOfOrder(t *testing.T) {
	block := make(chan struct{})
	var first atomic.Bool
	s, _ := newTestServer(t, func(o *Options) {
		o.Cores = 2
		o.TestingKnobs.BeforeHandle = func(op wire.Op) {
			if op == wire.OpContains && first.CompareAndSwap(false, true) {
				<-block
			}
		}
	})
	r := wiretest.Dial(t, s.Addr())
	r.SendFrame(wire.OpContains, 1, (&wire.GetRequest{Key: []byte("a")}).AppendTo(nil))
	r.SendFrame(wire.OpGet, 2, (&wire.GetRequest{Key: []byte("a")}).AppendTo(nil))
	h, _ := r.Reply()
	if h.ID != 2 || h.Status != wire.StatusNotFound {
		t.Fatalf("first reply %v: want request 2's, while request 1 is held", h)
	}
	time.Sleep(5 * time.Millisecond)
	close(block)
	h, _ = r.Reply()
	if h.ID != 1 || h.Status != wire.StatusOK || h.ServiceNanos < uint32(5*time.Millisecond) {
		t.Fatalf("second reply %v: want request 1 with its service time", h)
	}
}

// Close lets the requests already queued finish and answers them before
// closing connections.
func TestGracefulClose(t *testing.T) {
	g := newGate()
	s, _ := newTestServer(t, func(o *Options) {
		o.Cores = 1
		o.TestingKnobs.BeforeHandle = g.hook
	})
	t.Cleanup(g.release)
	c := dial(t, s)
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.CallMessage(context.Background(), wire.OpPut, &wire.PutRequest{Key: []byte{'k', byte(i)}, Value: []byte("v")})
			errs <- err
		}()
	}
	<-g.entered
	deadline := time.Now().Add(10 * time.Second)
	for len(s.queue) < n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d", len(s.queue))
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with requests in flight", err)
	default:
	}
	g.release()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("request in flight at Close: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	// New connections are refused once closed.
	if _, err := wire.Dial(ctxT(t), s.Addr(), nil); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}

// A reply is sent alone (written by its worker at once) only when its
// request is the only one in flight on the connection and so was the
// last one answered: a client calling one at a time. The last reply of a
// pipelined burst is not: it leaves with the burst.
func TestReplyAlone(t *testing.T) {
	c := &conn{slots: make(chan struct{}, 32)}
	answer := func(inflight int) bool {
		c.slots <- struct{}{} // the reader's, waiting for the next request
		for range inflight {
			c.slots <- struct{}{}
			c.begin()
		}
		alone := c.alone()
		for range inflight {
			c.done()
		}
		<-c.slots
		return alone
	}
	steps := []struct {
		inflight int
		want     bool
	}{
		{1, false}, // the first: nothing known of the one before
		{1, true},
		{1, true},
		{16, false}, // a burst
		{4, false},
		{1, false}, // its last reply
		{1, true},  // one at a time again
	}
	for i, st := range steps {
		if got := answer(st.inflight); got != st.want {
			t.Fatalf("step %d (%d in flight): alone %v, want %v", i, st.inflight, got, st.want)
		}
	}
}

// A client that sends one get at a time gets its replies written by the
// worker that served them, not handed to the connection's writer
// goroutine (after the first two); a pipelined client does not.
func TestRepliesWrittenByWorker(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "k", "v")
	serverConn := func() *conn {
		s.mu.Lock()
		defer s.mu.Unlock()
		for sc := range s.mu.conns {
			return sc
		}
		return nil
	}
	sc := serverConn()
	before := sc.rw.DirectWrites()
	for range 20 {
		if v, ok := get(t, c, "k"); !ok || v != "v" {
			t.Fatalf("get: %q %v", v, ok)
		}
	}
	if d := sc.rw.DirectWrites() - before; d < 18 {
		t.Fatalf("%d of 20 one-at-a-time replies written by their worker, want at least 18", d)
	}
}
