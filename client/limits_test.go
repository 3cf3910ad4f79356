package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/regiontable"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a
// handler shared by goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A client given no Logger logs nothing: not to slog.Default(), neither
// itself nor through what it passes the logger to (the tcp one-sided read
// client), even when servers fail under it.
func TestNoLoggerLogsNothing(t *testing.T) {
	rc := startReal(t, 1, nil)
	var buf syncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })

	cfg := realConfig(t, rc)
	cfg.Logger = nil
	cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.ClientOnly}, ProviderTCP
	cfg.MaxRetries, cfg.FailFast = 2, true
	c := mustClient(t, cfg)
	mustPut(t, c, 10)
	getAll(t, c, 10)
	if err := rc.servers[0].Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, key(1)); err == nil {
		t.Error("Get after the only server closed succeeded")
	}
	_ = c.Close()
	if s := buf.String(); s != "" {
		t.Errorf("a client with no Logger wrote to slog.Default():\n%s", s)
	}
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// New with etcd down and a context without deadline returns after
// EtcdDialTimeout, with an error naming the endpoint and why it could not
// be reached, not a bare "context deadline exceeded".
func TestNewEtcdDownBoundedByDialTimeout(t *testing.T) {
	ep := refusedAddr(t)
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"EtcdDialTimeout", func(c *Config) { c.EtcdDialTimeout = 500 * time.Millisecond }},
		{"DialTimeout", func(c *Config) { c.DialTimeout = 500 * time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Endpoints: []string{ep}, Logger: testLogger(t)}
			tc.edit(&cfg)
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				c, err := New(context.Background(), cfg)
				if c != nil {
					_ = c.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("New with etcd down and no deadline still waits after 20 s")
			}
			el := time.Since(start)
			t.Logf("New failed after %v: %v", el.Round(time.Millisecond), err)
			if el > 5*time.Second {
				t.Errorf("New took %v with a 500ms dial timeout", el)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("New: %v, want ErrUnavailable", err)
			}
			if msg := fmt.Sprint(err); !strings.Contains(msg, ep) || !strings.Contains(msg, "connection refused") ||
				strings.Contains(msg, "deadline exceeded") {
				t.Errorf("New: %q, want the endpoint %s and connection refused, without deadline exceeded", msg, ep)
			}
		})
	}
}

// retriesTotal sums the client's retries of every cause.
func retriesTotal(c *Client) uint64 {
	st := c.Stats()
	var n uint64
	for _, name := range causeNames {
		n += st.Retry(name)
	}
	return n
}

// deadRegionCluster is a fixture cluster of two servers, regions 1 and 2,
// published in a memory region table as members f1 and f2, keys 0..99
// spread over both (leaves of keys 0-24 and 50-74 on region 1, 25-49 and
// 75-99 on region 2).
type deadRegionCluster struct {
	cl    *testCluster
	store *regiontable.Memory
	regs  []regiontable.Registration
}

func startDeadRegionCluster(t *testing.T) *deadRegionCluster {
	t.Helper()
	d := &deadRegionCluster{cl: newTestCluster(t, clusterSpec{servers: 2, splits: splitsFor(100, 4)}), store: regiontable.NewMemory()}
	t.Cleanup(func() { _ = d.store.Close() })
	ctx := testCtx(t, 10*time.Second)
	for i, s := range d.cl.servers {
		id := fmt.Sprintf("f%d", i+1)
		reg, err := d.store.RegisterMember(ctx, regiontable.Member{ID: id, RPCAddr: s.addr(), ReadAddr: s.addr(), HostID: testHost})
		if err != nil {
			t.Fatal(err)
		}
		d.regs = append(d.regs, reg)
		if err := d.store.PutRegion(ctx, regiontable.Region{ID: uint32(i + 1), Kind: regiontable.KindData, Size: 24 << 20, Host: id, Epoch: 1, Term: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// config is a client config finding the cluster in the table.
func (d *deadRegionCluster) config(t *testing.T) Config {
	cfg := testConfig(t, d.cl)
	cfg.Servers, cfg.Store = nil, d.store
	return cfg
}

// kill stops server i and ends its membership, as a dead server's lease
// expiring does.
func (d *deadRegionCluster) kill(t *testing.T, i int) {
	t.Helper()
	if err := d.regs[i].Close(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	d.cl.servers[i].stop()
}

// deadKey and liveKey are keys of region 2 and of region 1.
func deadKey(i int) []byte { return key(25 + i%25) }
func liveKey(i int) []byte { return key(i % 25) }

// An operation on a key whose region has no live server (the region
// table lists none of its hosts as a member) fails at once with a
// RegionUnavailableError naming the region, even with a deadline to wait
// within and FailFast off; a range crossing it names it too. Operations
// on other regions' keys go on, without retries. A region whose server
// the client saw leave only RestartGrace ago is waited for within the
// deadline, as for a restart, and reported after the grace; one whose
// host left but whose replica lives (a leader in transition) is waited
// for too.
func TestDeadRegionFailsAtOnce(t *testing.T) {
	d := startDeadRegionCluster(t)
	cfg := d.config(t)
	cfg.RestartGrace = -1 // fail as soon as the table shows it
	c := mustClient(t, cfg)
	mustPut(t, c, 100)
	getAll(t, c, 100)
	graceCfg := d.config(t)
	graceCfg.RestartGrace = 300 * time.Millisecond
	cg := mustClient(t, graceCfg)
	getAll(t, cg, 100)

	d.kill(t, 1)
	// The client follows the table: wait until it saw region 2 go, so
	// that no write is sent to the dead server on a connection it has not
	// seen break yet (an unknown outcome, not what this test is about).
	waitFor(t, 5*time.Second, "the client to drop region 2", func() bool { return c.topo.Load().regions[2] == nil })

	wantDead := func(t *testing.T, what string, err error, el time.Duration) {
		t.Helper()
		var ru *RegionUnavailableError
		if !errors.As(err, &ru) || ru.Region != 2 || !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v (after %v), want a RegionUnavailableError of region 2", what, err, el)
			return
		}
		if el > 2*time.Second {
			t.Errorf("%s: failed after %v, not at once", what, el)
		}
		if msg := err.Error(); !strings.Contains(msg, "region 2") || strings.Contains(msg, "discovery") || strings.Contains(msg, "deadline") {
			t.Errorf("%s: %q, want region 2 named, no discovery or deadline", what, msg)
		}
	}
	op := func(c *Client, f func(ctx context.Context) error) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		return time.Since(start), err
	}

	t.Run("ops", func(t *testing.T) {
		for i := range 3 {
			el, err := op(c, func(ctx context.Context) error { _, err := c.Get(ctx, deadKey(i)); return err })
			wantDead(t, "Get", err, el)
			el, err = op(c, func(ctx context.Context) error { _, err := c.Contains(ctx, deadKey(i)); return err })
			wantDead(t, "Contains", err, el)
			el, err = op(c, func(ctx context.Context) error { return c.Put(ctx, deadKey(i), []byte("x")) })
			wantDead(t, "Put", err, el)
			el, err = op(c, func(ctx context.Context) error { return c.Delete(ctx, deadKey(i)) })
			wantDead(t, "Delete", err, el)
		}
		el, err := op(c, func(ctx context.Context) error { _, _, err := c.Range(ctx, nil, nil, RangeOptions{}); return err })
		wantDead(t, "Range over everything", err, el)
		el, err = op(c, func(ctx context.Context) error {
			_, _, err := c.Range(ctx, key(10), key(60), RangeOptions{})
			return err
		})
		wantDead(t, "Range from region 1 across region 2", err, el)
		el, err = op(c, func(ctx context.Context) error {
			_, _, err := c.Range(ctx, key(10), key(20), RangeOptions{})
			return err
		})
		if err != nil {
			t.Errorf("Range within region 1: %v (after %v)", err, el)
		}
	})

	t.Run("others not slowed", func(t *testing.T) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := c.Get(ctx, deadKey(i))
					cancel()
					var ru *RegionUnavailableError
					if !errors.As(err, &ru) {
						t.Errorf("Get of a dead region's key: %v", err)
						return
					}
				}
			})
		}
		ctx := testCtx(t, 20*time.Second)
		for i := range 200 {
			start := time.Now()
			if v, err := c.Get(ctx, liveKey(i)); err != nil || !bytes.Equal(v, value(i%25, 0)) {
				t.Fatalf("Get %s = %q, %v", liveKey(i), v, err)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("Get %s of a live region took %v", liveKey(i), el)
			}
		}
		close(stop)
		wg.Wait()
		// Alone, live keys take no retry at all.
		before := retriesTotal(c)
		for i := range 25 {
			if err := c.Put(ctx, liveKey(i), value(i, 0)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := c.Range(ctx, key(0), key(25), RangeOptions{}); err != nil {
			t.Fatal(err)
		}
		if n := retriesTotal(c) - before; n != 0 {
			t.Errorf("%d retries of operations on a live region: %v", n, c.Stats().Retries)
		}
	})

	t.Run("fresh client", func(t *testing.T) {
		// A client that never saw the region served (a new process, a
		// cellctl command) does not wait for it, whatever the grace.
		fresh := d.config(t)
		cf := mustClient(t, fresh)
		el, err := op(cf, func(ctx context.Context) error { _, err := cf.Get(ctx, deadKey(1)); return err })
		wantDead(t, "Get of a fresh client", err, el)
		t.Logf("Get of a fresh client: %v", err)
		el, err = op(cf, func(ctx context.Context) error {
			_, _, err := cf.Range(ctx, key(30), key(40), RangeOptions{})
			return err
		})
		wantDead(t, "Range within region 2 of a fresh client", err, el)
		if v, err := cf.Get(testCtx(t, 5*time.Second), liveKey(1)); err != nil || !bytes.Equal(v, value(1, 0)) {
			t.Errorf("Get %s = %q, %v", liveKey(1), v, err)
		}
	})

	t.Run("grace", func(t *testing.T) {
		// The grace client saw region 2 served: it waits for it to come
		// back for RestartGrace since the table showed it gone, then
		// reports it.
		var ru *RegionUnavailableError
		waitFor(t, 5*time.Second, "the grace to end", func() bool {
			el, err := op(cg, func(ctx context.Context) error { _, err := cg.Get(ctx, deadKey(2)); return err })
			if el > 2*time.Second {
				t.Errorf("Get waited %v with a 300ms grace", el)
			}
			return errors.As(err, &ru)
		})
		if ru.Since.IsZero() {
			t.Errorf("%v: no Since, though the client saw the region served", ru)
		}
	})

	t.Run("leader in transition", func(t *testing.T) {
		// Region 2's host is gone but a replica lives: a failover, not an
		// outage. Operations wait within their deadlines.
		ctx := testCtx(t, 5*time.Second)
		if err := d.store.PutRegion(ctx, regiontable.Region{ID: 2, Kind: regiontable.KindData, Size: 24 << 20, Host: "f2", Epoch: 2, Term: 2,
			Replicas: []string{"f1", "f2"}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the client to see region 2's replica", func() bool { return c.regionDown(2) == nil })
		octx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := c.Get(octx, deadKey(3))
		var ru *RegionUnavailableError
		if errors.As(err, &ru) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get in a region whose replica lives: %v, want to wait until the deadline", err)
		}
	})
}
