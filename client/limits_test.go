package client

import (
	"bytes"
	"context"
	"log/slog"
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
