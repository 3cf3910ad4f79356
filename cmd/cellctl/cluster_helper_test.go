package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
	"github.com/cellstore/cell/server"
)

// The tests that need a cluster share one, started on first use: an
// embedded etcd and one cellserver (package server, in process) on
// loopback ports, with every file in a temporary directory (regions in
// plain files there, no hugepages, the shm directory there too), all
// removed by TestMain. Tests use their own key prefixes.

var shared struct {
	once     sync.Once
	dir      string
	endpoint string // etcd's client address
	srv      *server.Server
	store    regiontable.Store
	etcd     *embedded.Etcd
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		_ = shared.srv.Close()
	}
	if shared.store != nil {
		_ = shared.store.Close()
	}
	if shared.etcd != nil {
		_ = shared.etcd.Close()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// testCluster returns the etcd endpoint of the shared cluster, starting it
// on first use.
func testCluster(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() { shared.err = startShared(t) })
	if shared.err != nil {
		t.Fatalf("test cluster: %v", shared.err)
	}
	return shared.endpoint
}

func startShared(t *testing.T) error {
	dir, err := os.MkdirTemp("", "cellctl-test-")
	if err != nil {
		return err
	}
	shared.dir = dir
	for i := range 3 { // a port may be taken between deadAddr and etcd's listen
		shared.etcd, err = embedded.Start(embedded.Options{Dir: filepath.Join(dir, fmt.Sprint("etcd", i)), ClientAddr: deadAddr(t), PeerAddr: deadAddr(t), Logger: quietLogger})
		if err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	eps := shared.etcd.Endpoints()
	shared.endpoint = eps[0]
	store, err := regiontable.OpenEtcd(eps, regiontable.EtcdOptions{Prefix: regiontable.DefaultPrefix, Logger: quietLogger})
	if err != nil {
		return err
	}
	shared.store = store
	for _, sub := range []string{"data", "shm"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	srv, err := server.New(server.Options{
		DataDir:      filepath.Join(dir, "data"),
		Listen:       "127.0.0.1:0",
		RDMAListen:   "127.0.0.1:0",
		RaftListen:   "127.0.0.1:0",
		Store:        store,
		ServerID:     "s1",
		RegionSize:   32 << 20,
		MeganodeSize: 4 << 20,
		NodeSize:     512,
		Hugepages:    meganode.HugepagesOff,
		ShmDir:       filepath.Join(dir, "shm"),
		Registry:     prometheus.NewRegistry(),
		RegisterWait: 2 * time.Second,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("server start: %w", err)
	}
	shared.srv = srv
	return nil
}

// runAt runs cellctl against the shared cluster with stdin.
func runAt(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ep := testCluster(t)
	return runCellctlIn(stdin, append(args, "--endpoints", ep)...)
}
