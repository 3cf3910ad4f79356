package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/rdma"
)

// The etcd key schema the servers publish (regiontable):
//
//	/cell/members/<id>        JSON {ID, RPCAddr, ReadAddr, HostID, Version}, under a lease
//	/cell/regions/<%08d id>   JSON {ID, Kind, Size, Host, Epoch, Path, ReadKey}
//	/cell/root                the root meganode pointer
//
// The client needs only the members' RPC addresses (every server then
// describes its regions in a Metadata reply), the root pointer, and the
// regions' ReadKey when it holds an rdma.RemoteKey (or a list of them) in
// its JSON form, which supplements what Metadata says (the shm
// registration).
const (
	etcdMembersPrefix = "/cell/members/"
	etcdRegionsPrefix = "/cell/regions/"
	etcdRootKey       = "/cell/root"
)

type etcdMember struct {
	ID      json.RawMessage
	RPCAddr string
	HostID  string
}

type etcdRegion struct {
	ID      uint32
	ReadKey json.RawMessage
}

// etcdDiscovery finds servers in etcd.
type etcdDiscovery struct {
	cli *clientv3.Client
}

func newEtcdDiscovery(cfg *Config) (*etcdDiscovery, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.EtcdDialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", cfg.Endpoints, err)
	}
	return &etcdDiscovery{cli: cli}, nil
}

func (d *etcdDiscovery) discover(ctx context.Context) (discovery, error) {
	var out discovery
	resp, err := d.cli.Txn(ctx).Then(
		clientv3.OpGet(etcdMembersPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(etcdRegionsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(etcdRootKey),
	).Commit()
	if err != nil {
		return out, fmt.Errorf("etcd: %w", err)
	}
	members := resp.Responses[0].GetResponseRange().Kvs
	regions := resp.Responses[1].GetResponseRange().Kvs
	roots := resp.Responses[2].GetResponseRange().Kvs
	for _, kv := range members {
		var m etcdMember
		if err := json.Unmarshal(kv.Value, &m); err != nil || m.RPCAddr == "" {
			continue
		}
		out.addrs = append(out.addrs, m.RPCAddr)
	}
	for _, kv := range regions {
		var r etcdRegion
		if err := json.Unmarshal(kv.Value, &r); err != nil || len(r.ReadKey) == 0 {
			continue
		}
		if ks := parseReadKeys(r.ReadKey); len(ks) > 0 {
			if out.keys == nil {
				out.keys = make(map[uint32][]rdma.RemoteKey)
			}
			out.keys[r.ID] = append(out.keys[r.ID], ks...)
		}
	}
	if len(roots) > 0 {
		out.root = parseRoot(roots[0].Value)
	}
	return out, nil
}

// parseReadKeys decodes a region's ReadKey: an rdma.RemoteKey, a list of
// them, or a string holding either. Anything else yields nothing.
func parseReadKeys(raw json.RawMessage) []rdma.RemoteKey {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		raw = []byte(strings.TrimSpace(s))
	}
	if len(raw) == 0 {
		return nil
	}
	if raw[0] == '[' {
		var ks []rdma.RemoteKey
		if json.Unmarshal(raw, &ks) == nil {
			return ks
		}
		return nil
	}
	var k rdma.RemoteKey
	if raw[0] == '{' && json.Unmarshal(raw, &k) == nil && k.Provider != "" {
		return []rdma.RemoteKey{k}
	}
	return nil
}

// parseRoot decodes the root pointer: a decimal or 0x-hex number (bare or
// as a JSON string), a region:offset form as blink.Ptr prints it, or 8
// little-endian bytes. Anything else is nil.
func parseRoot(v []byte) blink.Ptr {
	s := strings.Trim(strings.TrimSpace(string(v)), `"`)
	if n, err := strconv.ParseUint(s, 0, 64); err == nil {
		return blink.Ptr(n)
	}
	if reg, off, ok := strings.Cut(s, ":"); ok {
		r, err1 := strconv.ParseUint(reg, 10, 32)
		o, err2 := strconv.ParseUint(off, 0, 64)
		if err1 == nil && err2 == nil && r <= blink.MaxRegionID && o <= blink.MaxOffset {
			return blink.MakePtr(uint32(r), o)
		}
	}
	if len(v) == 8 {
		return blink.Ptr(binary.LittleEndian.Uint64(v))
	}
	return 0
}

func (d *etcdDiscovery) watch(ctx context.Context, changed func()) {
	ctx = clientv3.WithRequireLeader(ctx)
	members := d.cli.Watch(ctx, etcdMembersPrefix, clientv3.WithPrefix())
	regions := d.cli.Watch(ctx, etcdRegionsPrefix, clientv3.WithPrefix())
	root := d.cli.Watch(ctx, etcdRootKey)
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return
		case resp, ok = <-members:
		case resp, ok = <-regions:
		case resp, ok = <-root:
		}
		if !ok {
			// A watch channel closed (the context ended or the client
			// closed): the periodic refresh goes on without it.
			return
		}
		if resp.Err() == nil && len(resp.Events) > 0 {
			changed()
		}
	}
}

func (d *etcdDiscovery) close() error { return d.cli.Close() }
