package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellstore/cell/drill"
	"github.com/cellstore/cell/regiontable/embedded"
	"github.com/cellstore/cell/wire"
)

// The cluster of cellctl drill --local: an etcd in cellctl's process and
// cellserver processes on loopback, in a temporary directory.

type localCluster struct {
	dir     string
	keep    bool
	etcd    *embedded.Etcd
	servers *drill.ProcessTarget
	log     *slog.Logger
}

// startLocal starts etcd and p.local cellservers, points g at them and
// waits until every region has its replicas.
func startLocal(ctx context.Context, g *globals, p *drillParams, log *slog.Logger) (*localCluster, error) {
	bin, err := findCellserver(p.cellserver)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cell-drill-")
	if err != nil {
		return nil, err
	}
	lc := &localCluster{dir: dir, keep: p.keepLocal, log: log}
	addrs, err := loopbackAddrs(2)
	if err != nil {
		lc.close()
		return nil, err
	}
	lc.etcd, err = embedded.Start(embedded.Options{Dir: filepath.Join(dir, "etcd"), ClientAddr: addrs[0], PeerAddr: addrs[1], Logger: quietLogger})
	if err != nil {
		lc.close()
		return nil, fmt.Errorf("--local: start etcd: %w", err)
	}
	g.endpoints = lc.etcd.Endpoints()
	flags := append(strings.Fields(p.serverFlags), "--replicas", fmt.Sprint(p.replicas), "--etcd-prefix", g.etcdPrefix)
	log.Info("drill: starting local servers", "n", p.local, "dir", dir, "flags", strings.Join(flags, " "))
	lc.servers, err = drill.StartProcesses(ctx, drill.ProcessOptions{Binary: bin, Servers: p.local, Etcd: g.endpoints[0], Flags: flags, Dir: dir})
	if err != nil {
		lc.close()
		return nil, fmt.Errorf("--local: %w", err)
	}
	if err := waitReplicated(ctx, g, p.local, min(p.replicas, p.local)); err != nil {
		lc.close()
		return nil, fmt.Errorf("--local: %w", err)
	}
	return lc, nil
}

// close stops the servers and etcd and removes the directory, unless
// --keep or a server did not stop cleanly.
func (lc *localCluster) close() error {
	var errs []error
	keep := lc.keep
	if lc.servers != nil {
		if err := lc.servers.Close(); err != nil {
			// Keep the logs of a server that did not stop cleanly.
			errs, keep = append(errs, fmt.Errorf("%w (logs kept in %s)", err, lc.dir)), true
		}
	}
	if lc.etcd != nil {
		errs = append(errs, lc.etcd.Close())
	}
	if keep {
		lc.log.Info("drill: local servers' data and logs kept", "dir", lc.dir)
	} else {
		errs = append(errs, os.RemoveAll(lc.dir))
	}
	return errors.Join(errs...)
}

// findCellserver returns the cellserver binary: flag, else next to
// cellctl's executable, else on PATH.
func findCellserver(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if exe, err := os.Executable(); err == nil {
		bin := filepath.Join(filepath.Dir(exe), "cellserver")
		if fi, err := os.Stat(bin); err == nil && !fi.IsDir() {
			return bin, nil
		}
	}
	bin, err := exec.LookPath("cellserver")
	if err != nil {
		return "", fmt.Errorf("--local: no cellserver next to cellctl or on PATH: build both into one directory (go build -o bin/ ./cmd/cellserver ./cmd/cellctl, then bin/cellctl drill), or give --cellserver")
	}
	return bin, nil
}

// loopbackAddrs returns n loopback addresses free a moment ago.
func loopbackAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// waitReplicated waits until the table lists n members and every region
// has replicas voters and no learner.
func waitReplicated(ctx context.Context, g *globals, n, replicas int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, _, err := g.loadTable(ctx)
		ok := err == nil && len(st.Members) == n && len(st.Regions) > 0
		for _, r := range st.Regions {
			ok = ok && len(r.Replicas) == replicas && len(r.Learners) == 0
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("regions not replicated %d ways on %d servers after 2 minutes (%v)", replicas, n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// clusterLocator finds the drill keys' regions from the leaf meganodes
// the servers report, and each region's host from the region table.
type clusterLocator struct{ g *globals }

func (l *clusterLocator) Locate(ctx context.Context, keys []string) (drill.Placement, error) {
	ctx, cancel := context.WithTimeout(ctx, max(l.g.timeout, 5*time.Second))
	defer cancel()
	cl, err := l.g.collectCluster(ctx)
	if err != nil {
		return drill.Placement{}, err
	}
	addr := map[string]string{}
	for _, m := range cl.table.Members {
		addr[m.ID] = m.RPCAddr
	}
	pl := drill.Placement{Region: map[string]uint32{}, Hosts: map[uint32]drill.Member{}}
	for _, r := range cl.table.Regions {
		pl.Hosts[r.ID] = drill.Member{ID: r.Host, Addr: addr[r.Host]}
	}
	var leaves []hosted
	for _, m := range cl.meganodes() {
		if m.Level == 0 && !m.SplitTarget {
			leaves = append(leaves, m)
		}
	}
	for _, k := range keys {
		i := slices.IndexFunc(leaves, func(m hosted) bool { return inRange(&m.Range, []byte(k)) })
		if i >= 0 {
			pl.Region[k] = leaves[i].Ptr.Region()
		}
	}
	return pl, nil
}

// inRange reports whether key is in r.
func inRange(r *wire.KeyRange, key []byte) bool {
	return (r.MinInf || bytes.Compare(r.Min, key) <= 0) && (r.MaxInf || bytes.Compare(key, r.Max) < 0)
}

// writeHistory writes the report's history as JSON.
func writeHistory(path string, r *drill.Report) error {
	b, err := json.Marshal(r.History)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--history: %w", err)
	}
	return nil
}
