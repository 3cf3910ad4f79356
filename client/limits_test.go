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
