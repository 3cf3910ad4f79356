package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cellstore/cell/client"
)

// Bench targets: the same workloads, key generator, values, clients and
// operations in flight, run against Cell (--target cell, the default) or
// against an etcd cluster's KV API (--target etcd), so that the two can be
// measured side by side with one tool. Against etcd a put is a Put, a get
// a Get (linearizable, etcd's default), a search a Get with CountOnly;
// keys are the Cell keys under --etcd-prefix-bench. Every bench client is
// its own clientv3.Client, i.e. its own gRPC connection, as every Cell
// bench client has its own connections.

// Targets.
const (
	targetCell = "cell"
	targetEtcd = "etcd"
)

// benchClient is what the bench workers and the preload call. Methods
// are safe for concurrent use (--in-flight workers share a client). A
// missing key is client.ErrNotFound on every target.
type benchClient interface {
	Put(ctx context.Context, key, value []byte) error
	// GetAppend appends key's value to dst.
	GetAppend(ctx context.Context, dst, key []byte) ([]byte, error)
	// Contains reports whether key is stored, without reading its value.
	Contains(ctx context.Context, key []byte) (bool, error)
	// Range returns the pairs of [start, end) (nil end: unbounded), at
	// most opts.Limit of them (only Limit is used against etcd).
	Range(ctx context.Context, start, end []byte, opts client.RangeOptions) ([]client.KV, []byte, error)
	// Stats are the client's counters; zero for etcd (no meganode hops,
	// no selector, no retries).
	Stats() client.Stats
	Close() error
}

var (
	_ benchClient = (*client.Client)(nil)
	_ benchClient = (*etcdBenchClient)(nil)
)

// openBenchClients connects p.Clients clients to p's target. On error the
// clients already open are closed.
func openBenchClients(ctx context.Context, g *globals, p *benchParams) ([]benchClient, error) {
	var open func() (benchClient, error)
	switch p.Target {
	case targetEtcd:
		open = func() (benchClient, error) {
			return newEtcdBenchClient(ctx, p.EtcdEndpoints, p.EtcdPrefix, g.dialTimeout)
		}
	default:
		base, err := g.clientConfig()
		if err != nil {
			return nil, err
		}
		open = func() (benchClient, error) {
			c, err := client.New(ctx, p.config(base))
			if err != nil {
				return nil, fmt.Errorf("connect to the cluster: %w", err)
			}
			return c, nil
		}
	}
	clients := make([]benchClient, 0, p.Clients)
	for range p.Clients {
		c, err := open()
		if err != nil {
			closeBenchClients(clients)
			return nil, err
		}
		clients = append(clients, c)
	}
	return clients, nil
}

func closeBenchClients(clients []benchClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// etcdBenchClient runs bench operations on an etcd cluster's KV API.
type etcdBenchClient struct {
	cli    *clientv3.Client
	prefix string
}

// newEtcdBenchClient connects to etcd at endpoints and checks that it
// answers (clientv3.New does not wait for a connection).
func newEtcdBenchClient(ctx context.Context, endpoints []string, prefix string, dialTimeout time.Duration) (*etcdBenchClient, error) {
	eps := strings.Join(endpoints, ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", eps, err)
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if dialTimeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, dialTimeout)
	}
	defer cancel()
	if _, err := cli.Get(cctx, prefix, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcd at %s: %w", eps, err)
	}
	return &etcdBenchClient{cli: cli, prefix: prefix}, nil
}

func (e *etcdBenchClient) key(k []byte) string { return e.prefix + string(k) }

func (e *etcdBenchClient) Put(ctx context.Context, key, value []byte) error {
	_, err := e.cli.Put(ctx, e.key(key), string(value))
	return err
}

func (e *etcdBenchClient) GetAppend(ctx context.Context, dst, key []byte) ([]byte, error) {
	resp, err := e.cli.Get(ctx, e.key(key))
	if err != nil {
		return dst, err
	}
	if len(resp.Kvs) == 0 {
		return dst, client.ErrNotFound
	}
	return append(dst, resp.Kvs[0].Value...), nil
}

func (e *etcdBenchClient) Contains(ctx context.Context, key []byte) (bool, error) {
	resp, err := e.cli.Get(ctx, e.key(key), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return resp.Count > 0, nil
}

// Range is a Get of the keys from start on under the prefix, with a limit.
func (e *etcdBenchClient) Range(ctx context.Context, start, end []byte, opts client.RangeOptions) ([]client.KV, []byte, error) {
	rangeEnd := clientv3.GetPrefixRangeEnd(e.prefix)
	if len(end) > 0 {
		rangeEnd = e.key(end)
	}
	resp, err := e.cli.Get(ctx, e.key(start), clientv3.WithRange(rangeEnd), clientv3.WithLimit(int64(opts.Limit)))
	if err != nil {
		return nil, nil, err
	}
	out := make([]client.KV, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, client.KV{Key: kv.Key[len(e.prefix):], Value: kv.Value})
	}
	return out, nil, nil
}

func (e *etcdBenchClient) Stats() client.Stats { return client.Stats{} }

func (e *etcdBenchClient) Close() error { return e.cli.Close() }
