package regiontable_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogger logs through t.Log until the test's cleanup, and drops records
// of goroutines that outlive it.
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	t    *testing.T
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
