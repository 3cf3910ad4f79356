package server

import (
	"context"
	"errors"
	"slices"
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
	if d := len(s.rpc.queue); d != 4 {
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
	for len(s.rpc.queue) < n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d", len(s.rpc.queue))
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
// last one answered: a client calling one at a time. The replies of a
// pipelined burst are not, its last one included: it leaves with the
// burst.
func TestReplyAlone(t *testing.T) {
	c := &conn{slots: make(chan struct{}, 32)}
	// burst sends n requests together and answers them in turn; it
	// returns which replies were alone.
	burst := func(n int) []bool {
		c.slots <- struct{}{} // the reader's, waiting for the next request
		for range n {
			c.slots <- struct{}{}
			c.begin()
		}
		var alone []bool
		for range n {
			alone = append(alone, c.answered())
			c.done()
		}
		<-c.slots
		return alone
	}
	steps := []struct {
		n    int
		want []bool
	}{
		{1, []bool{false}}, // the first: nothing known of the one before
		{1, []bool{true}},
		{1, []bool{true}},
		{3, []bool{false, false, false}}, // a burst, its last reply included
		{1, []bool{true}},                // one at a time again
		{2, []bool{false, false}},
	}
	for i, st := range steps {
		if got := burst(st.n); !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%d requests together): alone %v, want %v", i, st.n, got, st.want)
		}
	}
	// A request that arrives while the worker of the one before is
	// between its reply and its end (done) is still alone: the client
	// saw the reply and sent the next.
	c.slots <- struct{}{}
	c.slots <- struct{}{}
	c.begin()
	if !c.answered() {
		t.Fatal("a one-at-a-time reply is not alone")
	}
	c.slots <- struct{}{}
	c.begin() // the next request, before the first job's done
	if !c.answered() {
		t.Fatal("the next request, read before the job before it ended, is not alone")
	}
	c.done()
	c.done()
	<-c.slots
	if c.jobs.Load() != 0 || len(c.slots) != 0 {
		t.Fatalf("%d jobs, %d slots left", c.jobs.Load(), len(c.slots))
	}
}

// A client that sends one get at a time gets its replies written by the
// worker that served them, not handed to the connection's writer
// goroutine; a pipelined client does not. Each get waits for the writer
// to be idle (it is, once a direct write returns, but a reply it queued
// leaves it busy until its flush and its next look at the queue): how
// often a client's next request beats that is the scheduler's, measured
// by the benchmarks (BENCHMARKS.md), not here.
func TestRepliesWrittenByWorker(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "k", "v")
	// The server may hold other connections too (its own peer calls, to
	// itself among them): take the one whose far end is c.
	serverConn := func() *conn {
		s.mu.Lock()
		defer s.mu.Unlock()
		for sc := range s.mu.conns {
			if sc.nc.RemoteAddr().String() == c.LocalAddr().String() {
				return sc
			}
		}
		return nil
	}
	sc := serverConn()
	if sc == nil {
		t.Fatal("the server holds no connection from the test's client")
	}
	before := sc.rw.DirectWrites()
	const gets = 20
	for range gets {
		waitFor(t, sc.rw.Idle, "the connection's writer to go idle")
		if v, ok := get(t, c, "k"); !ok || v != "v" {
			t.Fatalf("get: %q %v", v, ok)
		}
	}
	if d := sc.rw.DirectWrites() - before; d != gets {
		t.Fatalf("%d of %d one-at-a-time replies written by their worker, want all", d, gets)
	}
}
