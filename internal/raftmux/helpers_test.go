package raftmux

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// tbWriter sends log lines to t.Log until the test's cleanups have run.
// The lock makes "not done yet, so log" atomic: raft's goroutines may
// outlive the test, and t.Log after the test panics.
type tbWriter struct {
	t    testing.TB
	mu   *sync.Mutex
	done *bool
}

func (w tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !*w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testWriter returns a writer into t.Log, silenced once the test ends.
func testWriter(t testing.TB) tbWriter {
	w := tbWriter{t: t, mu: new(sync.Mutex), done: new(bool)}
	t.Cleanup(func() { // registered first, runs last
		w.mu.Lock()
		*w.done = true
		w.mu.Unlock()
	})
	return w
}

// testLogger logs warnings and errors through t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// mustListen opens a Mux on a free loopback port, closed at cleanup.
func mustListen(t testing.TB, opts Options) *Mux {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	m, err := Listen("127.0.0.1:0", opts)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Mux.Close: %v", err)
		}
	})
	return m
}

// mustGroup opens region's Group on m.
func mustGroup(t testing.TB, m *Mux, region uint32) *Group {
	t.Helper()
	g, err := m.Group(region)
	if err != nil {
		t.Fatalf("Group(%d): %v", region, err)
	}
	return g
}

// patience bounds every wait for something that must happen eventually.
// It is generous on purpose: the machine is shared and runs -race; a test
// fails only if the thing never happens, not if it is slow.
const patience = 30 * time.Second

// waitFor polls cond until it holds, failing the test after patience.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", patience, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawDial opens a plain TCP connection to m, closed at cleanup.
func rawDial(t testing.TB, m *Mux) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", m.Addr().String(), patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readUntilClosed reads c until the peer closes it and returns what it
// read; it fails the test if c stays open for patience.
func readUntilClosed(t testing.TB, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", patience)
	}
	return b
}

// acceptAll accepts connections of g until it is closed and sends each on
// the returned channel.
func acceptAll(g *Group) <-chan net.Conn {
	ch := make(chan net.Conn, 16)
	go func() {
		defer close(ch)
		for {
			c, err := g.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}

// echo copies everything c reads back to it, until c is closed.
func echo(c net.Conn) {
	go func() {
		_, _ = io.Copy(c, c)
		_ = c.Close()
	}()
}

// mustRoundTrip writes msg on c and reads it back (from an echo).
func mustRoundTrip(t testing.TB, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(patience))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
}
