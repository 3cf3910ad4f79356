package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/raftmux"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wal"
	"github.com/cellstore/cell/wire"
)

// Server is one Cell server: it hosts a region, serves the wire protocol
// with a fixed number of tree workers, exposes the region to one-sided
// reads, and publishes itself in the region table. See doc.go.
//
// Server is the process and the roles' common ground: it owns the
// lifecycle (Start, Close, the background goroutines), the data
// directory, the log, the listeners, the view of the region table, the
// connections to other servers and the membership, and it starts its own
// region's group (group.go). The work is the roles': the registry of
// replicas (reps), hosting, the keeper of the groups, the coordinator,
// the split driver and RPC serving, each a type of its own that reaches
// replicas through the registry. So it has about 30 fields and 70
// methods, most of them small: the exported API (Start, Close, Addr,
// Metrics, ...), the start and stop steps, and the shared services the
// roles call (call, redirect, holder, splitEvent).
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *Metrics
	wopts   wire.Options
	// peerOpts are wopts with PeerTLS: how this server dials others.
	peerOpts wire.Options
	// authz: ops are authorized by the peer's role (ClientCertAuth).
	authz bool

	// reps is every replica the server holds: its own region's, the
	// followers, and which it serves (registry.go).
	reps registry
	// hosting serves the regions whose groups this server leads: their
	// read leases, one-sided registrations and table entries (serve.go,
	// lease.go).
	hosting hosting

	// Set by Start before anything is served, then read-only.
	dir       *dataDir
	mux       *raftmux.Mux // the raft listener of all the server's groups
	wal       *wal.DB
	snaps     *wal.Snapshots
	rpcLn     net.Listener
	rpcAddr   string
	responder *rdma.TCPResponder
	shm       *rdma.SHMServer
	fabric    []rdma.Server // one per Options.Fabric (fabric.go)
	metricsLn net.Listener
	httpSrv   *http.Server

	root  atomic.Uint64
	table atomic.Pointer[tableView]
	// coord is the server's part in the coordinator election and, while
	// it is elected, the cluster-wide repairs (coordinator.go).
	coord coordinator
	// keep tends the groups of the server's replicas: replication,
	// moves, transfers, followers, takeovers (follower.go, repair.go,
	// failover.go).
	keep keeper

	// splits is the split driver (split.go).
	splits splitter
	// peers are connections to other servers (remote splits, the
	// coordinator's requests, placement).
	peers peerConns
	// rpc serves the wire protocol: connections, the workers and their
	// queue, writes in flight and parked (conn.go, workers.go, write.go).
	rpc rpcServer

	created  time.Time // when New made the server (lease.go)
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup // background goroutines: accept, table, membership, coordinator, ticker

	fatal   chan error            // the first asynchronous failure; Serve returns it
	failure atomic.Pointer[error] // the same, for /healthz
	done    chan struct{}

	// lifecycle is held by Start while it starts and by Close while it
	// shuts down, so that a Close during Start waits for it.
	lifecycle sync.Mutex

	mu struct {
		sync.Mutex
		state    state
		conns    map[*conn]struct{}
		perHost  map[string]int // open connections by client IP
		member   regiontable.Registration
		closeErr error
	}
}

type state uint8

const (
	stateNew state = iota
	stateStarting
	stateRunning
	stateClosed
)

// New validates opts and returns a server that does nothing until Start.
func New(opts Options) (*Server, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := NewMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		metrics: m,
		wopts:   wire.Options{MaxFrameSize: opts.MaxFrameSize, WriteTimeout: opts.WriteTimeout},
		fatal:   make(chan error, 1),
		done:    make(chan struct{}),
	}
	s.splits = splitter{s: s, reqs: make(chan blink.Ptr, 256)}
	s.coord.s = s
	s.keep.s = s
	s.rpc.s = s
	s.hosting.s = s
	s.peerOpts = s.wopts
	s.peerOpts.TLS = opts.PeerTLS
	s.authz = opts.ClientCertAuth || opts.TLS != nil && opts.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	s.reps.own = newReplica(s)
	s.created = time.Now()
	s.table.Store(newTableView(regiontable.State{}))
	s.mu.conns = make(map[*conn]struct{})
	s.mu.perHost = make(map[string]int)
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.keep.leaderChanges = make(chan raft.Observation, 16)
	return s, nil
}

// Start brings the server up and returns once it serves: it locks the data
// directory, removes the region files an earlier run of it left, makes its
// region anew and rebuilds it from the snapshot and the log (doc.go),
// makes sure the cluster has a root meganode, binds the RPC, one-sided and
// metrics listeners, registers the region with the tcp and shm providers,
// publishes the region and then the member in the region table, and starts
// the workers and the accept loop. ctx bounds the startup (region table
// calls); the server runs until Close. On error everything started is
// stopped again (a region that was opened is closed cleanly).
func (s *Server) Start(ctx context.Context) error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.mu.Lock()
	if s.mu.state != stateNew {
		s.mu.Unlock()
		return ErrStarted
	}
	s.mu.state = stateStarting
	s.mu.Unlock()
	if err := s.start(ctx); err != nil {
		s.log.Error("server: start failed", slog.Any("err", err))
		_ = s.closeLocked()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.state = stateRunning
	s.log.Info("server: serving", slog.String("server", s.opts.ServerID), slog.String("rpc", s.rpcAddr),
		slog.String("rdma", s.responder.Addr()), slog.String("metrics", s.MetricsAddr()), slog.Uint64("region", uint64(s.reps.own.regionID)),
		slog.Uint64("epoch", s.reps.own.epoch), slog.String("root", blink.Ptr(s.root.Load()).String()), slog.Int("cores", s.opts.Cores))
	return nil
}

func (s *Server) start(ctx context.Context) error {
	var err error
	if s.dir, err = openDataDir(s.opts.DataDir); err != nil {
		return err
	}
	if err := s.dir.linkSnapshots(s.opts.SnapshotDir); err != nil {
		return err
	}
	if err := s.openLog(); err != nil {
		return err
	}
	if err := s.openRegion(ctx); err != nil {
		return err
	}
	if err := s.openRaftListener(); err != nil {
		return err
	}
	// Bind the listeners and join the members before the groups start: a
	// restart replays the regions' logs for seconds, and a server missing
	// from the members that long would be taken for dead and its replicas
	// moved (repair.go). Connections wait in the listen backlog until the
	// server accepts them, once it serves.
	if err := s.listen(); err != nil {
		return err
	}
	if s.metricsLn != nil {
		// Served from now on: /healthz answers during a long replay and
		// /readyz says "starting".
		s.httpSrv = s.newMetricsServer()
		s.goBackground(s.serveMetrics)
	}
	if err := s.registerMember(ctx); err != nil {
		return err
	}
	if f := s.opts.TestingKnobs.BeforeGroups; f != nil {
		f()
	}
	// Followers first: a restarted cluster's groups need each other's
	// replicas to elect their leaders.
	logged, err := s.wal.Regions()
	if err != nil {
		return fmt.Errorf("server: list the log's regions: %w", err)
	}
	s.hosting.waitOutLeases(len(logged))
	if err := s.keep.openLoggedFollowers(); err != nil {
		return err
	}
	lead, err := s.startGroup(ctx)
	if err != nil {
		return err
	}
	if lead {
		err = s.ensureRoot(ctx)
	} else {
		err = s.loadRoot(ctx)
	}
	if err != nil {
		return err
	}
	s.hosting.openSHM()
	if lead {
		if err := s.hosting.serve(ctx, s.reps.own); err != nil {
			return err
		}
	}
	s.metrics.attach(s)
	s.rpc.queue = make(chan job, s.opts.QueueDepth)
	for i := 0; i < s.opts.Cores; i++ {
		s.rpc.workers.Add(1)
		go s.rpc.worker()
	}
	s.goBackground(s.splits.splitLoop)
	s.goBackground(s.rpc.acceptLoop)
	s.goBackground(s.rpc.utilizationLoop)
	s.goBackground(s.followTable)
	s.goBackground(s.keepMembership)
	s.goBackground(s.coord.coordinate)
	s.goBackground(s.keep.replicaLoop)
	return nil
}

func (s *Server) goBackground(f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// listen binds the RPC, one-sided and metrics listeners.
func (s *Server) listen() error {
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("server: listen for RPC on %s: %w", s.opts.Listen, err)
	}
	s.rpcLn = ln
	s.rpcAddr = s.opts.AdvertiseAddr
	if s.rpcAddr == "" {
		s.rpcAddr = advertise(ln.Addr().String())
	}
	radv := ""
	if _, port, _ := net.SplitHostPort(s.opts.RDMAListen); port != "0" {
		radv = advertise(s.opts.RDMAListen)
	}
	s.responder, err = rdma.Listen(s.opts.RDMAListen, rdma.TCPOptions{AdvertiseAddr: radv, Logger: s.log,
		IdleTimeout: s.opts.IdleTimeout, FrameTimeout: s.opts.FrameTimeout, TLS: s.opts.TLS,
		MaxConns: s.opts.MaxConnections, MaxConnsPerHost: s.opts.MaxConnectionsPerHost})
	if err != nil {
		return fmt.Errorf("server: listen for one-sided reads on %s: %w", s.opts.RDMAListen, err)
	}
	if err := s.openFabric(); err != nil {
		return err
	}
	if s.opts.MetricsListen != "" {
		if s.metricsLn, err = net.Listen("tcp", s.opts.MetricsListen); err != nil {
			return fmt.Errorf("server: listen for metrics on %s: %w", s.opts.MetricsListen, err)
		}
	}
	return nil
}

// shmTableDir is where the shm registration table goes: ShmDir when it is
// usable, else the provider's default.
func (s *Server) shmTableDir() string {
	if usableDir(s.opts.ShmDir) {
		return s.opts.ShmDir
	}
	return ""
}

func (s *Server) memberEntry() regiontable.Member {
	m := regiontable.Member{
		ID:       s.opts.ServerID,
		RPCAddr:  s.rpcAddr,
		RaftAddr: s.mux.Addr().String(),
		ReadAddr: s.responder.Addr(),
		HostID:   s.opts.HostID,
		Version:  s.opts.Version,
		Features: regiontable.FeatureVersions,
	}
	m.Fabric = regiontable.FormatFabricEndpoints(s.fabricEndpoints())
	if s.opts.TestingKnobs.NoVersions {
		m.Features = ""
	}
	return m
}

// registerMember publishes the member, waiting up to RegisterWait for the
// entry of a crashed predecessor with the same ID to expire.
func (s *Server) registerMember(ctx context.Context) error {
	deadline := time.Now().Add(s.opts.RegisterWait)
	logged := false
	for {
		reg, err := s.opts.Store.RegisterMember(ctx, s.memberEntry())
		if err == nil {
			s.mu.Lock()
			closed := s.mu.state == stateClosed
			if !closed {
				s.mu.member = reg
			}
			s.mu.Unlock()
			if closed {
				// Close ran meanwhile (keepMembership registering
				// again): leave at once.
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = reg.Close(cctx)
				cancel()
				return ErrClosed
			}
			return nil
		}
		if !errors.Is(err, regiontable.ErrMemberExists) || time.Now().After(deadline) {
			return fmt.Errorf("server: register member %s: %w", s.opts.ServerID, err)
		}
		if s.evictPredecessor(ctx) {
			continue
		}
		if !logged {
			s.log.Warn("server: a member with our ID is registered (a crashed predecessor?); waiting for its lease to expire",
				slog.String("server", s.opts.ServerID), slog.Duration("wait", s.opts.RegisterWait))
			logged = true
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("server: register member %s: %w", s.opts.ServerID, ctx.Err())
		}
	}
}

// evictPredecessor removes the member entry of our ID when it is a crashed
// predecessor's: one on this host (HostID) with the RPC address this
// server listens on now. No live process on this host can hold that
// address, so the entry's lease would only delay the restart by its TTL.
// It reports whether it removed the entry.
func (s *Server) evictPredecessor(ctx context.Context) bool {
	ms, err := s.opts.Store.Members(ctx)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.ID != s.opts.ServerID || m.HostID != s.opts.HostID || m.RPCAddr != s.rpcAddr {
			continue
		}
		ok, err := s.opts.Store.EvictMember(ctx, m)
		if ok {
			s.log.Warn("server: removed the member entry of a crashed predecessor (same host, same RPC address)", slog.String("server", m.ID), slog.String("rpc", m.RPCAddr))
		} else if err != nil {
			s.log.Warn("server: could not remove a crashed predecessor's member entry", slog.Any("err", err))
		}
		return ok
	}
	return false
}

// keepMembership registers the member again whenever its lease is lost.
func (s *Server) keepMembership() {
	for {
		s.mu.Lock()
		reg := s.mu.member
		s.mu.Unlock()
		if reg == nil {
			return
		}
		select {
		case <-s.bgCtx.Done():
			return
		case <-reg.Done():
		}
		if s.bgCtx.Err() != nil {
			return
		}
		s.log.Error("server: membership lost; registering again", slog.Any("err", reg.Err()))
		for s.bgCtx.Err() == nil {
			ctx, cancel := context.WithTimeout(s.bgCtx, 10*time.Second)
			// Revoke the lost lease first: an etcd that restarted
			// restores it, and our old key would hold the ID for a TTL.
			err := reg.Close(ctx)
			if err == nil {
				err = s.registerMember(ctx)
			}
			cancel()
			if err == nil {
				s.log.Info("server: registered again")
				break
			}
			s.log.Error("server: register again", slog.Any("err", err))
			select {
			case <-time.After(time.Second):
			case <-s.bgCtx.Done():
			}
		}
	}
}

// Serve runs Start and then serves until ctx ends or an asynchronous
// failure stops the server, and closes it. It returns nil after a shutdown
// asked for through ctx (also while Start runs) or Close.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped while starting (a long log replay, say), as asked.
			s.log.Info("server: stopped while starting", slog.Any("err", err))
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
		return s.Close()
	case err := <-s.fatal:
		s.log.Error("server: stopping after a failure", slog.Any("err", err))
		return errors.Join(err, s.Close())
	case <-s.done:
		return nil
	}
}

// failed records an asynchronous failure that must stop the server.
func (s *Server) failed(err error) {
	s.failure.CompareAndSwap(nil, &err)
	select {
	case s.fatal <- err:
	default:
	}
}

// Addr returns the RPC address clients use (the advertised address). Like
// the other accessors it is valid once Start returned.
func (s *Server) Addr() string { return s.rpcAddr }

// ListenAddr returns the address the RPC listener is bound to (Addr
// differs when Options.AdvertiseAddr is set).
func (s *Server) ListenAddr() string { return s.rpcLn.Addr().String() }

// ReadAddr returns the tcp one-sided responder's address.
func (s *Server) ReadAddr() string {
	if s.responder == nil {
		return ""
	}
	return s.responder.Addr()
}

// MetricsAddr returns the metrics listener's address, or "" when off.
func (s *Server) MetricsAddr() string {
	if s.metricsLn == nil {
		return ""
	}
	return s.metricsLn.Addr().String()
}

// RegionID returns the ID of the server's region (0 before Start).
func (s *Server) RegionID() uint32 { return s.reps.own.regionID }

// Epoch returns the region's epoch for this run.
func (s *Server) Epoch() uint64 { return s.reps.own.epoch }

// Root returns the root meganode pointer as the server knows it.
func (s *Server) Root() blink.Ptr { return blink.Ptr(s.root.Load()) }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Done is closed when Close has finished.
func (s *Server) Done() <-chan struct{} { return s.done }

// Close shuts the server down gracefully: it leaves the region table's
// members (clients stop finding it), stops accepting connections and
// reading requests, lets the workers finish every request already queued
// and flushes their replies, closes the connections, revokes one-sided
// access to the region, snapshots the region, and closes it and removes
// its file (and its followers' files and the shm registration table: the
// log and the snapshots hold everything). It is safe to call more than
// once and from any goroutine; every call returns the first call's result
// once it is done.
func (s *Server) Close() error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	return s.closeLocked()
}

// closeLocked is Close. REQUIRES: s.lifecycle held.
func (s *Server) closeLocked() error {
	s.mu.Lock()
	if s.mu.state == stateClosed {
		s.mu.Unlock()
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.mu.closeErr
	}
	s.mu.state = stateClosed
	member := s.mu.member
	s.mu.member = nil
	s.mu.Unlock()

	err := s.shutdown(member)
	s.mu.Lock()
	s.mu.closeErr = err
	s.mu.Unlock()
	close(s.done)
	return err
}

func (s *Server) shutdown(member regiontable.Registration) error {
	var errs []error
	s.bgCancel()
	s.rpc.closeParking()
	if member != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := member.Close(ctx); err != nil {
			s.log.Warn("server: leave the region table", slog.Any("err", err))
		}
		cancel()
	}
	if s.rpcLn != nil {
		_ = s.rpcLn.Close()
	}
	// Stop reading requests; queued ones finish and their replies flush.
	s.mu.Lock()
	for c := range s.mu.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	s.rpc.conns.Wait()
	if s.rpc.queue != nil {
		close(s.rpc.queue)
	}
	s.rpc.workers.Wait()
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.httpSrv.Shutdown(ctx)
		cancel()
	} else if s.metricsLn != nil {
		_ = s.metricsLn.Close()
	}
	s.bg.Wait()
	s.closePeers()
	if s.shm != nil {
		errs = append(errs, s.shm.Close())
	}
	for _, f := range s.fabric {
		errs = append(errs, f.Close())
	}
	if s.responder != nil {
		errs = append(errs, s.responder.Close())
	}
	s.metrics.detach()
	errs = append(errs, s.stopGroup(), s.keep.closeFollowers())
	if s.mux != nil {
		errs = append(errs, s.mux.Close())
	}
	if s.reps.own.sm != nil {
		errs = append(errs, s.reps.own.sm.Close())
	}
	// After the machines: a served region a machine discards is retired.
	errs = append(errs, s.hosting.closeRetired())
	errs = append(errs, s.closeLog())
	if s.dir != nil {
		errs = append(errs, s.dir.close())
	}
	err := errors.Join(errs...)
	if err != nil {
		s.log.Error("server: stopped with errors", slog.Any("err", err))
	} else {
		s.log.Info("server: stopped cleanly", slog.String("server", s.opts.ServerID))
	}
	return err
}
