package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/raftmux"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// testLogger logs through t.Log until the test's cleanup and drops records
// of goroutines that outlive it.
func testLogger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// raftNet carries the raft traffic of every server the package's tests
// start: they test replicas and groups, not the network, and open no
// socket for raft (the process-level tests in package test keep TCP).
var raftNet = &raftmux.MemNetwork{}

// testOptions are options of a small server on loopback ports with its
// region in a plain file under a temporary data directory, its raft
// traffic over raftNet.
func testOptions(t testing.TB, store regiontable.Store) Options {
	return Options{
		TestingKnobs: TestingKnobs{RaftNetwork: raftNet},
		DataDir:      t.TempDir(),
		Listen:       "127.0.0.1:0",
		RDMAListen:   "127.0.0.1:0",
		RaftListen:   "127.0.0.1:0",
		Store:        store,
		ServerID:     "test-1",
		HostID:       "test-host",
		RegionSize:   32 << 20,
		MeganodeSize: 1 << 20,
		Hugepages:    meganode.HugepagesOff,
		ShmDir:       t.TempDir(),
		Registry:     prometheus.NewRegistry(),
		RegisterWait: 2 * time.Second,
		Logger:       testLogger(t),
	}
}

// startServer starts a server with opts (Registry and Logger filled in if
// missing) and closes it at cleanup.
func startServer(t testing.TB, opts Options) *Server {
	t.Helper()
	s := startUnclosed(t, opts)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// startUnclosed starts a server with opts that the test closes itself.
func startUnclosed(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s
}

// newTestServer starts a server over a fresh memory region table.
func newTestServer(t testing.TB, edit ...func(*Options)) (*Server, *regiontable.Memory) {
	t.Helper()
	store := regiontable.NewMemory()
	t.Cleanup(func() { _ = store.Close() })
	opts := testOptions(t, store)
	for _, e := range edit {
		e(&opts)
	}
	return startServer(t, opts), store
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// opTimeout bounds one operation of a test. A loop of many operations
// gives each its own deadline, not one to all: thousands of replicated
// puts under the race detector on a loaded machine outlast any deadline
// short enough to report a hang.
const opTimeout = 20 * time.Second

// opCall runs f with a context of its own, opTimeout long.
func opCall(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return f(ctx)
}

// dial opens a wire connection to s, closed at cleanup.
func dial(t testing.TB, s *Server) *wire.Conn {
	t.Helper()
	c, err := wire.Dial(ctxT(t), s.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// call sends req and decodes the reply into rep (nil: expect an empty
// body, or for a write a WriteReply, which is checked). It returns the
// call's error and the reply header.
func call(t testing.TB, c *wire.Conn, op wire.Op, req, rep wire.Message) (wire.Header, error) {
	t.Helper()
	f, err := c.CallMessage(ctxT(t), op, req)
	defer f.Release()
	if err != nil {
		return f.Header, err
	}
	if rep == nil && op.IsWrite() && (op == wire.OpPut || op == wire.OpDelete) {
		var wr wire.WriteReply
		if err := wr.Decode(f.Body); err != nil {
			t.Fatalf("%v: decode write reply: %v", op, err)
		}
		return f.Header, nil
	}
	if rep == nil {
		if len(f.Body) != 0 {
			t.Fatalf("%v: %d-byte body, want none", op, len(f.Body))
		}
		return f.Header, nil
	}
	// Decode a copy: the frame's buffer goes back to its pool on return.
	if err := rep.Decode(bytes.Clone(f.Body)); err != nil {
		t.Fatalf("%v: decode reply: %v", op, err)
	}
	return f.Header, nil
}

func put(t testing.TB, c *wire.Conn, key, value string) {
	t.Helper()
	if _, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte(key), Value: []byte(value)}, nil); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

// del deletes key, failing the test unless it was there.
func del(t testing.TB, c *wire.Conn, key string) {
	t.Helper()
	if _, err := call(t, c, wire.OpDelete, &wire.DeleteRequest{Key: []byte(key)}, nil); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
}

// crashForTest stops s as a crash would leave its data directory: no
// snapshot at the end, so the next start replays the log.
func (s *Server) crashForTest(t testing.TB) {
	t.Helper()
	s.opts.TestingKnobs.NoSnapshotOnClose = true
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// get returns the value of key; found is false on NotFound. The value is
// a copy.
func get(t testing.TB, c *wire.Conn, key string) (string, bool) {
	t.Helper()
	var rep wire.GetReply
	f, err := c.CallMessage(ctxT(t), wire.OpGet, &wire.GetRequest{Key: []byte(key)})
	defer f.Release()
	if errors.Is(err, wire.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if err := rep.Decode(f.Body); err != nil {
		t.Fatal(err)
	}
	return string(rep.Value), true
}

func wantStatus(t testing.TB, err error, st wire.Status) {
	t.Helper()
	if got := wire.StatusOf(err); got != st || err == nil && st != wire.StatusOK {
		t.Fatalf("error %v has status %v, want %v", err, got, st)
	}
}

// rootTree returns the tree of the server's root meganode.
func rootTree(t testing.TB, s *Server) *blink.Tree {
	t.Helper()
	lm := s.servedMeganode(s.Root())
	if lm == nil {
		t.Fatalf("root %v is not a local meganode", s.Root())
	}
	return lm.T
}

// gather returns the server's metric families by name.
func gather(t testing.TB, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := s.opts.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// metricValue returns the value of the metric of family name whose labels
// include labels (-1 if none).
func metricValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range labels {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}
