package server

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wal"
	"github.com/cellstore/cell/wire"
)

// docs/design.md §9: "Never acknowledge before the log is synced; after the first
// failed fsync, fail every later write until restart (a later fsync may
// falsely succeed)." Once the log's sync fails, no write is acknowledged
// again, the server reports the failure as fatal, and a restart on a
// healthy disk finds every write acknowledged before it.
func TestLogSyncFailureStopsAcks(t *testing.T) {
	var armed atomic.Bool
	fault := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) && strings.HasSuffix(op.Path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	})
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.TestingKnobs.WALFS = errorfs.Wrap(vfs.Default, fault)
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	for i := range 50 {
		put(t, c, fmt.Sprintf("acked%03d", i), "v")
	}
	armed.Store(true)
	acked := 0
	for i := range 20 {
		_, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte(fmt.Sprintf("after%03d", i)), Value: []byte("v")}, nil)
		if err == nil {
			acked++
		}
	}
	if acked > 0 {
		t.Fatalf("%d writes acknowledged after the log's sync failed", acked)
	}
	if !errors.Is(s1.wal.Err(), wal.ErrSyncFailed) {
		t.Fatalf("the log did not latch: %v", s1.wal.Err())
	}
	select {
	case err := <-s1.fatal:
		if !errors.Is(err, wal.ErrSyncFailed) {
			t.Fatalf("fatal error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not report the failed log as fatal")
	}
	_ = s1.Close() // a closing error is expected: the log refuses writes

	armed.Store(false)
	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	c2 := dial(t, s2)
	for i := range 50 {
		if v, ok := get(t, c2, fmt.Sprintf("acked%03d", i)); !ok || v != "v" {
			t.Fatalf("acknowledged write %d lost after the restart", i)
		}
	}
}
