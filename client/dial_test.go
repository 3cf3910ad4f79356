package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/wire"
)

// hangingDials is a dialWire whose dials never connect, as to the address
// of a dead host on the local network (ARP gets no answer): each waits for
// its context and records the time it was given.
type hangingDials struct {
	n        atomic.Int32
	mu       sync.Mutex
	allotted []time.Duration
}

func (h *hangingDials) dial(ctx context.Context, addr string, _ *wire.Options) (*wire.Conn, error) {
	h.n.Add(1)
	if dl, ok := ctx.Deadline(); ok {
		h.mu.Lock()
		h.allotted = append(h.allotted, time.Until(dl))
		h.mu.Unlock()
	}
	<-ctx.Done()
	return nil, errors.New("dial " + addr + ": no route to host")
}

// bareClient is a Client with only what server connections use.
func bareClient(t *testing.T, cfg Config, dial func(context.Context, string, *wire.Options) (*wire.Conn, error)) *Client {
	t.Helper()
	cfg.Servers = []string{"unused:1"}
	cfg.EnsureDefaults()
	sel, err := locality.NewSelector(cfg.selectorOptions())
	if err != nil {
		t.Fatal(err)
	}
	return &Client{cfg: cfg, log: testLogger(t), sel: sel, dialWire: dial, closing: make(chan struct{})}
}

// After a dial to a server fails, the next dials to it give up after
// suspectDialTimeout, not Config.DialTimeout: a dead host's address keeps
// requests waiting for as long as a dial is allowed, while its regions
// are served elsewhere. And requests queued behind a failing dial fail
// with it: many of them cost one dial per connection slot, not one each,
// one after the other.
func TestDialToSuspectServerGivesUpSoon(t *testing.T) {
	h := &hangingDials{}
	c := bareClient(t, Config{DialTimeout: time.Minute, ConnsPerServer: 2}, h.dial)
	srv := newServer(c, 1, "10.255.255.1:7070")

	if d := srv.dialTimeout(); d != time.Minute {
		t.Fatalf("a new server's dials may take %v, want DialTimeout (1m)", d)
	}
	// A caller's deadline of 300 ms ends the first dial: the caller's own,
	// it is not held against the server.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := srv.conn(ctx)
	cancel()
	if !errors.Is(err, errDial) {
		t.Fatalf("dial: %v, want errDial", err)
	}
	if srv.dialTimeout() != time.Minute {
		t.Fatalf("a dial ended by its caller made the server suspect")
	}

	// A connection that broke makes the server suspect (as a dial that
	// fails on its own does).
	srv.markSuspect()
	h.n.Store(0)
	h.allotted = nil
	const callers = 16
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = srv.conn(context.Background())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, errDial) {
			t.Fatalf("caller %d: %v, want errDial", i, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.allotted {
		if d > suspectDialTimeout {
			t.Fatalf("a dial to a suspect server was given %v, want at most %v", d, suspectDialTimeout)
		}
	}
	if n := h.n.Load(); n > int32(c.cfg.ConnsPerServer) {
		t.Fatalf("%d callers made %d dials, want at most one per slot (%d)", callers, n, c.cfg.ConnsPerServer)
	}
}
