package client

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// Provider names accepted by Config.Provider.
const (
	// ProviderAuto reads a region over shared memory when its server runs
	// on this host (same host identity) and the region file is readable,
	// and over TCP otherwise.
	ProviderAuto = "auto"
	// ProviderTCP reads regions through the servers' TCP responders.
	ProviderTCP = rdma.ProviderTCP
	// ProviderSHM maps region files read-only; regions of servers on
	// other hosts are then searched server-side only.
	ProviderSHM = rdma.ProviderSHM
	// ProviderFabric reads regions over libfabric (RDMA NICs through
	// verbs, efa or cxi; or tcp, shm), from servers started with
	// --provider fabric and the same libfabric provider (Config.Fabric);
	// other regions are searched server-side only. Needs a build with
	// -tags libfabric.
	ProviderFabric = rdma.ProviderFabric
)

// Defaults of Config.
const (
	DefaultNodeCacheBytes    = 128 << 20
	DefaultNodeCacheMinLevel = 4
	DefaultPathCacheEntries  = 4096
	DefaultConnsPerServer    = 2
	DefaultDialTimeout       = 5 * time.Second
	DefaultMaxRetries        = 16
	DefaultMaxRestarts       = 1 << 16
	DefaultRetryBackoff      = time.Millisecond
	DefaultMaxRetryBackoff   = 100 * time.Millisecond
	DefaultRefreshInterval   = 30 * time.Second
	DefaultRangePageSize     = 1024
	DefaultRestartGrace      = 10 * time.Second
)

// Config configures a Client. The zero value of every field means its
// default; where a feature can be switched off, a negative value does it.
type Config struct {
	// Endpoints are the etcd endpoints of the cluster ("host:port" or
	// URLs). The client reads the region table there (package
	// regiontable: the live members, the regions' remote keys, the root
	// pointer) and follows it with a watch. Exactly one of Endpoints,
	// Store and Servers must be set.
	Endpoints []string
	// EtcdPrefix is the region table's key prefix in etcd. Default
	// regiontable.DefaultPrefix ("/cell").
	EtcdPrefix string
	// EtcdDialTimeout bounds connecting to etcd, and each read of the
	// region table, on its own: New with a context without deadline
	// fails after it when etcd does not answer, with an error naming
	// each endpoint and what it met ("etcd unreachable: no endpoint
	// answered within 5s: 127.0.0.1:2379: connection refused"), as does a
	// refresh. Default DialTimeout.
	EtcdDialTimeout time.Duration
	// Store is a region table to use instead of opening one on Endpoints
	// (a process that has one already, tests with regiontable.Memory).
	// The client does not close it.
	Store regiontable.Store
	// Servers are RPC addresses of Cell servers to use instead of a region
	// table (tools, tests). Each is asked for its regions with a Metadata
	// call; one-sided reads then use what the metadata gives (the tcp
	// responder: shm registrations are only in the region table).
	Servers []string

	// Mode is the search-mode policy of the locality selector: adaptive
	// (the paper's rule, default), server, client or ratio=P.
	Mode locality.Mode
	// Selector configures the locality selector beyond Mode (window,
	// outlier K, exploration, clock, seed). Its Mode field is ignored.
	// Zero fields take locality's defaults.
	Selector locality.Options
	// Provider chooses the one-sided read provider: "auto" (default),
	// "tcp", "shm" or "fabric" (see ProviderAuto, ProviderFabric). A
	// region that the provider cannot read is searched server-side
	// whatever Mode says.
	Provider string
	// HostID is this host's identity, compared with a server's to decide
	// whether its region files can be mapped (shm). Default rdma.HostID().
	HostID string
	// TCP configures the tcp one-sided read client. Its ConnsPerEndpoint
	// defaults to ConnsPerServer, its Logger to Logger.
	TCP rdma.TCPClientOptions
	// SHM configures the shm one-sided read client. Its Host defaults to
	// HostID.
	SHM rdma.SHMClientOptions
	// Fabric configures the fabric one-sided read client (Provider
	// "fabric"): Fabric.Provider is the libfabric provider (verbs, efa,
	// cxi, tcp, shm), the servers' --fabric-provider; Fabric.Node the
	// address its endpoint binds to. Its Logger defaults to Logger.
	Fabric rdma.FabricClientOptions

	// NodeCacheBytes bounds the node cache (validated copies of upper
	// B-link nodes, LRU). Default 128 MiB (the paper's §3). Negative
	// disables the cache.
	NodeCacheBytes int64
	// NodeCacheMinLevel: only nodes at least this many levels above the
	// leaves are cached. Default 4 (the paper's §3). See doc.go for how a
	// node's height is known.
	NodeCacheMinLevel int
	// PathCacheEntries bounds the meganode path cache (LRU). Default 4096
	// (the paper's §3). Negative disables it.
	PathCacheEntries int

	// ConnsPerServer is the number of RPC connections kept to each server;
	// calls are pipelined over them. Default 2.
	ConnsPerServer int
	// DialTimeout bounds connecting to a server (and to etcd, unless
	// EtcdDialTimeout is set), whatever the operation's context allows.
	// Default 5s.
	DialTimeout time.Duration
	// Wire configures the RPC connections (nil: wire's defaults).
	Wire *wire.Options
	// TLS, if set, is the client configuration every RPC connection to a
	// server is made with (tlsconf.Source.ClientConfig: it verifies the
	// servers' certificates and presents the client's, whose role decides
	// what the servers let it do); it overrides Wire.TLS. Its ServerName,
	// when empty, is each dialled server's host. Nil: plain TCP. It is
	// also the one-sided tcp reads' configuration unless TCP.TLS is set
	// (shm reads stay on the host and need none).
	TLS *tls.Config
	// EtcdTLS, if set, is the client configuration of the connection to
	// the etcd cluster of Endpoints (https:// endpoints; etcdctl's
	// --cacert, --cert, --key). Nil: plain http.
	EtcdTLS *tls.Config

	// MaxRetries bounds the retries of one operation after errors that
	// leave it unexecuted (connection lost before sending, server busy,
	// redirects, stale routing), when the caller's context does not end
	// first. Default 16. Past it, an operation whose region may just have
	// no serving leader right now (its server's connection was lost, or
	// it answered Unavailable, Overloaded, NeedsRetry or a redirect) goes
	// on waiting for one within its context's deadline, unless FailFast:
	// a restart or a failover then costs latency, not an error. An
	// operation whose context has no deadline stops at MaxRetries.
	MaxRetries int
	// FailFast stops every operation at MaxRetries with ErrUnavailable,
	// even when its context's deadline leaves time to wait for the
	// region's leader, and fails an operation on a region with no live
	// server at once whatever RestartGrace says. Default false.
	FailFast bool
	// RestartGrace: an operation on a region the region table shows with
	// no live server (neither its host nor any replica is a live member)
	// fails at once with a *RegionUnavailableError, even when its
	// deadline leaves time to wait: that is an outage, not a failover,
	// and waiting would only turn it into a deadline error later. The
	// exception is a region this client saw served and then saw lose its
	// last live server less than RestartGrace ago: a server restarting
	// (an upgrade, a crash restarted by its supervisor) leaves the table
	// for a few seconds, and its operations wait for it within their
	// deadlines, as for a leader in transition, until the grace ends;
	// they then fail with the RegionUnavailableError. A client that never
	// saw the region served (a new process, a cellctl command) does not
	// wait. A region whose host is gone but one of whose replicas lives is
	// a leader in transition: always waited for (see MaxRetries). Only a
	// region table tells: with Config.Servers, operations wait as for a
	// leader in transition. Default 10s; negative: no grace.
	RestartGrace time.Duration
	// MaxRestarts bounds the retries of one operation after torn reads,
	// CRC mismatches and restarts of a client-side traversal, which are
	// cheap and expected under concurrent writes. Default 65536.
	MaxRestarts int
	// RetryBackoff is the first pause before retrying after a server or
	// connection error; it doubles up to MaxRetryBackoff, with jitter.
	// Defaults 1ms and 100ms.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// RefreshInterval is how often the server and region list is
	// refreshed in the background; it is also refreshed at once when a
	// server redirects or cannot be reached. Default 30s. Negative
	// disables the periodic refresh.
	RefreshInterval time.Duration
	// RangePageSize is the most pairs asked of a server per Range call
	// (Scan pages; Range with a larger limit makes several calls).
	// Default 1024.
	RangePageSize int

	// CPUSlots, if set, bound how many goroutines do client-side work over
	// shm at once while a server-side call waits for its reply, this
	// client's and those of every other client given the same CPUSlots
	// (see CPUSlots: with fewer than GOMAXPROCS, the replies of
	// server-side operations are not left waiting for the scheduler to
	// poll the network; client-side throughput pays for it). A goroutine
	// waits for a slot; the wait counts in the measured cost of a
	// client-side range page. Default nil: no bound.
	CPUSlots *CPUSlots

	// Registerer, if set, receives the client's Prometheus metrics (see
	// NewMetrics); Close unregisters them. Several clients of one process
	// need distinct registerers, e.g. each wrapped with
	// prometheus.WrapRegistererWith and its own label.
	Registerer prometheus.Registerer
	// Logger receives connection and topology events, and is passed on
	// to what the client creates (the tcp one-sided read client unless
	// TCP.Logger is set, the etcd region table). Default: a logger that
	// discards everything (slog.DiscardHandler), not slog.Default(): a
	// library logs nothing unless asked to. Errors reach the caller
	// anyway; the log only tells of background events.
	Logger *slog.Logger

	// TestingKnobs are test hooks; zero in production.
	TestingKnobs TestingKnobs
}

// TestingKnobs are hooks for tests. Each is nil unless a test sets it.
type TestingKnobs struct {
	// AfterNodeRead fires after every one-sided read of a node (header
	// or tree node) into buf, before it is checked; a test may tear it.
	AfterNodeRead func(p uint64, buf []byte)
	// AfterExtentRead fires after every one-sided read of an extent
	// record, before its CRC is checked.
	AfterExtentRead func(p uint64, buf []byte)
	// BeforeWriteSend fires before each attempt of a put or delete is
	// sent, with the key and the attempt's sequence number; a test may
	// hold it there.
	BeforeWriteSend func(key []byte, seq uint64)
	// TxnSkipValidation sends a transaction's commit without its read
	// set (no reads, no ranges): the region then checks nothing, and
	// transactions lose updates. For tests that show the validation is
	// what keeps them serializable.
	TxnSkipValidation bool
}

// discardLogger is Config.Logger's default.
var discardLogger = slog.New(slog.DiscardHandler)

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Provider == "" {
		c.Provider = ProviderAuto
	}
	if c.NodeCacheBytes == 0 {
		c.NodeCacheBytes = DefaultNodeCacheBytes
	}
	if c.NodeCacheMinLevel == 0 {
		c.NodeCacheMinLevel = DefaultNodeCacheMinLevel
	}
	if c.PathCacheEntries == 0 {
		c.PathCacheEntries = DefaultPathCacheEntries
	}
	if c.ConnsPerServer == 0 {
		c.ConnsPerServer = DefaultConnsPerServer
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.EtcdDialTimeout == 0 {
		c.EtcdDialTimeout = c.DialTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.MaxRestarts == 0 {
		c.MaxRestarts = DefaultMaxRestarts
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.RangePageSize == 0 {
		c.RangePageSize = DefaultRangePageSize
	}
	if c.RestartGrace == 0 {
		c.RestartGrace = DefaultRestartGrace
	}
	if c.Logger == nil {
		c.Logger = discardLogger
	}
	if c.TCP.ConnsPerEndpoint == 0 {
		c.TCP.ConnsPerEndpoint = c.ConnsPerServer
	}
	if c.TCP.Logger == nil {
		c.TCP.Logger = c.Logger
	}
	if c.TCP.TLS == nil {
		c.TCP.TLS = c.TLS
	}
	c.TCP.EnsureDefaults()
	if c.SHM.Host == "" {
		c.SHM.Host = c.HostID
	}
	c.SHM.EnsureDefaults()
	if c.Provider == ProviderFabric {
		if c.Fabric.Logger == nil {
			c.Fabric.Logger = c.Logger
		}
		c.Fabric.EnsureDefaults()
	}
}

// Validate reports whether the config (after EnsureDefaults) is usable.
// Errors wrap ErrInvalidConfig.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	sources := 0
	for _, set := range []bool{len(c.Endpoints) > 0, c.Store != nil, len(c.Servers) > 0} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return bad("set exactly one of Endpoints, Store and Servers (%d set)", sources)
	}
	for _, s := range c.Servers {
		if s == "" {
			return bad("empty server address")
		}
	}
	if err := c.Mode.Validate(); err != nil {
		return bad("%w", err)
	}
	switch c.Provider {
	case ProviderAuto, ProviderTCP, ProviderSHM:
	case ProviderFabric:
		if !rdma.FabricBuilt {
			return bad("provider fabric: this build has no libfabric provider (build with -tags libfabric)")
		}
		if err := c.Fabric.Validate(); err != nil {
			return bad("fabric provider: %w", err)
		}
	default:
		return bad("provider %q is not auto, tcp, shm or fabric", c.Provider)
	}
	switch {
	case c.NodeCacheMinLevel < 0:
		return bad("NodeCacheMinLevel %d < 0", c.NodeCacheMinLevel)
	case c.ConnsPerServer < 1 || c.ConnsPerServer > 64:
		return bad("ConnsPerServer %d not in [1, 64]", c.ConnsPerServer)
	case c.DialTimeout < 0 || c.EtcdDialTimeout < 0:
		return bad("negative dial timeout")
	case c.MaxRetries < 0 || c.MaxRestarts < 1:
		return bad("MaxRetries %d < 0 or MaxRestarts %d < 1", c.MaxRetries, c.MaxRestarts)
	case c.RetryBackoff < 0 || c.MaxRetryBackoff < c.RetryBackoff:
		return bad("retry backoff %v..%v", c.RetryBackoff, c.MaxRetryBackoff)
	case c.RangePageSize < 1:
		return bad("RangePageSize %d < 1", c.RangePageSize)
	}
	sel := c.selectorOptions()
	sel.EnsureDefaults()
	if err := sel.Validate(); err != nil {
		return bad("selector: %w", err)
	}
	if err := c.TCP.Validate(); err != nil {
		return bad("tcp provider: %w", err)
	}
	if err := c.SHM.Validate(); err != nil {
		return bad("shm provider: %w", err)
	}
	if c.Wire != nil {
		w := *c.Wire
		w.EnsureDefaults()
		if err := w.Validate(); err != nil {
			return bad("wire: %w", err)
		}
	}
	return nil
}

// selectorOptions returns the locality options with Mode applied.
func (c *Config) selectorOptions() locality.Options {
	o := c.Selector
	o.Mode = c.Mode
	return o
}
