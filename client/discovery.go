package client

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
)

// discoverer lists the servers of the cluster.
type discoverer interface {
	// discover returns the RPC addresses of the servers, the root pointer
	// if the source knows it (nil otherwise), and the remote keys it
	// knows for regions.
	discover(ctx context.Context) (discovery, error)
	// watch calls changed whenever the source's membership, regions or
	// root may have changed, until ctx ends. A source that cannot watch
	// returns at once.
	watch(ctx context.Context, changed func())
	close() error
}

type discovery struct {
	addrs []string
	// idle are the addresses of members that host no region per the
	// region table (a host whose regions were all taken over: dead,
	// paused or cut off, or one that handed its leaderships away).
	// Nil when the discoverer does not know.
	idle []string
	// hosts is each region's host's RPC address per the region table;
	// nil when the discoverer does not know.
	hosts map[uint32]string
	root  blink.Ptr
	keys  map[uint32][]rdma.RemoteKey
	// table says the discoverer read a region table: down and up below
	// are known.
	table bool
	// down are the regions the table shows with no live server: neither
	// their host nor any replica is a live member. Each maps to those
	// servers' IDs.
	down map[uint32][]string
	// up are the other regions of the table.
	up []uint32
}

// staticServers is the discoverer of Config.Servers: the addresses, and
// what each server's metadata says.
type staticServers []string

func (s staticServers) discover(context.Context) (discovery, error) {
	return discovery{addrs: s}, nil
}
func (staticServers) watch(context.Context, func()) {}
func (staticServers) close() error                  { return nil }

// tableDiscovery finds servers in the region table (package regiontable):
// the live members' RPC addresses, the root pointer, and the remote keys
// of every provider each region is registered with (the shm registration
// among them, which a server's metadata does not carry).
type tableDiscovery struct {
	store regiontable.Store
	owned bool // close the store with the client
	retry time.Duration
	// timeout bounds connecting to etcd and each read of the table
	// (Config.EtcdDialTimeout), whatever the caller's context allows.
	timeout time.Duration
	// where names the table in errors: the etcd endpoints, or "".
	where string
}

// connector is a store that can wait for its connection within its dial
// timeout and say why it cannot connect (regiontable.Etcd).
type connector interface {
	Connect(ctx context.Context) error
}

// newTableDiscovery opens the etcd region table of cfg.Endpoints, or uses
// cfg.Store.
func newTableDiscovery(cfg *Config) (*tableDiscovery, error) {
	if cfg.Store != nil {
		return &tableDiscovery{store: cfg.Store, retry: cfg.MaxRetryBackoff, timeout: cfg.EtcdDialTimeout}, nil
	}
	st, err := regiontable.OpenEtcd(cfg.Endpoints, regiontable.EtcdOptions{
		Prefix: cfg.EtcdPrefix, DialTimeout: cfg.EtcdDialTimeout, Logger: cfg.Logger, TLS: cfg.EtcdTLS,
	})
	if err != nil {
		return nil, err
	}
	return &tableDiscovery{store: st, owned: true, retry: cfg.MaxRetryBackoff, timeout: cfg.EtcdDialTimeout,
		where: "etcd at " + strings.Join(cfg.Endpoints, ",")}, nil
}

// load reads the table, within d.timeout whatever ctx allows: first the
// connection (a store that can say why it cannot connect does), then the
// read.
func (d *tableDiscovery) load(ctx context.Context) (regiontable.State, error) {
	if cn, ok := d.store.(connector); ok {
		if err := cn.Connect(ctx); err != nil {
			return regiontable.State{}, err
		}
	}
	lctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	st, err := d.store.Load(lctx)
	if err != nil && ctx.Err() == nil && lctx.Err() != nil {
		where := d.where
		if where == "" {
			where = "the region table"
		}
		return st, fmt.Errorf("%s did not answer a read within %v: %w", where, d.timeout, err)
	}
	return st, err
}

func (d *tableDiscovery) discover(ctx context.Context) (discovery, error) {
	st, err := d.load(ctx)
	if err != nil {
		return discovery{}, err // "regiontable: ..."
	}
	out := discovery{root: st.Root, hosts: make(map[uint32]string, len(st.Regions)), table: true}
	hosts := make(map[string]bool, len(st.Regions))
	rpc := make(map[string]string, len(st.Members))
	live := make(map[string]bool, len(st.Members))
	for _, m := range st.Members {
		rpc[m.ID] = m.RPCAddr
		live[m.ID] = true
	}
	for _, r := range st.Regions {
		hosts[r.Host] = true
		if a := rpc[r.Host]; a != "" {
			out.hosts[r.ID] = a
		}
		if live[r.Host] || slices.ContainsFunc(r.Replicas, func(id string) bool { return live[id] }) {
			out.up = append(out.up, r.ID)
			continue
		}
		if out.down == nil {
			out.down = make(map[uint32][]string)
		}
		servers := append([]string{r.Host}, r.Replicas...)
		slices.Sort(servers)
		out.down[r.ID] = slices.Compact(servers)
	}
	for _, m := range st.Members {
		if m.RPCAddr == "" {
			continue
		}
		out.addrs = append(out.addrs, m.RPCAddr)
		if !hosts[m.ID] && len(st.Regions) > 0 {
			out.idle = append(out.idle, m.RPCAddr)
		}
	}
	for _, r := range st.Regions {
		for _, raw := range r.ReadKey {
			var k rdma.RemoteKey
			if json.Unmarshal(raw, &k) != nil || k.Provider == "" || k.Region != r.ID {
				continue
			}
			if out.keys == nil {
				out.keys = make(map[uint32][]rdma.RemoteKey)
			}
			out.keys[r.ID] = append(out.keys[r.ID], k)
		}
	}
	return out, nil
}

// watch follows the table from a fresh snapshot, and starts over from a
// new one when a watch fails (a compacted revision, etcd unreachable).
// Changes to the servers' marks (draining, and the coordinator's count of
// a missing server, rewritten every few seconds while it is missing) say
// nothing of where regions are: they make no refresh.
func (d *tableDiscovery) watch(ctx context.Context, changed func()) {
	for first := true; ctx.Err() == nil; first = false {
		st, err := d.load(ctx)
		if err == nil {
			if !first {
				changed() // whatever happened while not watching
			}
			for ev := range d.store.Watch(ctx, st.Revision) {
				if ev.Err != nil {
					break
				}
				if ev.Kind == regiontable.DrainSet || ev.Kind == regiontable.MissingSet {
					continue
				}
				changed()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.retry):
		}
	}
}

func (d *tableDiscovery) close() error {
	if d.owned {
		return d.store.Close()
	}
	return nil
}
