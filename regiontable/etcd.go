package regiontable

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/tlsconf"
)

// EtcdOptions configure an Etcd store. The zero value of every field means
// its default.
type EtcdOptions struct {
	// Prefix is the key prefix of the table, without a trailing slash.
	// Default "/cell". Several Cell clusters may share one etcd cluster
	// under different prefixes.
	Prefix string
	// LeaseTTL is the lease of a member's key: a dead server disappears
	// from Members within it. Whole seconds, at least 1 s. Default 5 s.
	LeaseTTL time.Duration
	// DialTimeout bounds OpenEtcd's connection attempts. Default 5 s.
	DialTimeout time.Duration
	// TLS, if set, is OpenEtcd's client configuration for etcd's client
	// port (https:// endpoints; "host:port" endpoints are dialled with TLS
	// too): the CAs that verify etcd's certificate, and the client
	// certificate etcd asks for with --client-cert-auth
	// (tlsconf.Source.ClientConfig gives one that follows its files).
	// Without a ServerName each endpoint's certificate is verified for the
	// endpoint's host. Connect's and a disconnected call's errors then say
	// what the TLS handshake met. Default nil: plain http. (NewEtcd takes
	// a client configured by the caller and ignores it.)
	TLS *tls.Config
	// Logger receives lease losses. Default slog.Default().
	Logger *slog.Logger
}

// reconnectMaxDelay bounds the wait between attempts to reconnect to etcd.
const reconnectMaxDelay = time.Second

// Defaults of EtcdOptions.
const (
	DefaultPrefix      = "/cell"
	DefaultLeaseTTL    = 5 * time.Second
	DefaultDialTimeout = 5 * time.Second
)

// EnsureDefaults fills zero fields with their defaults.
func (o *EtcdOptions) EnsureDefaults() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options are usable. Errors wrap ErrInvalid.
func (o *EtcdOptions) Validate() error {
	if !strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/") {
		return fmt.Errorf("regiontable: prefix %q must start and not end with '/': %w", o.Prefix, ErrInvalid)
	}
	if o.LeaseTTL < time.Second || o.LeaseTTL%time.Second != 0 {
		return fmt.Errorf("regiontable: lease TTL %v is not a whole number of seconds >= 1s: %w", o.LeaseTTL, ErrInvalid)
	}
	if o.DialTimeout <= 0 {
		return fmt.Errorf("regiontable: dial timeout %v: %w", o.DialTimeout, ErrInvalid)
	}
	return nil
}

// Etcd is the Store over an etcd cluster.
type Etcd struct {
	cli    *clientv3.Client
	owned  bool // Close closes cli
	opts   EtcdOptions
	prefix string
	// closed is cancelled by Close; watches and campaigns end with it.
	closed context.Context
	cancel context.CancelFunc
	// campaigns counts the Campaign calls in progress; Close waits for
	// them. Add only under mu while not closed.
	campaigns sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		regs   map[*etcdRegistration]struct{}
		leads  map[*etcdLeadership]struct{}
	}
}

var _ Store = (*Etcd)(nil)

// NewEtcd returns a Store over cli, which stays the caller's: Close does not
// close it.
func NewEtcd(cli *clientv3.Client, opts EtcdOptions) (*Etcd, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Etcd{cli: cli, opts: opts, prefix: opts.Prefix}
	s.closed, s.cancel = context.WithCancel(context.Background())
	s.mu.regs = make(map[*etcdRegistration]struct{})
	s.mu.leads = make(map[*etcdLeadership]struct{})
	return s, nil
}

// OpenEtcd connects to the etcd cluster at endpoints ("host:port" or URLs)
// and returns a Store that owns the connection. Connecting is lazy: an
// unreachable cluster shows as errors of the first calls, bounded by their
// contexts (an error of a call made while not connected says so); Connect
// waits for the connection within DialTimeout and says why it failed.
func OpenEtcd(endpoints []string, opts EtcdOptions) (*Etcd, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("regiontable: no etcd endpoints: %w", ErrInvalid)
	}
	dialOpts := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		// gRPC's default reconnect backoff grows to 120 s: after a
		// long etcd outage, servers and clients would find etcd
		// back only minutes later. Try again at least every
		// reconnectMaxDelay.
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMaxDelay},
		MinConnectTimeout: opts.DialTimeout,
	})}
	if opts.TLS != nil {
		// After clientv3's own credentials (its DialOptions come last):
		// the name verified is each endpoint's host, also for an IP
		// address, which crypto/tls does not send as SNI.
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(endpointTLS{cfg: opts.TLS, TransportCredentials: credentials.NewTLS(opts.TLS)}))
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: opts.DialTimeout,
		TLS:         opts.TLS,
		Logger:      zap.NewNop(),
		// Detect a dead etcd connection well within a lease TTL.
		DialKeepAliveTime:    opts.LeaseTTL / 2,
		DialKeepAliveTimeout: opts.LeaseTTL / 2,
		DialOptions:          dialOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("regiontable: connect to etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	s, err := NewEtcd(cli, opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// endpointTLS are gRPC's TLS credentials with the configuration made for
// the endpoint dialled (tlsconf.ForAddr).
type endpointTLS struct {
	cfg *tls.Config
	credentials.TransportCredentials
}

func (c endpointTLS) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(tlsconf.ForAddr(c.cfg, authority)).ClientHandshake(ctx, authority, raw)
}

func (c endpointTLS) Clone() credentials.TransportCredentials {
	return endpointTLS{cfg: c.cfg.Clone(), TransportCredentials: c.TransportCredentials.Clone()}
}

// Connect waits until the store's etcd client is connected to one of its
// endpoints, for at most the store's DialTimeout (or until ctx ends),
// and returns at once when it is already. Calls to etcd wait for a
// connection as long as their contexts let them; Connect lets a caller
// bound that wait by the dial timeout alone, and say why etcd could not
// be reached: its error wraps ErrUnreachable and names each endpoint and
// what a plain TCP dial of it met ("regiontable: etcd unreachable: no
// endpoint answered within 1s: 127.0.0.1:2379: connection refused"), and
// wraps ctx's error if ctx ended first. It also starts connecting a store
// opened lazily (OpenEtcd does not connect).
func (s *Etcd) Connect(ctx context.Context) error {
	if s.isClosed() {
		return ErrClosed
	}
	conn := s.cli.ActiveConnection()
	if conn.GetState() == connectivity.Ready {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.opts.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(s.closed, cancel)
	defer stop()
	conn.Connect()
	for {
		st := conn.GetState()
		if st == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(wctx, st) {
			break
		}
	}
	if s.isClosed() {
		return ErrClosed
	}
	why := probeEndpoints(s.cli.Endpoints(), s.opts.TLS, min(s.opts.DialTimeout, probeTimeout))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: no endpoint answered before the caller's deadline: %s: %w", ErrUnreachable, why, err)
	}
	return fmt.Errorf("%w: no endpoint answered within %v: %s", ErrUnreachable, s.opts.DialTimeout, why)
}

// probeTimeout bounds Connect's diagnostic dials.
const probeTimeout = time.Second

// probeEndpoints dials each endpoint over TCP (and TLS, with tlsCfg), in
// parallel and for at most timeout, and says what each met: "host:port:
// connection refused", "host:port: TLS handshake failed: remote error:
// tls: certificate required", "host:port: accepts connections but etcd
// did not answer" ...
func probeEndpoints(endpoints []string, tlsCfg *tls.Config, timeout time.Duration) string {
	out := make([]string, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			addr := endpointAddr(ep)
			d := net.Dialer{Timeout: timeout}
			nc, err := d.Dial("tcp", addr)
			if err != nil {
				out[i] = addr + ": " + dialCause(err)
				return
			}
			defer nc.Close()
			if tlsCfg != nil {
				if err := probeTLS(nc, tlsconf.ForAddr(tlsCfg, addr), timeout); err != nil {
					out[i] = addr + ": TLS handshake failed: " + err.Error()
					return
				}
			}
			out[i] = addr + ": accepts connections but etcd did not answer"
		})
	}
	wg.Wait()
	return strings.Join(out, "; ")
}

// probeTLS runs a TLS handshake on nc within timeout. With TLS 1.3 a
// server refuses a client certificate only after the client's handshake
// ended: a short read then picks up its alert (an HTTP/2 server sends
// nothing first, so a timeout there means the handshake was accepted).
func probeTLS(nc net.Conn, cfg *tls.Config, timeout time.Duration) error {
	_ = nc.SetDeadline(time.Now().Add(timeout))
	tc := tls.Client(nc, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	_ = nc.SetReadDeadline(time.Now().Add(min(timeout, 200*time.Millisecond)))
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	return nil
}

// endpointAddr is the "host:port" of an endpoint given as one or as a
// URL.
func endpointAddr(ep string) string {
	if !strings.Contains(ep, "://") {
		return ep
	}
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		return u.Host
	}
	return ep
}

// dialCause is the innermost reason of a failed dial: "connection
// refused" rather than "dial tcp 127.0.0.1:2379: connect: connection
// refused", "i/o timeout" for a dial that got no answer.
func dialCause(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// Client returns the etcd client the store uses.
func (s *Etcd) Client() *clientv3.Client { return s.cli }

// Prefix returns the table's key prefix.
func (s *Etcd) Prefix() string { return s.prefix }

func (s *Etcd) key(rel string) string { return s.prefix + rel }

func (s *Etcd) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.closed
}

// wrap gives an etcd error context, keeping ErrClosed for a closed store.
// A call that ended waiting for a connection (its context ended, or etcd
// was unavailable) while the client is not connected says so: "context
// deadline exceeded" alone does not tell that etcd could not be reached.
func (s *Etcd) wrap(what string, err error) error {
	if s.isClosed() {
		return fmt.Errorf("regiontable: %s: %w", what, ErrClosed)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Unavailable ||
		status.Code(err) == codes.DeadlineExceeded {
		if st := s.cli.ActiveConnection().GetState(); st != connectivity.Ready {
			why := strings.ToLower(st.String())
			if s.opts.TLS != nil {
				// A refused certificate looks like any failure to
				// connect from here: say what a handshake meets.
				why += "; " + probeEndpoints(s.cli.Endpoints(), s.opts.TLS, min(s.opts.DialTimeout, probeTimeout))
			}
			return fmt.Errorf("regiontable: %s: not connected to etcd at %s (%v): %w", what, strings.Join(s.cli.Endpoints(), ","),
				why, err)
		}
	}
	return fmt.Errorf("regiontable: %s: %w", what, err)
}

// RegisterMember implements Store.
func (s *Etcd) RegisterMember(ctx context.Context, m Member) (Registration, error) {
	if err := validMember(&m); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	val, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("regiontable: encode member %s: %w", m.ID, err)
	}
	key := s.key(membersDir + m.ID)
	lease, err := s.cli.Grant(ctx, int64(s.opts.LeaseTTL/time.Second))
	if err != nil {
		return nil, s.wrap("grant member lease", err)
	}
	revoke := func() {
		rctx, cancel := context.WithTimeout(context.Background(), s.opts.DialTimeout)
		defer cancel()
		_, _ = s.cli.Revoke(rctx, lease.ID)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease.ID)), clientv3.OpDelete(s.key(missingDir+m.ID))).
		Commit()
	if err != nil {
		revoke()
		return nil, s.wrap("register member "+m.ID, err)
	}
	if !resp.Succeeded {
		revoke()
		return nil, fmt.Errorf("regiontable: member %s: %w", m.ID, ErrMemberExists)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ka, err := s.cli.KeepAlive(kctx, lease.ID)
	if err != nil {
		cancel()
		revoke()
		return nil, s.wrap("keep member lease alive", err)
	}
	r := &etcdRegistration{s: s, id: m.ID, lease: lease.ID, cancel: cancel, done: make(chan struct{}), exited: make(chan struct{})}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		cancel()
		revoke()
		return nil, ErrClosed
	}
	s.mu.regs[r] = struct{}{}
	s.mu.Unlock()
	go r.keepAlive(ka)
	return r, nil
}

// EvictMember implements Store.
func (s *Etcd) EvictMember(ctx context.Context, m Member) (bool, error) {
	if err := validMember(&m); err != nil {
		return false, err
	}
	if s.isClosed() {
		return false, ErrClosed
	}
	val, err := json.Marshal(m)
	if err != nil {
		return false, fmt.Errorf("regiontable: encode member %s: %w", m.ID, err)
	}
	key := s.key(membersDir + m.ID)
	get, err := s.cli.Get(ctx, key)
	if err != nil {
		return false, s.wrap("read member "+m.ID, err)
	}
	if len(get.Kvs) == 0 || string(get.Kvs[0].Value) != string(val) {
		return false, nil
	}
	kv := get.Kvs[0]
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return false, s.wrap("evict member "+m.ID, err)
	}
	if !resp.Succeeded {
		return false, nil
	}
	// Its lease goes too, so that a registration still holding it (it
	// was not dead after all) learns it lost the entry.
	if kv.Lease != 0 {
		if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return true, s.wrap("revoke the evicted member's lease", err)
		}
	}
	return true, nil
}

// etcdRegistration keeps one member's lease alive.
//
// Locking notes: etcdRegistration.mu < Etcd.mu.
type etcdRegistration struct {
	s      *Etcd
	id     string
	lease  clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{} // closed when the registration ends
	exited chan struct{} // closed when keepAlive returns

	mu struct {
		sync.Mutex
		closing bool
		ended   bool
		err     error
		revoked bool // Close revoked the lease, or found it gone
	}
}

// keepAlive drains the keepalive responses; the channel closes when the
// lease is gone (expired, revoked) or Close cancelled it.
func (r *etcdRegistration) keepAlive(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.exited)
	for range ka {
	}
	r.mu.Lock()
	closing := r.mu.closing
	r.mu.Unlock()
	if !closing {
		err := fmt.Errorf("regiontable: member %s: keepalive of lease %x stopped: %w", r.id, int64(r.lease), ErrLeaseLost)
		r.s.opts.Logger.Error("regiontable: member lease lost", slog.String("member", r.id), slog.Any("err", err))
		r.end(err)
	}
}

func (r *etcdRegistration) end(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.ended {
		return
	}
	r.mu.ended, r.mu.err = true, err
	close(r.done)
	r.s.mu.Lock()
	delete(r.s.mu.regs, r)
	r.s.mu.Unlock()
}

func (r *etcdRegistration) Done() <-chan struct{} { return r.done }

func (r *etcdRegistration) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.err
}

// Close revokes the lease, which deletes the member's key, also after the
// lease was lost: etcd restores every lease with a fresh TTL when it
// restarts, so the key of a registration lost in an etcd outage comes back
// and would hold the member ID for another TTL. A lease that is gone is
// no error; after another error Close may be called again.
func (r *etcdRegistration) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.mu.revoked {
		r.mu.Unlock()
		return nil
	}
	first := !r.mu.closing
	r.mu.closing = true
	r.mu.Unlock()
	if first {
		r.cancel()
		<-r.exited
		r.end(nil)
	}
	if err := r.s.revoke(ctx, r.lease); err != nil {
		return fmt.Errorf("regiontable: revoke lease of member %s (it expires within %v): %w", r.id, r.s.opts.LeaseTTL, err)
	}
	r.mu.Lock()
	r.mu.revoked = true
	r.mu.Unlock()
	return nil
}

// revoke revokes lease; a lease that is gone already is no error.
func (s *Etcd) revoke(ctx context.Context, lease clientv3.LeaseID) error {
	_, err := s.cli.Revoke(ctx, lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// Members implements Store.
func (s *Etcd) Members(ctx context.Context) ([]Member, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	resp, err := s.cli.Get(ctx, s.key(membersDir), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.wrap("list members", err)
	}
	out := make([]Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, err := decodeMember(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// get reads one key: its value, its mod revision (0 when absent).
func (s *Etcd) get(ctx context.Context, key string) ([]byte, int64, error) {
	if s.isClosed() {
		return nil, 0, ErrClosed
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, 0, s.wrap("get "+key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// casPut writes val at key if the key's mod revision is still rev (0: the
// key is absent) and reports whether it did.
func (s *Etcd) casPut(ctx context.Context, key string, rev int64, val string) (bool, error) {
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, val)).
		Commit()
	if err != nil {
		return false, s.wrap("write "+key, err)
	}
	return resp.Succeeded, nil
}

// PutRegion implements Store.
func (s *Etcd) PutRegion(ctx context.Context, r Region) error {
	if err := validRegion(&r); err != nil {
		return err
	}
	val, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("regiontable: encode region %d: %w", r.ID, err)
	}
	key := s.key(regionsDir + regionName(r.ID))
	for {
		cur, rev, err := s.get(ctx, key)
		if err != nil {
			return err
		}
		if rev != 0 {
			old, err := decodeRegion(key, cur)
			if err != nil {
				return err
			}
			if !r.Supersedes(&old) {
				return fmt.Errorf("regiontable: region %d entry (host %s, term %d, epoch %d) older than the stored one (host %s, term %d, epoch %d): %w",
					r.ID, r.Host, r.Term, r.Epoch, old.Host, old.Term, old.Epoch, ErrStaleEpoch)
			}
		}
		ok, err := s.casPut(ctx, key, rev, string(val))
		if err != nil || ok {
			return err
		}
	}
}

// Regions implements Store.
func (s *Etcd) Regions(ctx context.Context) ([]Region, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	resp, err := s.cli.Get(ctx, s.key(regionsDir), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.wrap("list regions", err)
	}
	out := make([]Region, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeRegion(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Region implements Store.
func (s *Etcd) Region(ctx context.Context, id uint32) (Region, error) {
	if err := validRegionID(id); err != nil {
		return Region{}, err
	}
	key := s.key(regionsDir + regionName(id))
	val, rev, err := s.get(ctx, key)
	if err != nil {
		return Region{}, err
	}
	if rev == 0 {
		return Region{}, fmt.Errorf("regiontable: region %d: %w", id, ErrNotFound)
	}
	return decodeRegion(key, val)
}

// root reads the root pointer and its mod revision.
func (s *Etcd) root(ctx context.Context) (blink.Ptr, int64, error) {
	val, rev, err := s.get(ctx, s.key(rootKey))
	if err != nil || rev == 0 {
		return 0, rev, err
	}
	p, err := ParseRoot(string(val))
	return p, rev, err
}

// Root implements Store.
func (s *Etcd) Root(ctx context.Context) (blink.Ptr, error) {
	p, _, err := s.root(ctx)
	return p, err
}

// SetRoot implements Store.
func (s *Etcd) SetRoot(ctx context.Context, old, new blink.Ptr) (blink.Ptr, error) {
	for {
		cur, rev, err := s.root(ctx)
		if err != nil {
			return 0, err
		}
		if cur != old {
			return cur, fmt.Errorf("regiontable: root is %v, not %v: %w", cur, old, ErrConflict)
		}
		if new == old {
			return new, nil
		}
		ok, err := s.casPut(ctx, s.key(rootKey), rev, FormatRoot(new))
		if err != nil {
			return 0, err
		}
		if ok {
			return new, nil
		}
	}
}

// AllocRegionID implements Store.
func (s *Etcd) AllocRegionID(ctx context.Context) (uint32, error) {
	key := s.key(idsKey)
	for {
		val, rev, err := s.get(ctx, key)
		if err != nil {
			return 0, err
		}
		var last uint64
		if rev != 0 {
			if last, err = strconv.ParseUint(string(val), 10, 32); err != nil {
				return 0, fmt.Errorf("regiontable: %s = %q: %w", key, val, ErrCorruption)
			}
		}
		if last >= blink.MaxRegionID {
			return 0, ErrExhausted
		}
		ok, err := s.casPut(ctx, key, rev, strconv.FormatUint(last+1, 10))
		if err != nil {
			return 0, err
		}
		if ok {
			return uint32(last + 1), nil
		}
	}
}

// Load implements Store: one range read of the whole prefix, hence a
// consistent snapshot.
func (s *Etcd) Load(ctx context.Context) (State, error) {
	if s.isClosed() {
		return State{}, ErrClosed
	}
	resp, err := s.cli.Get(ctx, s.prefix+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return State{}, s.wrap("load table", err)
	}
	st := State{Revision: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		ev, err := s.decodeEvent(mvccpb.PUT, kv)
		if err != nil {
			return State{}, err
		}
		switch ev.Kind {
		case MemberUp:
			st.Members = append(st.Members, ev.Member)
		case RegionPut:
			st.Regions = append(st.Regions, ev.Region)
		case RootSet:
			st.Root = ev.Root
		case DrainSet:
			st.Draining = append(st.Draining, ev.Member.ID)
		case MissingSet:
			if st.Missing == nil {
				st.Missing = make(map[string]time.Duration)
			}
			st.Missing[ev.Member.ID] = ev.MissingFor
		}
	}
	return st, nil
}

// decodeEvent turns a key-value change into an Event; keys that are not
// members, regions or the root give an Event of kind 0.
func (s *Etcd) decodeEvent(typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) (Event, error) {
	key := string(kv.Key)
	rel, ok := strings.CutPrefix(key, s.prefix)
	if !ok {
		return Event{}, nil
	}
	ev := Event{Revision: kv.ModRevision}
	del := typ == mvccpb.DELETE
	switch {
	case strings.HasPrefix(rel, membersDir):
		id := rel[len(membersDir):]
		if del {
			ev.Kind, ev.Member = MemberDown, Member{ID: id}
			return ev, nil
		}
		m, err := decodeMember(key, kv.Value)
		ev.Kind, ev.Member = MemberUp, m
		return ev, err
	case strings.HasPrefix(rel, regionsDir):
		id, err := parseRegionName(rel[len(regionsDir):])
		if err != nil {
			return Event{}, err
		}
		if del {
			ev.Kind, ev.Region = RegionDelete, Region{ID: id}
			return ev, nil
		}
		r, err := decodeRegion(key, kv.Value)
		ev.Kind, ev.Region = RegionPut, r
		return ev, err
	case strings.HasPrefix(rel, drainingDir):
		ev.Kind, ev.Member, ev.Draining = DrainSet, Member{ID: rel[len(drainingDir):]}, !del
		return ev, nil
	case strings.HasPrefix(rel, missingDir):
		id := rel[len(missingDir):]
		ev.Kind, ev.Member = MissingSet, Member{ID: id}
		if del {
			return ev, nil
		}
		d, err := decodeMissing(key, id, kv.Value)
		ev.Missing, ev.MissingFor = true, d
		return ev, err
	case rel == rootKey:
		ev.Kind = RootSet
		if del {
			return ev, nil
		}
		p, err := ParseRoot(string(kv.Value))
		ev.Root = p
		return ev, err
	}
	return Event{}, nil
}

// SetDraining implements Store.
func (s *Etcd) SetDraining(ctx context.Context, id string, on bool) error {
	if s.isClosed() {
		return ErrClosed
	}
	if err := ValidServerID(id); err != nil {
		return err
	}
	var err error
	if on {
		_, err = s.cli.Put(ctx, s.key(drainingDir+id), "1")
	} else {
		_, err = s.cli.Delete(ctx, s.key(drainingDir+id))
	}
	if err != nil {
		return s.wrap("set draining", err)
	}
	return nil
}

// MarkMissing implements Store: one transaction that writes the mark if
// id's member entry does not exist.
func (s *Etcd) MarkMissing(ctx context.Context, id string, d time.Duration) (bool, error) {
	if s.isClosed() {
		return false, ErrClosed
	}
	if err := validMissing(id, d); err != nil {
		return false, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.key(membersDir+id)), "=", 0)).
		Then(clientv3.OpPut(s.key(missingDir+id), formatMissing(d))).
		Commit()
	if err != nil {
		return false, s.wrap("mark missing", err)
	}
	return resp.Succeeded, nil
}

// ClearMissing implements Store.
func (s *Etcd) ClearMissing(ctx context.Context, id string) error {
	if s.isClosed() {
		return ErrClosed
	}
	if err := ValidServerID(id); err != nil {
		return err
	}
	if _, err := s.cli.Delete(ctx, s.key(missingDir+id)); err != nil {
		return s.wrap("clear missing", err)
	}
	return nil
}

// Watch implements Store.
func (s *Etcd) Watch(ctx context.Context, revision int64) <-chan Event {
	ch := make(chan Event, 16)
	go s.watch(ctx, revision, ch)
	return ch
}

func (s *Etcd) watch(ctx context.Context, revision int64, ch chan<- Event) {
	defer close(ch)
	fail := func(err error) {
		select {
		case ch <- Event{Err: err}:
		case <-ctx.Done():
		}
	}
	if s.isClosed() {
		fail(ErrClosed)
		return
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	stop := context.AfterFunc(s.closed, cancel)
	defer stop()
	wch := s.cli.Watch(wctx, s.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(revision+1))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			if wr.CompactRevision != 0 {
				err = fmt.Errorf("regiontable: watch from revision %d, compacted up to %d: %w", revision+1, wr.CompactRevision, ErrCompacted)
			} else {
				err = s.wrap("watch", err)
			}
			fail(err)
			return
		}
		for _, e := range wr.Events {
			ev, err := s.decodeEvent(e.Type, e.Kv)
			if err != nil {
				fail(err)
				return
			}
			if ev.Kind == 0 {
				continue
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
	if ctx.Err() == nil {
		fail(s.wrap("watch", errors.New("watch channel closed")))
	}
}

// Close ends the registrations and leaderships made through the store
// (revoking their leases), makes campaigns in progress fail, and closes
// the etcd client if OpenEtcd made it.
func (s *Etcd) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.cancel()
	regs := make([]*etcdRegistration, 0, len(s.mu.regs))
	for r := range s.mu.regs {
		regs = append(regs, r)
	}
	leads := make([]*etcdLeadership, 0, len(s.mu.leads))
	for l := range s.mu.leads {
		leads = append(leads, l)
	}
	s.mu.Unlock()
	s.campaigns.Wait()
	var errs []error
	for _, r := range regs {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.DialTimeout)
		errs = append(errs, r.Close(ctx))
		cancel()
	}
	for _, l := range leads {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.DialTimeout)
		errs = append(errs, l.closeStore(ctx))
		cancel()
	}
	if s.owned {
		errs = append(errs, s.cli.Close())
	}
	return errors.Join(errs...)
}
