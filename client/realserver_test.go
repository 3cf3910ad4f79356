package client

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	cellserver "github.com/cellstore/cell/server"
)

// The real servers: package server's Server (server.New), in process, over
// the in-memory region table, each with its own region in a plain file in
// a test directory, its tcp responder and its shm registrations. Clients
// find them through the table (Config.Store), as they would through etcd.

const testHost = "cell-client-test-host"

type realCluster struct {
	store   regiontable.Store
	servers []*cellserver.Server
	regs    []*prometheus.Registry // each server's metrics
	edit    func(*cellserver.Options)
}

// startReal starts n servers over a fresh memory region table. The first
// creates the root meganode (one leaf meganode holding every key: there
// are no meganode splits yet).
func startReal(t testing.TB, n int, edit func(*cellserver.Options)) *realCluster {
	t.Helper()
	store := regiontable.NewMemory()
	t.Cleanup(func() { _ = store.Close() })
	rc := &realCluster{store: store, edit: edit}
	for range n {
		rc.add(t)
	}
	return rc
}

// startRealWith starts one server publishing in store.
func startRealWith(t testing.TB, rc *realCluster, store regiontable.Store) {
	rc.store = store
	rc.add(t)
}

// add starts one more server.
func (rc *realCluster) add(t testing.TB) *cellserver.Server {
	t.Helper()
	opts := cellserver.Options{
		DataDir:      t.TempDir(),
		Listen:       "127.0.0.1:0",
		RDMAListen:   "127.0.0.1:0",
		RaftListen:   "127.0.0.1:0",
		Store:        rc.store,
		ServerID:     fmt.Sprintf("s%d", len(rc.servers)+1),
		HostID:       testHost,
		RegionSize:   32 << 20,
		MeganodeSize: 4 << 20,
		NodeSize:     512,
		Hugepages:    meganode.HugepagesOff,
		ShmDir:       t.TempDir(),
		Registry:     prometheus.NewRegistry(),
		RegisterWait: 2 * time.Second,
		Logger:       slog.New(slog.DiscardHandler),
	}
	if rc.edit != nil {
		rc.edit(&opts)
	}
	s, err := cellserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("server Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rc.servers = append(rc.servers, s)
	rc.regs = append(rc.regs, opts.Registry)
	return s
}

// counterSum sums the samples of a counter family in reg.
func counterSum(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	return counterSumWhere(t, reg, name, "", "")
}

// counterSumWhere sums the samples of a counter family in reg whose label
// label is value (every sample when label is "").
func counterSumWhere(t testing.TB, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// realConfig is testConfig for a real cluster: servers found in the
// region table, this process on the servers' host (for shm).
func realConfig(t testing.TB, rc *realCluster) Config {
	cfg := testConfig(t, &testCluster{})
	cfg.Servers = nil
	cfg.Store = rc.store
	cfg.HostID = testHost
	return cfg
}
