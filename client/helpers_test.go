package client

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
)

// testLogger logs through t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testConfig returns a client config for cl: caches on with upper nodes of
// leaf meganodes cacheable (test trees are shallow), fast retries and a
// fixed selector seed.
func testConfig(t testing.TB, cl *testCluster) Config {
	return Config{
		Servers:           cl.addrs(),
		NodeCacheMinLevel: 1,
		RetryBackoff:      100 * time.Microsecond,
		MaxRetryBackoff:   5 * time.Millisecond,
		Selector:          locality.Options{Seed: 1},
		Logger:            testLogger(t),
	}
}

// mustClient returns a client for cfg, closed at cleanup.
func mustClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testCtx returns a context that ends after d (and at cleanup).
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func key(i int) []byte { return fmt.Appendf(nil, "key-%06d", i) }

// value returns version v of key i's value, of a length that varies with
// both (so that records are reallocated as they change).
func value(i, v int) []byte {
	b := fmt.Appendf(nil, "%s=%d:", key(i), v)
	for n := (i*7 + v*13) % 61; n > 0; n-- {
		b = append(b, byte('a'+n%26))
	}
	return b
}

// mustPut puts n keys with version 0 values.
func mustPut(t testing.TB, c *Client, n int) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	for i := range n {
		if err := c.Put(ctx, key(i), value(i, 0)); err != nil {
			t.Fatalf("Put %s: %v", key(i), err)
		}
	}
}

// splitsFor returns split keys dividing key(0..n) into parts ranges.
func splitsFor(n, parts int) []string {
	var s []string
	for p := 1; p < parts; p++ {
		s = append(s, string(key(n*p/parts)))
	}
	return s
}

var allModes = []locality.Mode{
	{Kind: locality.Adaptive},
	{Kind: locality.ServerOnly},
	{Kind: locality.ClientOnly},
	locality.RatioMode(50),
}
