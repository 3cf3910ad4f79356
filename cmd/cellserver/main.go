// Command cellserver runs a Cell server (package server). With no flags it
// is a complete single-node store: an embedded etcd holding the region
// table (data under <data-dir>/etcd) and the server, with its region under
// ./cell-data. With --etcd-initial-cluster its embedded etcd is one member
// of an etcd cluster that several servers embed (the first three of a
// development cluster, say), so that losing any one of them loses no
// region table. With --etcd-endpoints it joins an external etcd cluster
// instead. SIGTERM or SIGINT shut it down cleanly: it stops accepting
// requests, finishes those in flight, revokes one-sided access, snapshots
// its region, removes its region files and shm table (the log and the
// snapshots hold everything) and stops etcd.
//
// Every flag has an environment variable: --data-dir is CELL_DATA_DIR, and
// so on (the command line wins). The flags are one table, options.go: a
// row per flag, from which the flag set, the environment and -h come, and
// docs/flags.md is made (go test ./cmd/cellserver -run TestFlagsDoc
// -update); adding a flag is a row there and, for a server option, its
// field in server.Options. --version prints the build's version and
// VCS revision (package buildinfo), which the server also publishes with
// its member entry. Startup errors print one line and exit
// with status 1 (2 for bad flags).
//
// TLS on the RPC port takes etcd's flags (docs/tls.md): --cert-file,
// --key-file, --trusted-ca-file and --client-cert-auth for the port,
// --peer-cert-file, --peer-key-file and --peer-trusted-ca-file for the
// calls this server makes to the others (--peer-client-cert-auth is for
// the raft port). The files are read again when they change.
//
// 'cellserver wipe --data-dir DIR' deletes a stopped server's data
// directory and the region files named after it (in --shm-dir, the
// hugetlbfs mounts and DIR), also once DIR itself was deleted; it refuses
// while a server holds DIR's LOCK.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellstore/cell/internal/buildinfo"
	"github.com/cellstore/cell/internal/failpoint"
	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
	"github.com/cellstore/cell/server"
)

// version is set at link time (-ldflags "-X main.version=..."); unset,
// the version is the build's (package buildinfo).
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "wipe" {
		return runWipe(args[1:], stderr)
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if errors.Is(err, errVersion) {
		fmt.Fprint(stdout, buildinfo.Read(version).String("cellserver"))
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "cellserver: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, cfg, log); err != nil {
		fmt.Fprintf(stderr, "cellserver: %v\n", err)
		return 1
	}
	return 0
}

// runWipe is 'cellserver wipe': it deletes a stopped server's data
// directory and its region files (server.Wipe), listing what it removed.
func runWipe(args []string, stderr io.Writer) int {
	cfg, err := parseWipeFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "cellserver wipe: %v\n", err)
		return 2
	}
	removed, err := server.Wipe(cfg.dataDir, cfg.shmDir)
	for _, p := range removed {
		fmt.Fprintf(stderr, "cellserver wipe: removed %s\n", p)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cellserver wipe: %v\n", err)
		return 1
	}
	if len(removed) == 0 {
		fmt.Fprintf(stderr, "cellserver wipe: nothing to remove for %s\n", cfg.dataDir)
	}
	return 0
}

// serve wires etcd (embedded or external), the region table and the server
// together and runs until ctx ends.
func serve(ctx context.Context, cfg *config, log *slog.Logger) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	knobs, err := testingKnobs(log)
	if err != nil {
		return err
	}
	endpoints := cfg.etcdEndpoints
	if len(endpoints) == 0 {
		e, err := startEtcd(cfg, log, cancel)
		if err != nil {
			return err
		}
		defer e.Close()
		endpoints = e.Endpoints()
	}
	tc, err := tlsConfigs(cfg)
	if err != nil {
		return err
	}
	store, err := openTable(ctx, cfg, endpoints, tc, log)
	if err != nil {
		return err
	}
	defer store.Close()
	srv, err := server.New(serverOptions(cfg, store, tc, knobs, log))
	if err != nil {
		return err
	}
	if err := srv.Serve(ctx); err != nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// startEtcd starts the embedded etcd (no --etcd-endpoints); its failure
// cancels the server with the cause.
func startEtcd(cfg *config, log *slog.Logger, cancel context.CancelCauseFunc) (*embedded.Etcd, error) {
	e, err := embedded.Start(embedded.Options{
		Dir:            filepath.Join(cfg.srv.DataDir, "etcd"),
		ClientAddr:     cfg.etcdListen,
		PeerAddr:       cfg.etcdPeerListen,
		Name:           cfg.etcdName,
		InitialCluster: cfg.etcdCluster,
		Logger:         log,
		ClientTLS:      cfg.tls,
		PeerTLS:        etcdPeerTLS(cfg),
	})
	if err != nil {
		return nil, err
	}
	go func() {
		if err, ok := <-e.Err(); ok && err != nil {
			cancel(fmt.Errorf("embedded etcd failed: %w", err))
		}
	}()
	return e, nil
}

// openTable connects to the region table in etcd at endpoints, checks
// that etcd answers within 10 s, and turns etcd's roles on (--etcd-auth).
func openTable(ctx context.Context, cfg *config, endpoints []string, tc tlsConfs, log *slog.Logger) (*regiontable.Etcd, error) {
	store, err := regiontable.OpenEtcd(endpoints, regiontable.EtcdOptions{Prefix: cfg.etcdPrefix, LeaseTTL: cfg.leaseTTL, Logger: log,
		TLS: tc.etcd(endpoints)})
	if err != nil {
		return nil, err
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = store.Root(pctx)
	pcancel()
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("etcd at %v does not answer: %w", endpoints, err)
	}
	if cfg.etcdAuth {
		if err := enableEtcdRoles(ctx, cfg, store, log); err != nil {
			store.Close()
			return nil, err
		}
	}
	return store, nil
}

// serverOptions are the server's options: those the flags set, with the
// region table, the TLS configurations, the test hooks and the logger.
func serverOptions(cfg *config, store regiontable.Store, tc tlsConfs, knobs server.TestingKnobs, log *slog.Logger) server.Options {
	o := cfg.srv
	o.Store = store
	o.Version = buildinfo.Version(version)
	o.Logger = log
	o.TestingKnobs = knobs
	o.TLS = tc.rpc
	o.ClientCertAuth = cfg.tls.ClientCertAuth
	o.PeerTLS = tc.peer
	o.RaftTLS = tc.raft
	return o
}

// enableEtcdRoles turns etcd's roles on (--etcd-auth) unless they are on
// already: the users of the development certificates' CommonNames and
// this server's own (--peer-cert-file's) as cell-server. Every server of
// an embedded cluster may run it; the first one turns auth on, the others
// find it on and go on.
func enableEtcdRoles(ctx context.Context, cfg *config, store *regiontable.Etcd, log *slog.Logger) error {
	users := regiontable.DevEtcdUsers()
	cn, err := certCommonName(cfg.peerTLS.CertFile)
	if err != nil {
		return fmt.Errorf("--etcd-auth: %w", err)
	}
	if cn == "" || cn == regiontable.EtcdRootUser {
		return fmt.Errorf("--etcd-auth: %s has CommonName %q, which cannot be an etcd user of role cell-server", cfg.peerTLS.CertFile, cn)
	}
	users[cn] = tlsconf.RoleServer
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	res, err := regiontable.EnableRoles(rctx, store.Client(), regiontable.RolesOptions{Prefix: cfg.etcdPrefix, Users: users, IfAuthOff: true})
	if err != nil {
		return fmt.Errorf("--etcd-auth: %w", err)
	}
	switch {
	case res.Enabled:
		log.Info("etcd roles on: users cell-server, cell-admin, cell-client, root and this server's certificate name", slog.String("common_name", cn), slog.String("prefix", cfg.etcdPrefix))
	case res.WasOn:
		log.Debug("etcd auth is on already")
	}
	return nil
}

// certCommonName is the CommonName of the first certificate in the PEM file
// path.
func certCommonName(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return "", fmt.Errorf("%s: no certificate", path)
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return c.Subject.CommonName, nil
	}
}

// testingKnobs are the server's test hooks that the durability tests turn
// on in a cellserver process through the environment. Each logs loudly:
// they break the guarantees on purpose.
func testingKnobs(log *slog.Logger) (server.TestingKnobs, error) {
	var k server.TestingKnobs
	if os.Getenv("CELL_TESTING_ACK_BEFORE_COMMIT") == "1" {
		k.AckBeforeCommit = true
		log.Warn("cellserver: TESTING KNOB: writes are acknowledged before they are committed; acknowledged writes WILL be lost")
	}
	if os.Getenv("CELL_TESTING_IGNORE_LEASE") == "1" {
		k.IgnoreLease = true
		log.Warn("cellserver: TESTING KNOB: regions are served without read leases; a deposed or paused host WILL answer stale reads")
	}
	if spec := os.Getenv("CELL_TESTING_FAILPOINTS"); spec != "" {
		// Enabled for the process's life: a test restarts the process
		// without the variable to turn them off.
		if _, err := failpoint.EnableSpec(spec); err != nil {
			return k, fmt.Errorf("CELL_TESTING_FAILPOINTS: %w", err)
		}
		log.Warn("cellserver: TESTING KNOB: failpoints enabled; this process may kill itself or stall on purpose", slog.String("failpoints", spec))
	}
	return k, nil
}

// tlsConfigs are the RPC port's server configuration and the client
// configuration this server calls the other servers' RPC ports with, both
// nil without TLS on the RPC port. They read their files again when the
// files change.
func tlsConfigs(cfg *config) (tlsConfs, error) {
	var tc tlsConfs
	if cfg.tls.Enabled() {
		src, err := tlsconf.NewSource(cfg.tls)
		if err != nil {
			return tc, fmt.Errorf("TLS of the RPC port: %w", err)
		}
		tc.rpc = src.ServerConfig()
	}
	if cfg.peerTLS.Enabled() {
		psrc, err := tlsconf.NewSource(cfg.peerTLS)
		if err != nil {
			return tc, fmt.Errorf("peer TLS: %w", err)
		}
		tc.peer = psrc.ClientConfig("")
	}
	if cfg.peerTLS.CertFile != "" {
		// Raft's port: peers prove the server role with their
		// certificates, so they are always required there.
		f := cfg.peerTLS
		f.ClientCertAuth = true
		rsrc, err := tlsconf.NewSource(f)
		if err != nil {
			return tc, fmt.Errorf("raft TLS: %w", err)
		}
		tc.raft = rsrc.ServerConfig()
	}
	return tc, nil
}

// tlsConfs are the TLS configurations a cellserver runs with, nil where
// plain TCP.
type tlsConfs struct {
	rpc  *tls.Config // the RPC and one-sided read ports (server side)
	peer *tls.Config // calls to other servers and to etcd (client side)
	raft *tls.Config // the raft port (server side)
}

// etcd is the configuration of the connection to etcd at endpoints: the
// peer one (this server's certificate, the peers' CAs) when they are
// https://, as the embedded etcd's are when --cert-file is set.
func (tc tlsConfs) etcd(endpoints []string) *tls.Config {
	for _, ep := range endpoints {
		if strings.HasPrefix(ep, "https://") {
			return tc.peer
		}
	}
	return nil
}

// etcdPeerTLS is the embedded etcd's peer port TLS: the peer files, with
// --peer-client-cert-auth, when --peer-cert-file is set.
func etcdPeerTLS(cfg *config) tlsconf.Files {
	if cfg.peerTLS.CertFile == "" {
		return tlsconf.Files{}
	}
	return cfg.peerTLS
}
