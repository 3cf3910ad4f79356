package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/server"
	"github.com/cellstore/cell/wire"
)

// config is the parsed command line.
type config struct {
	dataDir        string
	listen         string
	advertise      string
	rdmaListen     string
	raftListen     string
	metricsListen  string
	etcdEndpoints  []string
	etcdListen     string
	etcdPeerListen string
	etcdName       string
	etcdCluster    string
	etcdPrefix     string
	cores          int
	regionSize     uint64
	meganodeSize   uint64
	nodeSize       int
	hugepages      meganode.HugepageMode
	shmDir         string
	snapshotDir    string
	prefault       bool
	shmGroup       int
	serverID       string
	logLevel       slog.Level
	splitPlacement server.Placement
	splitBelow     int
	splitFill      float64
	leaseTTL       time.Duration
	replicas       int
	raftHeartbeat  time.Duration
	snapThreshold  uint64
	snapLogBytes   uint64
	snapInterval   time.Duration
	deadAfter      time.Duration
	orphanAge      time.Duration
	// balanceInterval is --balance-interval; 0 (never) becomes the
	// server's negative.
	balanceInterval time.Duration
	// Resource limits (docs/limits.md). Timeouts of 0 (never) become the
	// server's negative.
	idleTimeout     time.Duration
	frameTimeout    time.Duration
	maxConns        int
	maxConnsPerHost int
	maxInflight     int
	maxRangeRows    int
	maxRangeBytes   int
	maxRequestBytes int
	// TLS (docs/tls.md), in etcd's terms: the RPC port's files, and the
	// peer files this server presents and verifies when it calls other
	// servers (and, in a change to come, on its raft port).
	tls, peerTLS tlsconf.Files
	// etcdAuth: turn etcd's roles on at start (--etcd-auth).
	etcdAuth bool
	// fabric configures one-sided reads over libfabric (--provider
	// fabric): an endpoint per --fabric-provider; none without.
	fabric []rdma.FabricOptions
}

// errHelp is returned for -h: usage was printed, exit 0.
var errHelp = errors.New("help requested")

// errVersion is returned for --version: print the build, exit 0.
var errVersion = errors.New("version requested")

// envName is the environment variable standing for a flag:
// --data-dir is CELL_DATA_DIR.
func envName(flagName string) string {
	return "CELL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args. Every flag's default comes from its environment
// variable when that is set, and the command line overrides both.
func parseFlags(args []string, out io.Writer) (*config, error) {
	fs := flag.NewFlagSet("cellserver", flag.ContinueOnError)
	fs.SetOutput(out)
	var (
		cfg                       config
		endpoints, hugepages      string
		regionSize, meganodeSize  string
		nodeSize, cores, logLevel string
		placement, below, fill    string
		leaseTTL                  string
		raftHeartbeat, snapEvery  string
		snapThreshold, replicas   string
		snapLogBytes              string
		deadAfter, balanceEvery   string
		prefault, orphanAge       string
		shmGroup                  string
		idle, frameTimeout        string
		maxConns, maxPerHost      string
		maxInflight, maxRows      string
		maxRangeBytes, maxRequest string
		clientAuth, peerAuth      string
		etcdAuth                  string
		provider, fabricProgress  string
		fabricProviders, fabricAt string
	)
	str := func(p *string, name, def, usage string) {
		if v, ok := os.LookupEnv(envName(name)); ok {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+envName(name)+")")
	}
	str(&cfg.dataDir, "data-dir", "./cell-data", "directory of the server's state: the log (wal/), snapshots, region file, embedded etcd's data")
	str(&cfg.snapshotDir, "snapshot-dir", "", "directory of the regions' raft snapshots, a disk apart from the log's (they go in cell-<hash of --data-dir>-snapshots/ there, linked from <data-dir>/snapshots, and later starts must name the same one or none); default <data-dir>/snapshots")
	str(&cfg.listen, "listen", server.DefaultListen, "RPC address (wire protocol)")
	str(&cfg.advertise, "advertise", "", "RPC address published to clients (default: the listen address; a wildcard host becomes the host name)")
	str(&cfg.rdmaListen, "rdma-listen", server.DefaultRDMAListen, "address of the tcp one-sided read responder")
	str(&provider, "provider", "tcp", "one-sided read providers: tcp (the tcp responder, and shm for clients on this host), or fabric (those and a libfabric endpoint: --fabric-provider; builds with -tags libfabric)")
	str(&fabricProviders, "fabric-provider", "tcp", "libfabric providers of --provider fabric, comma-separated, an endpoint each: verbs (InfiniBand, RoCE), efa, cxi, tcp (tcp;ofi_rxm), shm (this host), or a libfabric provider name")
	str(&fabricAt, "fabric-addr", "", "address the libfabric endpoints bind to (an IP address of the NIC for verbs and tcp; not shm's); default: the --rdma-listen host for tcp, the provider's choice for others")
	str(&fabricProgress, "fabric-progress", "", "progress of the libfabric endpoint: tick, auto or conn; default: the provider's (tick for shm, auto for tcp, conn for verbs, efa, cxi)")
	str(&cfg.raftListen, "raft-listen", server.DefaultRaftListen, "address of the raft listener shared by the raft groups of all the server's regions")
	str(&cfg.metricsListen, "metrics-listen", server.DefaultMetricsListen, "address of /metrics and /debug/pprof/; empty turns it off")
	str(&endpoints, "etcd-endpoints", "", "comma-separated endpoints of an external etcd cluster; empty starts an embedded etcd")
	str(&cfg.etcdListen, "etcd-listen", "127.0.0.1:2379", "client address of the embedded etcd")
	str(&cfg.etcdPeerListen, "etcd-peer-listen", "127.0.0.1:2380", "peer address of the embedded etcd")
	str(&cfg.etcdCluster, "etcd-initial-cluster", "", "the members of a new etcd cluster that several servers embed, in etcd's form: name=http://host:peerport,... (this server's --etcd-name among them, its URL the one it advertises to its peers); empty: the embedded etcd is a cluster of its own. Read only when the etcd data directory is empty")
	str(&cfg.etcdName, "etcd-name", "", "name of the embedded etcd member (default: cell alone, the --server-id with --etcd-initial-cluster)")
	str(&cfg.etcdPrefix, "etcd-prefix", "/cell", "key prefix of the region table in etcd")
	str(&cores, "cores", "1", "worker goroutines doing tree work (the paper's server cores)")
	str(&regionSize, "region-size", "1GiB", "size of a new region (KiB, MiB, GiB suffixes)")
	str(&meganodeSize, "meganode-size", "64MiB", "size of a meganode")
	str(&nodeSize, "node-size", "1KiB", "B-link node size, a power of two from 512 to 8192")
	str(&hugepages, "hugepages", "auto", "region backing: auto (hugetlbfs, else --shm-dir, else a file in --data-dir), on (hugetlbfs), off (a file in --data-dir)")
	str(&cfg.shmDir, "shm-dir", server.DefaultShmDir, "tmpfs directory of the region files (with --hugepages auto and no hugetlbfs) and of the shm one-sided read table; region files are named cell-<hash of --data-dir>-<region>, and 'cellserver wipe' removes them")
	str(&shmGroup, "shm-group", "", "a group (name or ID) given the region files and the shm one-sided read table, mode 0640, so that clients running as other users of the group can read one-sided over shared memory; default: the server's user only (0600)")
	str(&prefault, "prefault", "false", "commit each region's memory when it is made (a host short of memory fails the start, not a later write with SIGBUS); default: a region takes memory as it is used")
	str(&cfg.serverID, "server-id", "", "server ID in the region table (default: derived from the host name and --listen)")
	str(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	str(&leaseTTL, "lease-ttl", "5s", "lease of the server's membership in the region table (whole seconds): a dead server disappears after it")
	str(&placement, "split-placement", "auto", "where a meganode split puts the new meganode: auto (remote while this server holds few meganodes, the paper's rule), local, remote")
	str(&below, "split-remote-below", strconv.Itoa(server.DefaultSplitRemoteBelow), "auto placement: a server holding fewer meganodes places new ones on the least loaded other server")
	str(&fill, "split-fill", strconv.FormatFloat(server.DefaultSplitFill, 'g', -1, 64), "fraction of a meganode's nodes in use at which it is split, in (0, 1]")
	str(&replicas, "replicas", "1", fmt.Sprintf("replication factor: servers holding each region this server leads, itself included (at most %d); a write is acknowledged once a majority logged it", server.MaxReplicas))
	str(&raftHeartbeat, "raft-heartbeat-timeout", server.DefaultRaftHeartbeatTimeout.String(), "region raft groups' heartbeat and election timeout")
	str(&snapThreshold, "snapshot-threshold", strconv.Itoa(server.DefaultSnapshotThreshold), "log entries past the last snapshot that make a region snapshot")
	str(&deadAfter, "dead-after", server.DefaultDeadAfter.String(), "how long a server may be missing from the members before its replicas are replaced on live servers")
	str(&balanceEvery, "balance-interval", server.DefaultBalanceInterval.String(), "how often the coordinator moves a leadership from a server leading far more regions than the mean; 0 never")
	str(&orphanAge, "orphan-target-age", server.DefaultOrphanTargetAge.String(), "how long a remote split's new meganode may stay frozen before this server asks its source whether the split goes on, and drops it if not")
	str(&snapEvery, "snapshot-interval", server.DefaultSnapshotInterval.String(), "how often a region checks --snapshot-threshold")
	str(&snapLogBytes, "snapshot-log-bytes", "1GiB", "bytes of records applied since the last snapshot that make a region snapshot too, whatever their count (large values)")
	str(&idle, "idle-timeout", server.DefaultIdleTimeout.String(), "close a client connection on which no request started for this long; 0 never")
	str(&frameTimeout, "frame-timeout", server.DefaultFrameTimeout.String(), "close a client connection whose request started and did not arrive whole within this (stalled, slowloris); 0 never")
	str(&maxConns, "max-connections", strconv.Itoa(server.DefaultMaxConnections), "client connections open at once, on the RPC port and (counted apart) on the one-sided read port; more are refused")
	str(&maxPerHost, "max-connections-per-host", strconv.Itoa(server.DefaultMaxConnsPerHost), "client connections open at once from one IP address, on each of the two ports; more are refused")
	str(&maxInflight, "max-inflight-per-connection", strconv.Itoa(server.DefaultMaxInflight), "requests of one connection read and not answered; beyond it the server stops reading that connection until one is answered")
	str(&maxRows, "max-range-rows", strconv.Itoa(server.DefaultMaxRangePairs), "pairs in one range reply; the client pages on")
	str(&maxRangeBytes, "max-range-bytes", "1MiB", "bytes of pairs in one range reply (a reply carries at least one pair); the client pages on")
	str(&maxRequest, "max-request-bytes", "4MiB", "largest request or reply body (a frame less its 32-byte header), at least 64KiB; larger requests are answered FrameTooLarge. Clients must allow as much (wire.Options.MaxFrameSize)")
	str(&cfg.tls.CertFile, "cert-file", "", "certificate of the RPC port (PEM, with any intermediates): serve it, the one-sided read port and the embedded etcd's client port over TLS")
	str(&cfg.tls.KeyFile, "key-file", "", "key of --cert-file")
	str(&cfg.tls.TrustedCAFile, "trusted-ca-file", "", "CAs that verify client certificates on the RPC port (and the other servers' peer certificates)")
	boolStr := func(p *string, name, def, usage string) {
		if v, ok := os.LookupEnv(envName(name)); ok {
			def = v
		}
		*p = def
		fs.Var(bareBool{p}, name, usage+" (env "+envName(name)+")")
	}
	boolStr(&clientAuth, "client-cert-auth", "false", "require a client certificate signed by --trusted-ca-file on the RPC port; its role (OU cell-client, cell-admin, cell-server) decides which ops it may send")
	str(&cfg.peerTLS.CertFile, "peer-cert-file", "", "certificate this server presents when it calls other servers and etcd, and serves on the raft port (which then speaks TLS); role cell-server")
	str(&cfg.peerTLS.KeyFile, "peer-key-file", "", "key of --peer-cert-file")
	str(&cfg.peerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CAs that verify the other servers' certificates when this server calls them")
	boolStr(&peerAuth, "peer-client-cert-auth", "false", "require peer certificates on the embedded etcd's peer port (the raft port, TLS with --peer-cert-file, always requires the cell-server role); the RPC port follows --client-cert-auth")
	boolStr(&etcdAuth, "etcd-auth", "", "turn on etcd's roles at start (users named by certificate CommonNames: cell-server and cell-admin read and write the region table, cell-client reads it; docs/tls.md): default true with an embedded etcd and --client-cert-auth, false otherwise; true with an external etcd turns its roles on if they are off (or use cellctl etcd-roles)")
	showVersion := fs.Bool("version", false, "print the version and VCS revision, then exit")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: cellserver [flags]\n       cellserver wipe [--data-dir DIR] [--shm-dir DIR]\n\nRuns a Cell server. With no flags it is a complete single-node store:\nan embedded etcd and the server, with data under ./cell-data.\n'cellserver wipe' deletes a stopped server's data directory and its\nregion files (in --shm-dir and hugetlbfs too).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	if *showVersion {
		return nil, errVersion
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	for _, ep := range strings.Split(endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			cfg.etcdEndpoints = append(cfg.etcdEndpoints, ep)
		}
	}
	if cfg.cores, err = strconv.Atoi(cores); err != nil || cfg.cores < 1 {
		return nil, fmt.Errorf("--cores %q: want a whole number >= 1", cores)
	}
	if cfg.regionSize, err = parseSize(regionSize); err != nil {
		return nil, fmt.Errorf("--region-size: %w", err)
	}
	if cfg.meganodeSize, err = parseSize(meganodeSize); err != nil {
		return nil, fmt.Errorf("--meganode-size: %w", err)
	}
	ns, err := parseSize(nodeSize)
	if err != nil || ns > 1<<20 {
		return nil, fmt.Errorf("--node-size %q: want a power of two from 512 to 8192", nodeSize)
	}
	cfg.nodeSize = int(ns)
	if cfg.hugepages, err = meganode.ParseHugepageMode(hugepages); err != nil {
		return nil, fmt.Errorf("--hugepages %q: want auto, on or off", hugepages)
	}
	if cfg.prefault, err = strconv.ParseBool(prefault); err != nil {
		return nil, fmt.Errorf("--prefault %q: want true or false", prefault)
	}
	if cfg.leaseTTL, err = time.ParseDuration(leaseTTL); err != nil || cfg.leaseTTL < time.Second || cfg.leaseTTL%time.Second != 0 {
		return nil, fmt.Errorf("--lease-ttl %q: want a whole number of seconds, at least 1s", leaseTTL)
	}
	switch p := server.Placement(placement); p {
	case server.PlaceAuto, server.PlaceLocal, server.PlaceRemote:
		cfg.splitPlacement = p
	default:
		return nil, fmt.Errorf("--split-placement %q: want auto, local or remote", placement)
	}
	if cfg.splitBelow, err = strconv.Atoi(below); err != nil || cfg.splitBelow < 0 {
		return nil, fmt.Errorf("--split-remote-below %q: want a whole number >= 0", below)
	}
	if cfg.splitFill, err = strconv.ParseFloat(fill, 64); err != nil || !(cfg.splitFill > 0 && cfg.splitFill <= 1) {
		return nil, fmt.Errorf("--split-fill %q: want a number in (0, 1]", fill)
	}
	if cfg.replicas, err = strconv.Atoi(replicas); err != nil || cfg.replicas < 1 || cfg.replicas > server.MaxReplicas {
		return nil, fmt.Errorf("--replicas %q: want a whole number from 1 to %d", replicas, server.MaxReplicas)
	}
	if cfg.raftHeartbeat, err = time.ParseDuration(raftHeartbeat); err != nil || cfg.raftHeartbeat < 20*time.Millisecond {
		return nil, fmt.Errorf("--raft-heartbeat-timeout %q: want a duration of at least 20ms", raftHeartbeat)
	}
	if cfg.snapThreshold, err = strconv.ParseUint(snapThreshold, 10, 64); err != nil || cfg.snapThreshold < 1 {
		return nil, fmt.Errorf("--snapshot-threshold %q: want a whole number >= 1", snapThreshold)
	}
	if cfg.snapLogBytes, err = parseSize(snapLogBytes); err != nil || cfg.snapLogBytes < 1<<20 {
		return nil, fmt.Errorf("--snapshot-log-bytes %q: want a size of at least 1MiB", snapLogBytes)
	}
	if cfg.snapInterval, err = time.ParseDuration(snapEvery); err != nil || cfg.snapInterval < time.Second {
		return nil, fmt.Errorf("--snapshot-interval %q: want a duration of at least 1s", snapEvery)
	}
	if cfg.deadAfter, err = time.ParseDuration(deadAfter); err != nil || cfg.deadAfter < time.Second {
		return nil, fmt.Errorf("--dead-after %q: want a duration of at least 1s", deadAfter)
	}
	if cfg.orphanAge, err = time.ParseDuration(orphanAge); err != nil || cfg.orphanAge < time.Second {
		return nil, fmt.Errorf("--orphan-target-age %q: want a duration of at least 1s", orphanAge)
	}
	if cfg.balanceInterval, err = time.ParseDuration(balanceEvery); err != nil || cfg.balanceInterval < 0 {
		return nil, fmt.Errorf("--balance-interval %q: want a duration, 0 for never", balanceEvery)
	}
	if cfg.shmGroup, err = lookupGroup(shmGroup); err != nil {
		return nil, fmt.Errorf("--shm-group %q: %w", shmGroup, err)
	}
	if err := parseProvider(&cfg, provider, fabricProviders, fabricAt, fabricProgress); err != nil {
		return nil, err
	}
	if err := parseLimits(&cfg, idle, frameTimeout, maxConns, maxPerHost, maxInflight, maxRows, maxRangeBytes, maxRequest); err != nil {
		return nil, err
	}
	if err := parseTLS(&cfg, clientAuth, peerAuth); err != nil {
		return nil, err
	}
	if err := parseEtcdAuth(&cfg, etcdAuth); err != nil {
		return nil, err
	}
	if err := cfg.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
	}
	if cfg.serverID == "" {
		cfg.serverID = server.DefaultServerID(cfg.listen)
	}
	if cfg.etcdCluster != "" {
		if len(cfg.etcdEndpoints) > 0 {
			return nil, fmt.Errorf("--etcd-initial-cluster starts an embedded etcd member; --etcd-endpoints uses an external etcd: give one of them")
		}
		if cfg.etcdName == "" {
			cfg.etcdName = cfg.serverID
		}
		if !slices.ContainsFunc(strings.Split(cfg.etcdCluster, ","), func(m string) bool { return strings.HasPrefix(strings.TrimSpace(m), cfg.etcdName+"=") }) {
			return nil, fmt.Errorf("--etcd-initial-cluster %q has no member named %q (--etcd-name)", cfg.etcdCluster, cfg.etcdName)
		}
	}
	return &cfg, nil
}

// parseProvider checks --provider and the fabric flags.
func parseProvider(cfg *config, provider, providers, addr, progress string) error {
	switch provider {
	case rdma.ProviderTCP, "":
		return nil
	case rdma.ProviderFabric:
	default:
		return fmt.Errorf("--provider %q: want tcp or fabric", provider)
	}
	if !rdma.FabricBuilt {
		return fmt.Errorf("--provider fabric: this cellserver was built without libfabric (build with -tags libfabric, libfabric-dev installed)")
	}
	seen := map[string]bool{}
	for _, p := range strings.Split(providers, ",") {
		p = strings.TrimSpace(p)
		lf := rdma.LibfabricName(p)
		if seen[lf] {
			return fmt.Errorf("--fabric-provider %q: %s twice", providers, p)
		}
		seen[lf] = true
		o := rdma.FabricOptions{Provider: p, Progress: progress}
		if lf != "shm" {
			o.Node = addr
		}
		v := o
		v.EnsureDefaults()
		if err := v.Validate(); err != nil {
			return fmt.Errorf("--fabric-provider %q, --fabric-progress %q: %w", p, progress, err)
		}
		cfg.fabric = append(cfg.fabric, o)
	}
	return nil
}

// lookupGroup resolves a group name or numeric ID to a group ID; "" is 0
// (none). A numeric ID need not name a group in /etc/group.
func lookupGroup(name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if gid, err := strconv.Atoi(name); err == nil {
		if gid < 1 {
			return 0, fmt.Errorf("want a group other than root's (ID >= 1)")
		}
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil || gid < 1 {
		return 0, fmt.Errorf("group ID %q: want a number >= 1", g.Gid)
	}
	return gid, nil
}

// bareBool is a flag holding a boolean's text, parsed later, that may be
// given bare as etcd's are (--client-cert-auth means true).
type bareBool struct{ p *string }

func (b bareBool) String() string {
	if b.p == nil {
		return ""
	}
	return *b.p
}
func (b bareBool) Set(v string) error { *b.p = v; return nil }
func (b bareBool) IsBoolFlag() bool   { return true }

// parseTLS checks the TLS flags: each endpoint's files together, and
// those the RPC port needs. Certificate files are read at start (a
// missing one fails it) and again whenever they change.
func parseTLS(cfg *config, clientAuth, peerAuth string) error {
	var err error
	if cfg.tls.ClientCertAuth, err = strconv.ParseBool(clientAuth); err != nil {
		return fmt.Errorf("--client-cert-auth %q: want true or false", clientAuth)
	}
	if cfg.peerTLS.ClientCertAuth, err = strconv.ParseBool(peerAuth); err != nil {
		return fmt.Errorf("--peer-client-cert-auth %q: want true or false", peerAuth)
	}
	if err := cfg.tls.Validate(); err != nil {
		return fmt.Errorf("--cert-file, --key-file, --trusted-ca-file, --client-cert-auth: %w", err)
	}
	if err := cfg.peerTLS.Validate(); err != nil {
		return fmt.Errorf("--peer-cert-file, --peer-key-file, --peer-trusted-ca-file, --peer-client-cert-auth: %w", err)
	}
	switch {
	case cfg.tls.Enabled() && cfg.tls.CertFile == "":
		return errors.New("--trusted-ca-file or --client-cert-auth without --cert-file: the RPC port serves TLS only with a certificate")
	case cfg.tls.Enabled() && !cfg.peerTLS.Enabled():
		return errors.New("--cert-file without --peer-trusted-ca-file (and --peer-cert-file, --peer-key-file where servers require client certificates): this server could not call the other servers' TLS ports")
	case cfg.peerTLS.CertFile != "" && cfg.peerTLS.TrustedCAFile == "":
		return errors.New("--peer-cert-file without --peer-trusted-ca-file: raft over TLS verifies every peer's certificate")
	}
	return nil
}

// wireHeaderSize is the frame header that --max-request-bytes leaves out.
const wireHeaderSize = wire.HeaderSize

// parseLimits parses the resource limit flags into cfg.
func parseLimits(cfg *config, idle, frame, conns, perHost, inflight, rows, rangeBytes, request string) error {
	var err error
	if cfg.idleTimeout, err = time.ParseDuration(idle); err != nil || cfg.idleTimeout < 0 {
		return fmt.Errorf("--idle-timeout %q: want a duration, 0 for never", idle)
	}
	if cfg.frameTimeout, err = time.ParseDuration(frame); err != nil || cfg.frameTimeout < 0 {
		return fmt.Errorf("--frame-timeout %q: want a duration, 0 for never", frame)
	}
	for _, f := range []struct {
		name, val string
		p         *int
	}{
		{"max-connections", conns, &cfg.maxConns},
		{"max-connections-per-host", perHost, &cfg.maxConnsPerHost},
		{"max-inflight-per-connection", inflight, &cfg.maxInflight},
		{"max-range-rows", rows, &cfg.maxRangeRows},
	} {
		if *f.p, err = strconv.Atoi(f.val); err != nil || *f.p < 1 {
			return fmt.Errorf("--%s %q: want a whole number >= 1", f.name, f.val)
		}
	}
	n, err := parseSize(rangeBytes)
	if err != nil || n > 1<<32 {
		return fmt.Errorf("--max-range-bytes %q: want a size up to 4GiB", rangeBytes)
	}
	cfg.maxRangeBytes = int(n)
	if n, err = parseSize(request); err != nil || n < 64<<10 || n > 1<<32-1-wireHeaderSize {
		return fmt.Errorf("--max-request-bytes %q: want a size from 64KiB to below 4GiB", request)
	}
	cfg.maxRequestBytes = int(n)
	return nil
}

// parseSize parses a byte size: a whole number with an optional suffix
// K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (all powers of 1024, any case).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, suffix := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	var shift uint
	switch strings.TrimSuffix(strings.TrimSuffix(suffix, "b"), "i") {
	case "":
		if suffix == "b" || suffix == "" {
			shift = 0
		} else {
			return 0, fmt.Errorf("size %q: unknown unit %q", s, suffix)
		}
	case "k":
		shift = 10
	case "m":
		shift = 20
	case "g":
		shift = 30
	case "t":
		shift = 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q", s, suffix)
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("size %q: want a positive whole number with an optional unit (KiB, MiB, GiB)", s)
	}
	if v > (1<<63)>>shift {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return v << shift, nil
}

// wipeConfig is the command line of 'cellserver wipe'.
type wipeConfig struct {
	dataDir, shmDir string
}

// parseWipeFlags parses the flags of 'cellserver wipe' (after the word).
func parseWipeFlags(args []string, out io.Writer) (*wipeConfig, error) {
	fs := flag.NewFlagSet("cellserver wipe", flag.ContinueOnError)
	fs.SetOutput(out)
	var cfg wipeConfig
	str := func(p *string, name, def, usage string) {
		if v, ok := os.LookupEnv(envName(name)); ok {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+envName(name)+")")
	}
	str(&cfg.dataDir, "data-dir", "./cell-data", "the data directory to delete, with its region files")
	str(&cfg.shmDir, "shm-dir", server.DefaultShmDir, "the tmpfs directory the server's region files may be in")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: cellserver wipe [--data-dir DIR] [--shm-dir DIR]\n\nDeletes the data directory of a stopped server (log, snapshots, embedded\netcd data) and every region file named after it in --shm-dir, the hugetlbfs\nmounts and the directory itself, also when the directory was deleted\nalready. Refused while a server runs on the directory.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return &cfg, nil
}

// parseEtcdAuth reads --etcd-auth: empty is true with an embedded etcd
// whose client port requires client certificates, false otherwise. On, it
// needs that etcd knows who calls: client certificates required and this
// server's certificate (--peer-cert-file) to present.
func parseEtcdAuth(cfg *config, v string) error {
	embeddedAuth := len(cfg.etcdEndpoints) == 0 && cfg.tls.ClientCertAuth
	if v == "" {
		cfg.etcdAuth = embeddedAuth && cfg.peerTLS.CertFile != ""
		return nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("--etcd-auth %q: want true or false", v)
	}
	cfg.etcdAuth = on
	switch {
	case !on:
	case len(cfg.etcdEndpoints) == 0 && !cfg.tls.ClientCertAuth:
		return errors.New("--etcd-auth without --client-cert-auth: etcd names its users by client certificates, which the embedded etcd then does not ask for")
	case cfg.peerTLS.CertFile == "":
		return errors.New("--etcd-auth without --peer-cert-file: this server would have no certificate to present to etcd")
	}
	return nil
}
