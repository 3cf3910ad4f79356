package client

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
	cellserver "github.com/cellstore/cell/server"
	"github.com/cellstore/cell/wire"
)

// TestDeadlineRespected: a slow server does not hold an operation past
// its context's deadline; a read fails with the context's error, a write
// in flight with ErrOutcomeUnknown as well.
func TestDeadlineRespected(t *testing.T) {
	var slow atomic.Bool
	rc := startReal(t, 1, func(o *cellserver.Options) {
		o.Cores = 4
		o.TestingKnobs.BeforeHandle = func(op wire.Op) {
			if slow.Load() && op != wire.OpMetadata {
				time.Sleep(300 * time.Millisecond)
			}
		}
	})
	cfg := realConfig(t, rc)
	cfg.Mode = locality.Mode{Kind: locality.ServerOnly}
	c := mustClient(t, cfg)
	mustPut(t, c, 10)
	slow.Store(true)
	defer slow.Store(false)
	for _, tt := range []struct {
		name string
		op   func(ctx context.Context) error
		want []error
	}{
		{"get", func(ctx context.Context) error { _, err := c.Get(ctx, key(1)); return err },
			[]error{context.DeadlineExceeded}},
		{"contains", func(ctx context.Context) error { _, err := c.Contains(ctx, key(1)); return err },
			[]error{context.DeadlineExceeded}},
		{"range", func(ctx context.Context) error { _, _, err := c.Range(ctx, nil, nil, RangeOptions{}); return err },
			[]error{context.DeadlineExceeded}},
		{"put", func(ctx context.Context) error { return c.Put(ctx, key(1), []byte("x")) },
			[]error{context.DeadlineExceeded, ErrOutcomeUnknown}},
		{"delete", func(ctx context.Context) error { return c.Delete(ctx, key(2)) },
			[]error{context.DeadlineExceeded, ErrOutcomeUnknown}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		err := tt.op(ctx)
		el := time.Since(start)
		cancel()
		for _, w := range tt.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v, want %v", tt.name, err, w)
			}
		}
		if el > 300*time.Millisecond {
			t.Errorf("%s took %v with a 50ms deadline", tt.name, el)
		}
	}
	// A context that has already ended: nothing is sent, not even a write.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Put(ctx, key(3), []byte("x")); !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("put with a done context: %v, want Canceled without ErrOutcomeUnknown", err)
	}
}

// TestWriteOutcomeUnknown: a write whose connection breaks after it was
// sent is sent again once, flagged as a retry; a server that cannot vouch
// that the first attempt was not applied (this one keeps no session
// table) answers Unverifiable, and the write fails with ErrOutcomeUnknown
// wrapping both (it may have been applied: with exec it was), never
// applied by the retry.
func TestWriteOutcomeUnknown(t *testing.T) {
	cl := newTestCluster(t, clusterSpec{})
	c := mustClient(t, testConfig(t, cl))
	ctx := testCtx(t, 10*time.Second)
	mustPut(t, c, 5)
	for _, exec := range []bool{true, false} {
		var puts sync.WaitGroup
		puts.Add(1)
		var once sync.Once
		cl.servers[0].knobs.Store(&serverKnobs{drop: func(op wire.Op) (bool, bool) {
			if op != wire.OpPut {
				return false, false
			}
			drop := false
			once.Do(func() { drop = true; puts.Done() })
			return drop, exec
		}})
		retries := cl.servers[0].retries.Load()
		err := c.Put(ctx, key(1), []byte("new"))
		cl.servers[0].knobs.Store(&serverKnobs{})
		if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, wire.ErrConnLost) || !errors.Is(err, wire.ErrUnverifiable) {
			t.Fatalf("exec=%v: Put = %v, want ErrOutcomeUnknown wrapping wire.ErrConnLost and wire.ErrUnverifiable", exec, err)
		}
		if n := cl.servers[0].retries.Load() - retries; n != 1 {
			t.Fatalf("exec=%v: %d retries sent, want 1", exec, n)
		}
		v, err := c.Get(ctx, key(1))
		if err != nil {
			t.Fatal(err)
		}
		if applied := bytes.Equal(v, []byte("new")); applied != exec {
			t.Fatalf("exec=%v: value %q: the write was retried or lost", exec, v)
		}
		if err := c.Put(ctx, key(1), value(1, 0)); err != nil {
			t.Fatalf("put after reconnect: %v", err)
		}
	}
}

// TestServerConnectionsKilled: connections that break under load are
// redialled transparently; reads retry and succeed.
func TestServerConnectionsKilled(t *testing.T) {
	const n = 100
	cl := newTestCluster(t, clusterSpec{})
	for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.Adaptive}} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := testConfig(t, cl)
			cfg.Mode = mode
			c := mustClient(t, cfg)
			mustPut(t, c, n)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
						cl.servers[0].killConns()
					}
				}
			})
			ctx := testCtx(t, 20*time.Second)
			var readers sync.WaitGroup
			for r := range 4 {
				readers.Go(func() {
					for round := range 5 {
						for i := r; i < n; i += 4 {
							v, err := c.Get(ctx, key(i))
							if err != nil || !bytes.Equal(v, value(i, 0)) {
								t.Errorf("round %d: Get %s = %q, %v", round, key(i), v, err)
								return
							}
						}
					}
				})
			}
			readers.Wait()
			close(stop)
			wg.Wait()
			if st := c.Stats(); st.Retry("conn-lost") == 0 {
				t.Logf("no conn-lost retry met (connections were redialled between calls): %v", st.Retries)
			}
		})
	}
}

// Without FailFast an operation on a region with no serving leader waits
// for one past MaxRetries, within its context's deadline, and then fails
// with ErrUnavailable wrapping the deadline (test/durability_test.go shows
// it succeeding when the server returns in time).
func TestWaitForLeaderWithinDeadline(t *testing.T) {
	rc := startReal(t, 1, nil)
	cfg := realConfig(t, rc)
	cfg.MaxRetries = 2
	c := mustClient(t, cfg)
	mustPut(t, c, 5)
	if err := rc.servers[0].Close(); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func(context.Context) error{
		"get": func(ctx context.Context) error { _, err := c.Get(ctx, key(3)); return err },
		"put": func(ctx context.Context) error { return c.Put(ctx, key(3), []byte("x")) },
	} {
		st := c.Stats()
		before := st.Retry("conn-lost")
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		err := op(ctx)
		cancel()
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
		if errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v: gave up before its deadline", name, err)
		}
		st = c.Stats()
		if n := st.Retry("conn-lost") - before; n <= uint64(cfg.MaxRetries) {
			t.Errorf("%s: %d retries, not past MaxRetries %d", name, n, cfg.MaxRetries)
		}
	}
}

// TestServerDown: once the only server is gone, operations of a FailFast
// client fail with typed errors within their retries (or at once, once the
// region table shows the region without a live server): reads with
// ErrUnavailable, writes with ErrUnavailable (nothing could be sent) or
// ErrOutcomeUnknown (a request was on a connection as it broke).
// Client-side reads, whose registrations the server revoked, fall back to
// server-side first.
func TestServerDown(t *testing.T) {
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}} {
			t.Run(mode.String()+"/"+provider, func(t *testing.T) {
				rc := startReal(t, 1, nil)
				cfg := realConfig(t, rc)
				cfg.Mode, cfg.Provider = mode, provider
				cfg.MaxRetries = 4
				cfg.FailFast = true
				c := mustClient(t, cfg)
				mustPut(t, c, 20)
				getAll(t, c, 20)
				if err := rc.servers[0].Close(); err != nil {
					t.Fatal(err)
				}
				ctx := testCtx(t, 10*time.Second)
				start := time.Now()
				// The server left the region table as it closed: an
				// operation that meets the region gone from it fails at
				// once, without retrying, with a RegionUnavailableError.
				down := false
				noted := func(err error) error {
					var ru *RegionUnavailableError
					down = down || errors.As(err, &ru)
					return err
				}
				_, err := c.Get(ctx, key(3))
				if !errors.Is(noted(err), ErrUnavailable) {
					t.Errorf("Get: %v, want ErrUnavailable", err)
				}
				if _, err := c.Contains(ctx, key(3)); !errors.Is(noted(err), ErrUnavailable) {
					t.Errorf("Contains: %v, want ErrUnavailable", err)
				}
				if _, _, err := c.Range(ctx, nil, nil, RangeOptions{}); !errors.Is(noted(err), ErrUnavailable) {
					t.Errorf("Range: %v, want ErrUnavailable", err)
				}
				err = noted(c.Put(ctx, key(3), []byte("x")))
				if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrOutcomeUnknown) {
					t.Errorf("Put: %v, want ErrUnavailable or ErrOutcomeUnknown", err)
				}
				if el := time.Since(start); el > 5*time.Second {
					t.Errorf("failing took %v", el)
				}
				st := c.Stats()
				if st.Retry("conn-lost") == 0 && !down {
					t.Errorf("no conn-lost retries counted, and no region reported down: %v", st.Retries)
				}
				if mode.Kind == locality.ClientOnly && st.Retry("read-failed")+st.Retry("conn-lost") == 0 && !down {
					t.Errorf("no failed one-sided read counted: %v", st.Retries)
				}
			})
		}
	}
}

// TestClose: operations after Close fail with ErrClosed; Close is
// idempotent.
func TestClose(t *testing.T) {
	rc := startReal(t, 1, nil)
	c := mustClient(t, realConfig(t, rc))
	mustPut(t, c, 3)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, time.Second)
	if _, err := c.Get(ctx, key(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if err := c.Put(ctx, key(1), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close: %v", err)
	}
	if _, _, err := c.Range(ctx, nil, nil, RangeOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Range after Close: %v", err)
	}
	// Scan yields the error once, as its only element.
	n := 0
	for kv, err := range c.Scan(ctx, nil, nil, RangeOptions{}) {
		if n++; !errors.Is(err, ErrClosed) || kv.Key != nil {
			t.Errorf("Scan after Close yielded %q, %v", kv.Key, err)
		}
	}
	if n != 1 {
		t.Errorf("Scan after Close yielded %d times, want once", n)
	}
}
