// Package embedded runs an etcd member inside the process
// (go.etcd.io/etcd/server/v3/embed): the region table of cellserver's
// single-node default, of a development cluster whose first servers each
// embed one member of a common etcd cluster (Options.InitialCluster, as
// k3s does), and of tests. It is a separate package so that programs which
// only read the region table (the client, cellctl) do not link an etcd
// server.
//
// Options.ClientTLS and Options.PeerTLS put etcd's client and peer ports
// under TLS (https:// URLs) with etcd's own TLSInfo: the member's
// certificate and key, the CAs of the other end, and ClientCertAuth to
// require a certificate of those CAs (any role: etcd knows nothing of
// Cell's). etcd reloads the files itself. Clients then open the region
// table with regiontable.EtcdOptions.TLS.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"

	"github.com/cellstore/cell/internal/tlsconf"
)

// Options configure the embedded etcd. The zero value of every field means
// its default.
type Options struct {
	// Dir is etcd's data directory (created if missing). Required.
	Dir string
	// ClientAddr is the "host:port" clients connect to. Default
	// 127.0.0.1:2379.
	ClientAddr string
	// PeerAddr is the "host:port" the member listens on for its peers
	// (etcd requires the listener even in a single-member cluster).
	// Default 127.0.0.1:2380.
	PeerAddr string
	// Name is the member's name. Default "cell". Fixed once Dir holds
	// data.
	Name string
	// InitialCluster lists the members of the etcd cluster this member
	// starts with, in etcd's --initial-cluster form
	// "name=http://host:port,name2=http://host2:port2": every member's
	// name and the peer URL it advertises, this member (Name) among them.
	// Empty: a cluster of this member alone, advertising PeerAddr. It is
	// read only when Dir holds no data yet: a member that restarts rejoins
	// the cluster its data names, whatever this says. A member of several
	// is ready (Start returns) only once a majority of them run, so the
	// members of a new cluster must start within StartTimeout of each
	// other.
	InitialCluster string
	// ClusterToken tells apart clusters that share peer addresses: a
	// member ignores peers of another token. Default "cell".
	ClusterToken string
	// LogLevel is the level from which etcd's own records reach Logger
	// (debug, info, warn, error). Default "error": quiet, etcd reports only
	// failures. Records etcd logs while Close stops it are dropped.
	LogLevel string
	// StartTimeout bounds the wait for etcd to serve. Default 60 s.
	StartTimeout time.Duration
	// ClientTLS, if set (Enabled), makes etcd's client port speak TLS
	// (https:// URLs; Endpoints says so): CertFile and KeyFile are the
	// member's certificate (valid for ClientAddr's host), TrustedCAFile
	// the CAs of client certificates, which ClientCertAuth requires (any
	// certificate of those CAs, whatever its role). Default none: http.
	ClientTLS tlsconf.Files
	// PeerTLS, if set, does the same for the peer port: https:// peer
	// URLs (InitialCluster's must then be https://), the member's
	// certificate serving and, with ClientCertAuth, presented to its
	// peers, which need a certificate of TrustedCAFile's CAs. Default
	// none: http.
	//
	// etcd reloads the certificate files of both on its own when they
	// change (on new connections).
	PeerTLS tlsconf.Files
	// Logger receives start and stop records. Default slog.Default().
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultClientAddr = "127.0.0.1:2379"
	DefaultPeerAddr   = "127.0.0.1:2380"
)

// ErrInvalidOptions: options that Validate rejects.
var ErrInvalidOptions = errors.New("embedded: invalid options")

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.ClientAddr == "" {
		o.ClientAddr = DefaultClientAddr
	}
	if o.PeerAddr == "" {
		o.PeerAddr = DefaultPeerAddr
	}
	if o.Name == "" {
		o.Name = "cell"
	}
	if o.ClusterToken == "" {
		o.ClusterToken = "cell"
	}
	if o.LogLevel == "" {
		o.LogLevel = "error"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options are usable.
func (o *Options) Validate() error {
	if o.Dir == "" {
		return fmt.Errorf("embedded: no data directory: %w", ErrInvalidOptions)
	}
	for _, a := range []string{o.ClientAddr, o.PeerAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("embedded: address %q: %w: %w", a, err, ErrInvalidOptions)
		}
	}
	var l zapcore.Level
	if err := l.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return fmt.Errorf("embedded: log level %q: %w", o.LogLevel, ErrInvalidOptions)
	}
	if o.StartTimeout <= 0 {
		return fmt.Errorf("embedded: start timeout %v: %w", o.StartTimeout, ErrInvalidOptions)
	}
	for _, f := range []struct {
		port  string
		files tlsconf.Files
	}{{"client", o.ClientTLS}, {"peer", o.PeerTLS}} {
		if !f.files.Enabled() {
			continue
		}
		if err := f.files.Validate(); err != nil {
			return fmt.Errorf("embedded: %s TLS: %w: %w", f.port, err, ErrInvalidOptions)
		}
		if f.files.CertFile == "" {
			return fmt.Errorf("embedded: %s TLS needs the member's certificate and key: %w", f.port, ErrInvalidOptions)
		}
	}
	if o.InitialCluster != "" {
		if _, err := o.advertisedPeer(); err != nil {
			return err
		}
	}
	return nil
}

// advertisedPeer returns the peer URL the member advertises: its own entry
// of InitialCluster, else PeerAddr.
func (o *Options) advertisedPeer() (url.URL, error) {
	scheme := scheme(o.PeerTLS)
	if o.InitialCluster == "" {
		return url.URL{Scheme: scheme, Host: o.PeerAddr}, nil
	}
	m, err := types.NewURLsMap(o.InitialCluster)
	if err != nil {
		return url.URL{}, fmt.Errorf("embedded: initial cluster %q: %w: %w", o.InitialCluster, err, ErrInvalidOptions)
	}
	us, ok := m[o.Name]
	if !ok {
		return url.URL{}, fmt.Errorf("embedded: initial cluster %q has no member named %q: %w", o.InitialCluster, o.Name, ErrInvalidOptions)
	}
	if len(us) != 1 || us[0].Scheme != scheme {
		return url.URL{}, fmt.Errorf("embedded: initial cluster %q: member %q needs one %s:// peer URL: %w", o.InitialCluster, o.Name, scheme, ErrInvalidOptions)
	}
	return us[0], nil
}

// scheme is the URL scheme of a port with files: https with TLS.
func scheme(f tlsconf.Files) string {
	if f.Enabled() {
		return "https"
	}
	return "http"
}

// tlsInfo is etcd's form of f.
func tlsInfo(f tlsconf.Files) transport.TLSInfo {
	return transport.TLSInfo{CertFile: f.CertFile, KeyFile: f.KeyFile, TrustedCAFile: f.TrustedCAFile, ClientCertAuth: f.ClientCertAuth}
}

// Etcd is a running embedded etcd.
type Etcd struct {
	e        *embed.Etcd
	endpoint string
	log      *slog.Logger
	quiet    *atomic.Bool
	grpc     *grpcServers
	once     sync.Once
}

// grpcServers are etcd's client gRPC servers (embed.Config's
// ServiceRegister hands them over as etcd makes them).
type grpcServers struct {
	mu      sync.Mutex
	servers []*grpc.Server
}

func (g *grpcServers) add(s *grpc.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.servers = append(g.servers, s)
}

// stop stops the client gRPC servers: the RPCs in flight get grace to
// finish, then the streams still open (clients' watches and lease
// keep-alives, which end only when their client goes) are cut. etcd's
// own Close waits for those streams for its request timeout (7 s), and
// holds its ports meanwhile.
func (g *grpcServers) stop(grace time.Duration) {
	g.mu.Lock()
	servers := g.servers
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() {
				s.GracefulStop()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(grace):
				s.Stop()
				<-done
			}
		}()
	}
	wg.Wait()
}

// stopGrace is how long Close lets client RPCs in flight finish before it
// cuts the streams still open.
const stopGrace = 500 * time.Millisecond

// Start starts etcd and waits until it serves clients.
func Start(opts Options) (*Etcd, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cu := url.URL{Scheme: scheme(opts.ClientTLS), Host: opts.ClientAddr}
	pu := url.URL{Scheme: scheme(opts.PeerTLS), Host: opts.PeerAddr}
	apu, _ := opts.advertisedPeer() // checked by Validate
	cfg := embed.NewConfig()
	cfg.Name = opts.Name
	cfg.Dir = opts.Dir
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{apu}
	if opts.ClientTLS.Enabled() {
		cfg.ClientTLSInfo = tlsInfo(opts.ClientTLS)
	}
	if opts.PeerTLS.Enabled() {
		cfg.PeerTLSInfo = tlsInfo(opts.PeerTLS)
	}
	cfg.InitialClusterToken = opts.ClusterToken
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if opts.InitialCluster != "" {
		cfg.InitialCluster = opts.InitialCluster
	}
	var level zapcore.Level
	_ = level.UnmarshalText([]byte(opts.LogLevel)) // checked by Validate
	quiet := new(atomic.Bool)
	cfg.Logger = "zap"
	cfg.LogLevel = opts.LogLevel
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(opts.Logger, level, quiet))
	// The region table changes rarely; keep an hour of history for
	// watchers that reconnect.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	// NewConfig leaves this at 0, which makes every request "expensive"
	// and logged as a warning.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	gs := new(grpcServers)
	cfg.ServiceRegister = gs.add
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded: start etcd (client %s, peer %s, data %s): %w", opts.ClientAddr, opts.PeerAddr, opts.Dir, err)
	}
	t := time.NewTimer(opts.StartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		quiet.Store(true)
		e.Close()
		return nil, fmt.Errorf("embedded: etcd failed while starting: %w", err)
	case <-t.C:
		quiet.Store(true)
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded: etcd not ready after %v", opts.StartTimeout)
	}
	ep := cu.String()
	if len(e.Clients) > 0 {
		ep = cu.Scheme + "://" + e.Clients[0].Addr().String()
	}
	opts.Logger.Info("embedded etcd serving", slog.String("client", ep), slog.String("peer", apu.String()), slog.String("dir", opts.Dir),
		slog.String("name", opts.Name), slog.Int("members", len(e.Server.Cluster().Members())))
	return &Etcd{e: e, endpoint: ep, log: opts.Logger, quiet: quiet, grpc: gs}, nil
}

// Endpoints returns the client URLs to give an etcd client.
func (e *Etcd) Endpoints() []string { return []string{e.endpoint} }

// Err delivers a fatal error of the running server.
func (e *Etcd) Err() <-chan error { return e.e.Err() }

// Close stops etcd and waits until it has stopped and its listeners are
// closed, so that an etcd started at once on the same ports and data
// directory binds them. Client RPCs in flight get half a second to finish;
// streams still open then (other processes' watches and lease
// keep-alives) are cut, which their clients survive by reconnecting (etcd
// itself would wait 7 s for them). Closing twice is a no-op.
func (e *Etcd) Close() error {
	e.once.Do(func() {
		e.quiet.Store(true)
		e.grpc.stop(stopGrace)
		e.e.Close()
		e.log.Info("embedded etcd stopped", slog.String("client", e.endpoint))
	})
	return nil
}
