package regiontable_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// Connect bounds the wait for etcd by the store's DialTimeout even when
// its context has none, and says which endpoint failed and why; with etcd
// up it returns at once.
func TestEtcdConnect(t *testing.T) {
	down := freeAddr(t) // nothing listens there
	s, err := regiontable.OpenEtcd([]string{"http://" + down}, regiontable.EtcdOptions{DialTimeout: 300 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	err = s.Connect(context.Background())
	el := time.Since(start)
	t.Logf("Connect failed after %v: %v", el.Round(time.Millisecond), err)
	if !errors.Is(err, regiontable.ErrUnreachable) {
		t.Errorf("Connect: %v, want ErrUnreachable", err)
	}
	if msg := err.Error(); !strings.Contains(msg, down+": connection refused") || !strings.Contains(msg, "within 300ms") {
		t.Errorf("Connect: %q, want %s: connection refused, within 300ms", msg, down)
	}
	if el > 3*time.Second {
		t.Errorf("Connect took %v with a 300ms dial timeout", el)
	}
	// A caller's deadline shorter than the dial timeout ends it first.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Connect(ctx); !errors.Is(err, regiontable.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Connect with a shorter deadline: %v, want regiontable.ErrUnreachable and DeadlineExceeded", err)
	}
	// A call that times out unconnected says so.
	lctx, lcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer lcancel()
	if _, err := s.Load(lctx); err == nil || !strings.Contains(err.Error(), "not connected to etcd at http://"+down) ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Load with etcd down: %v, want not connected to etcd at %s, and DeadlineExceeded", err, down)
	}

	if testing.Short() {
		return
	}
	e := startEtcd(t)
	up, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if err := up.Connect(context.Background()); err != nil {
		t.Fatalf("Connect to a running etcd: %v", err)
	}
	if err := up.Connect(context.Background()); err != nil {
		t.Fatalf("Connect again: %v", err)
	}
}
