package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/wire"
)

// Client is a connection to a Cell store. It is safe for concurrent use by
// any number of goroutines; operations in flight share a few pipelined
// connections per server. Close releases it.
type Client struct {
	cfg      Config
	log      *slog.Logger
	sel      *locality.Selector
	sysClock bool           // the selector reads the system clock (observe.go)
	selClock locality.Clock // the selector's clock
	base     time.Time      // time.Now at New: mono readings count from it
	metrics  *Metrics
	counters counters
	nodes    *nodeCache
	paths    *pathCache
	disc     discoverer
	hostID   string
	tcp      *rdma.TCPClient // nil unless the provider may use tcp
	shm      *rdma.SHMClient // nil unless the provider may use shm
	fabric   rdma.Client     // nil unless the provider is fabric

	// clientID and seq tag writes for at-most-once application
	// (docs/design.md §9): a write retried after an error that proves it was not
	// executed keeps its id and sequence number. The id changes when a
	// region answers that it forgot it (write.go, the seq-passed retry).
	clientID atomic.Uint64
	seq      atomic.Uint64

	topo       atomic.Pointer[topology]
	refreshSem chan struct{} // one refresh at a time
	// lastRefresh is the last refresh's outcome. REQUIRES: refreshSem held.
	lastRefresh struct {
		at      time.Time
		err     error
		failing bool
	}
	kick chan struct{} // asks refreshLoop for a refresh soon
	// down are the regions the region table showed with no live server
	// at the last discovery (nil: none, or no table); see regionDown.
	down atomic.Pointer[map[uint32]downRegion]
	// servedRegions are the regions a discovery showed with a live
	// server. REQUIRES: refreshSem held.
	servedRegions map[uint32]bool
	// dialWire connects to a server: wire.Dial (tests replace it).
	dialWire func(ctx context.Context, addr string, opts *wire.Options) (*wire.Conn, error)

	scratch sync.Pool // *opScratch

	closing chan struct{} // closed by Close
	closed  atomic.Bool
	wg      sync.WaitGroup // background goroutines

	mu struct {
		sync.Mutex
		servers map[string]*server // by RPC address
		nextID  locality.ServerID
		// leaders are addresses servers redirected to, asked for their
		// metadata at every refresh as well as the discovered ones.
		leaders map[string]bool
	}
}

// New connects to the store cfg describes: it finds the servers (from etcd
// or Config.Servers), asks each for its regions, and returns once at least
// one answered, or fails when ctx ends first or none could be reached
// (ErrUnavailable). Its wait is bounded by the dial timeouts even when
// ctx has no deadline: EtcdDialTimeout for connecting to etcd and reading
// the region table, DialTimeout (at most 1 s) for each server's answer.
// Config errors wrap ErrInvalidConfig.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TLS != nil {
		var w wire.Options
		if cfg.Wire != nil {
			w = *cfg.Wire
		}
		w.TLS = cfg.TLS
		cfg.Wire = &w
	}
	sel, err := locality.NewSelector(cfg.selectorOptions())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c := &Client{
		cfg:           cfg,
		log:           cfg.Logger,
		sel:           sel,
		sysClock:      sel.Options().Clock == locality.SystemClock,
		selClock:      sel.Options().Clock,
		base:          time.Now(),
		hostID:        cfg.HostID,
		refreshSem:    make(chan struct{}, 1),
		servedRegions: make(map[uint32]bool),
		kick:          make(chan struct{}, 1),
		dialWire:      wire.Dial,
		closing:       make(chan struct{}),
	}
	c.clientID.Store(randomID())
	c.mu.servers = make(map[string]*server)
	c.mu.leaders = make(map[string]bool)
	c.nodes = newNodeCache(cfg.NodeCacheBytes, &c.counters.node)
	c.paths = newPathCache(cfg.PathCacheEntries, &c.counters.path)
	if c.hostID == "" {
		if c.hostID, err = rdma.HostID(); err != nil {
			c.log.Warn("cell client: no host identity, shared memory reads disabled", slog.Any("error", err))
		}
	}
	if err := c.openProviders(); err != nil {
		return nil, err
	}
	if len(cfg.Servers) > 0 {
		c.disc = staticServers(cfg.Servers)
	} else {
		d, err := newTableDiscovery(&c.cfg)
		if err != nil {
			c.closeProviders()
			return nil, wrapErr(ErrUnavailable, err)
		}
		c.disc = d
	}
	if cfg.Registerer != nil {
		c.metrics = NewMetrics(cfg.Registerer)
		if err := c.metrics.register(c); err != nil {
			c.shutdown()
			return nil, fmt.Errorf("cell client: metrics: %w", err)
		}
	}
	if err := c.refresh(ctx, 0); err != nil {
		c.shutdown()
		return nil, err
	}
	c.wg.Add(1)
	go c.refreshLoop()
	return c, nil
}

// openProviders creates the one-sided read clients the provider may use.
func (c *Client) openProviders() error {
	var err error
	if c.cfg.Provider == ProviderFabric {
		if c.fabric, err = rdma.NewClient(rdma.ClientConfig{Provider: rdma.ProviderFabric, Fabric: c.cfg.Fabric}); err != nil {
			return fmt.Errorf("%w: fabric provider: %w", ErrInvalidConfig, err)
		}
		return nil
	}
	if c.cfg.Provider != ProviderSHM {
		if c.tcp, err = rdma.NewTCPClient(c.cfg.TCP); err != nil {
			return fmt.Errorf("%w: tcp provider: %w", ErrInvalidConfig, err)
		}
	}
	if c.cfg.Provider != ProviderTCP && c.hostID != "" {
		o := c.cfg.SHM
		o.Host = c.hostID
		if c.shm, err = rdma.NewSHMClient(o); err != nil {
			c.closeProviders()
			return fmt.Errorf("%w: shm provider: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

func (c *Client) closeProviders() {
	if c.tcp != nil {
		_ = c.tcp.Close()
	}
	if c.shm != nil {
		_ = c.shm.Close()
	}
	if c.fabric != nil {
		_ = c.fabric.Close()
	}
}

func randomID() uint64 {
	var b [8]byte
	for {
		_, _ = crand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// Close closes the client: operations in flight fail (ErrClosed, or
// ErrOutcomeUnknown for writes already sent) and later ones fail with
// ErrClosed. Closing twice is a no-op.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.shutdown()
	return nil
}

func (c *Client) shutdown() {
	c.closed.Store(true)
	close(c.closing)
	if c.disc != nil {
		_ = c.disc.close()
	}
	c.wg.Wait()
	c.mu.Lock()
	servers := make([]*server, 0, len(c.mu.servers))
	for _, s := range c.mu.servers {
		servers = append(servers, s)
	}
	c.mu.Unlock()
	for _, s := range servers {
		s.close()
	}
	c.closeProviders()
	if c.metrics != nil && c.metrics.reg != nil {
		c.metrics.unregister()
	}
}

func (c *Client) isClosed() bool { return c.closed.Load() }

// Get returns the value of key, or an error wrapping ErrNotFound.
func (c *Client) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := c.GetAppend(ctx, nil, key)
	if err == nil && v == nil {
		v = []byte{}
	}
	return v, err
}

// GetAppend appends the value of key to dst and returns the extended
// slice (dst unchanged on error). With enough capacity in dst, a
// client-side get does not allocate.
func (c *Client) GetAppend(ctx context.Context, dst, key []byte) ([]byte, error) {
	start := c.now()
	res, err := c.search(ctx, opGet, key, dst, start)
	c.finish(opGet, res.method, start, err)
	if err != nil {
		return dst, err
	}
	if !res.found {
		return dst, errNotFound
	}
	return res.value, nil
}

// GetKV returns key's value and version (docs/transactions.md §2), or an
// error wrapping ErrNotFound. The value and version are of one moment: a
// one-sided read takes both from one validated copy of the leaf; a leaf
// whose version only its server knows (one written before the region had
// versions) is read server-side. KV.Key is a copy of key.
func (c *Client) GetKV(ctx context.Context, key []byte) (KV, error) {
	start := c.now()
	res, err := c.searchOp(ctx, opGet, key, nil, start, searchFlags{version: true})
	c.finish(opGet, res.method, start, err)
	if err != nil {
		return KV{}, err
	}
	if !res.found {
		return KV{}, errNotFound
	}
	v := res.value
	if v == nil {
		v = []byte{}
	}
	return KV{Key: bytes.Clone(key), Value: v, Version: res.version}, nil
}

// Contains reports whether key is in the store. Like Get it searches
// meganode by meganode with the selector's choice, but fetches no value.
func (c *Client) Contains(ctx context.Context, key []byte) (bool, error) {
	start := c.now()
	res, err := c.search(ctx, opContains, key, nil, start)
	c.finish(opContains, res.method, start, err)
	return res.found, err
}

// Put stores value under key, replacing any previous value. Writes are
// done by the server that holds the key's leaf meganode. An error wrapping
// ErrOutcomeUnknown means the put may or may not have been applied; other
// errors mean it was not.
func (c *Client) Put(ctx context.Context, key, value []byte) error {
	start := time.Now()
	err := c.write(ctx, opPut, key, value)
	c.finish(opPut, locality.ServerSide, start, err)
	return err
}

// Delete removes key; an error wrapping ErrNotFound means it was not
// there. ErrOutcomeUnknown as for Put.
func (c *Client) Delete(ctx context.Context, key []byte) error {
	start := time.Now()
	err := c.write(ctx, opDelete, key, nil)
	c.finish(opDelete, locality.ServerSide, start, err)
	return err
}

// finish counts one operation and records its latency.
func (c *Client) finish(k opKind, path locality.Method, start time.Time, err error) {
	c.counters.ops[k][path&1].Add(1)
	if err != nil && !errors.Is(err, ErrNotFound) {
		c.counters.errors[k].Add(1)
	}
	c.metrics.observe(k, path, time.Since(start))
}

// checkKey validates a key against the store's limit.
func checkKey(t *topology, key []byte) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > t.maxKey:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), t.maxKey)
	}
	return nil
}

// checkValue validates a value against the store's limit (docs/design.md §2).
func checkValue(value []byte) error {
	if len(value) > wire.MaxValueSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(value), wire.MaxValueSize)
	}
	return nil
}

// opScratch holds the buffers of one operation; pooled.
type opScratch struct {
	node []byte // one node, for one-sided node reads
	rec  []byte // one extent record
	body []byte // an encoded request
}

// maxPooledBuffer bounds the buffers kept in the scratch pool.
const maxPooledBuffer = 64 << 10

func (c *Client) getScratch(nodeSize int) *opScratch {
	s, _ := c.scratch.Get().(*opScratch)
	if s == nil {
		s = &opScratch{}
	}
	if len(s.node) != nodeSize {
		s.node = make([]byte, nodeSize)
	}
	return s
}

func (c *Client) putScratch(s *opScratch) {
	if cap(s.rec) > maxPooledBuffer {
		s.rec = nil
	}
	if cap(s.body) > maxPooledBuffer {
		s.body = nil
	}
	c.scratch.Put(s)
}
