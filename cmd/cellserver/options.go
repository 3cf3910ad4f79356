package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/server"
)

// options is cellserver's table of flags, each storing into c: the one
// place a flag is added. A flag of the server's is a row here and its
// field in server.Options; the flag set, the environment variables, -h
// and docs/flags.md (go test ./cmd/cellserver -run TestFlagsDoc -update)
// follow, and the tests hold the defaults to Options.EnsureDefaults and
// the groups' documents to the rows. Checks that join several flags are
// config.check's.
func (c *config) options() []optionGroup {
	s := &c.srv
	return []optionGroup{
		{title: "Server", options: []option{
			{name: "data-dir", def: "./cell-data", value: text(&s.DataDir), serverDefault: "none (required)",
				help: "directory of the server's state: the log (wal/), snapshots, region file, embedded etcd's data"},
			{name: "server-id", value: text(&s.ServerID),
				help: "server ID in the region table (default: derived from the host name and --listen)"},
			{name: "cores", def: "1", value: whole(&s.Cores, 1, 0),
				help: "worker goroutines doing tree work (the paper's server cores)"},
			{name: "log-level", def: "info", value: choice(&c.logLevel, parseLevel, "debug, info, warn or error"),
				help: "log level: debug, info, warn, error"},
		}},
		{title: "Addresses", options: []option{
			{name: "listen", def: server.DefaultListen, value: text(&s.Listen),
				help: "RPC address (wire protocol)"},
			{name: "advertise", value: text(&s.AdvertiseAddr),
				help: "RPC address published to clients (default: the listen address; a wildcard host becomes the host name)"},
			{name: "rdma-listen", def: server.DefaultRDMAListen, value: text(&s.RDMAListen),
				help: "address of the tcp one-sided read responder"},
			{name: "raft-listen", def: server.DefaultRaftListen, value: text(&s.RaftListen),
				help: "address of the raft listener shared by the raft groups of all the server's regions"},
			{name: "metrics-listen", def: server.DefaultMetricsListen, value: text(&s.MetricsListen), serverDefault: "empty (no metrics server)",
				help: "address of /metrics and /debug/pprof/; empty turns it off"},
		}},
		{title: "One-sided reads over libfabric", doc: "rdma.md",
			about: "cellserver makes server.Options' Fabric of these flags: an endpoint per --fabric-provider with --provider fabric, none otherwise. Built without -tags libfabric, cellserver refuses --provider fabric.",
			options: []option{
				{name: "provider", def: "tcp", value: choice(&c.provider, parseProvider, "tcp or fabric"),
					help: "one-sided read providers: tcp (the tcp responder, and shm for clients on this host), or fabric (those and a libfabric endpoint per --fabric-provider; a build with -tags libfabric)"},
				{name: "fabric-provider", def: "tcp", value: text(&c.fabricProviders),
					help: "libfabric providers of --provider fabric, comma-separated, an endpoint each: verbs (InfiniBand, RoCE), efa, cxi, tcp (tcp;ofi_rxm), shm (this host), or a libfabric provider name"},
				{name: "fabric-addr", value: text(&c.fabricAddr),
					help: "address the libfabric endpoints bind to (an IP address of the NIC for verbs and tcp; not shm's); default: the --rdma-listen host for tcp, the provider's choice for others"},
				{name: "fabric-progress", value: text(&c.fabricProgress),
					help: "progress of the libfabric endpoints: tick, auto or conn; default: the provider's (tick for shm, auto for tcp, conn for verbs, efa, cxi)"},
			}},
		{title: "Region table (etcd)", doc: "cluster.md", options: []option{
			{name: "etcd-endpoints", value: list(&c.etcdEndpoints),
				help: "comma-separated endpoints of an external etcd cluster; empty starts an embedded etcd"},
			{name: "etcd-listen", def: "127.0.0.1:2379", value: text(&c.etcdListen),
				help: "client address of the embedded etcd"},
			{name: "etcd-peer-listen", def: "127.0.0.1:2380", value: text(&c.etcdPeerListen),
				help: "peer address of the embedded etcd"},
			{name: "etcd-initial-cluster", value: text(&c.etcdCluster),
				help: "the members of a new etcd cluster that several servers embed, in etcd's form: name=http://host:peerport,... (this server's --etcd-name among them, its URL the one it advertises to its peers); empty: the embedded etcd is a cluster of its own. Read only when the etcd data directory is empty"},
			{name: "etcd-name", value: text(&c.etcdName),
				help: "name of the embedded etcd member (default: cell alone, the --server-id with --etcd-initial-cluster)"},
			{name: "etcd-prefix", def: "/cell", value: text(&c.etcdPrefix),
				help: "key prefix of the region table in etcd"},
		}},
		{title: "Region memory", options: []option{
			{name: "region-size", def: "1GiB", value: size(&s.RegionSize, 0, 0, ""),
				help: "size of a new region (KiB, MiB, GiB suffixes)"},
			{name: "meganode-size", def: "64MiB", value: size(&s.MeganodeSize, 0, 0, ""),
				help: "size of a meganode"},
			{name: "node-size", def: "1KiB", value: size(&s.NodeSize, 0, 1<<20, "a power of two from 512 to 8192"),
				help: "B-link node size, a power of two from 512 to 8192"},
			{name: "hugepages", def: "auto", value: choice(&s.Hugepages, meganode.ParseHugepageMode, "auto, on or off"),
				help: "region backing: auto (hugetlbfs, else --shm-dir, else a file in --data-dir), on (hugetlbfs), off (a file in --data-dir)"},
			{name: "shm-dir", def: server.DefaultShmDir, value: text(&s.ShmDir),
				help: "tmpfs directory of the region files (with --hugepages auto and no hugetlbfs) and of the shm one-sided read table; region files are named cell-<hash of --data-dir>-<region>, and 'cellserver wipe' removes them"},
			{name: "shm-group", value: choice(&s.ShmGroup, lookupGroup, ""),
				help: "a group (name or ID) given the region files and the shm one-sided read table, mode 0640, so that clients running as other users of the group can read one-sided over shared memory; default: the server's user only (0600)"},
			{name: "buddy-extents", def: "false", value: boolean(&s.BuddyExtents),
				help: "make new regions with the power-of-two extent allocator of servers before size classes (region format 2), which those servers can replicate; default: size-class extents (format 3), 29% less extent memory per record of the paper's workload (BENCHMARKS.md §16)"},
			{name: "prefault", def: "false", value: boolean(&s.Prefault),
				help: "commit each region's memory when it is made (a host short of memory fails the start, not a later write with SIGBUS); default: a region takes memory as it is used"},
		}},
		{title: "Replication and failover", doc: "durability.md", options: []option{
			{name: "replicas", def: "1", value: whole(&s.Replicas, 1, server.MaxReplicas),
				help: fmt.Sprintf("replication factor: servers holding each region this server leads, itself included (at most %d); a write is acknowledged once a majority logged it", server.MaxReplicas)},
			{name: "raft-heartbeat-timeout", def: server.DefaultRaftHeartbeatTimeout.String(), value: duration(&s.RaftHeartbeatTimeout, 20*time.Millisecond),
				help: "region raft groups' heartbeat and election timeout"},
			{name: "lease-ttl", def: "5s", value: seconds(&c.leaseTTL),
				help: "lease of the server's membership in the region table (whole seconds): a dead server disappears after it"},
			{name: "dead-after", def: server.DefaultDeadAfter.String(), value: duration(&s.DeadAfter, time.Second),
				help: "how long a server may be missing from the members before its replicas are replaced on live servers"},
			{name: "balance-interval", def: server.DefaultBalanceInterval.String(), value: orNever(&s.BalanceInterval),
				help: "how often the coordinator moves a leadership from a server leading far more regions than the mean; 0 never"},
		}},
		{title: "Snapshots", doc: "durability.md", options: []option{
			{name: "snapshot-dir", value: text(&s.SnapshotDir),
				help: "directory of the regions' raft snapshots, a disk apart from the log's (they go in cell-<hash of --data-dir>-snapshots/ there, linked from <data-dir>/snapshots, and later starts must name the same one or none); default <data-dir>/snapshots"},
			{name: "snapshot-threshold", def: strconv.Itoa(server.DefaultSnapshotThreshold), value: count(&s.SnapshotThreshold, 1),
				help: "log entries past the last snapshot that make a region snapshot"},
			{name: "snapshot-log-bytes", def: "1GiB", value: size(&s.SnapshotLogBytes, 1<<20, 0, "a size of at least 1MiB"),
				help: "bytes of records applied since the last snapshot that make a region snapshot too, whatever their count (large values)"},
			{name: "snapshot-interval", def: server.DefaultSnapshotInterval.String(), value: duration(&s.SnapshotInterval, time.Second),
				help: "how often a region checks --snapshot-threshold"},
		}},
		{title: "Splits", options: []option{
			{name: "split-fill", def: strconv.FormatFloat(server.DefaultSplitFill, 'g', -1, 64), value: fraction(&s.SplitFill),
				help: "fraction of a meganode's nodes in use at which it is split, in (0, 1]"},
			{name: "split-placement", def: "auto", value: choice(&s.SplitPlacement, parsePlacement, "auto, local or remote"),
				help: "where a meganode split puts the new meganode: auto (remote while this server holds few meganodes, the paper's rule), local, remote"},
			{name: "split-remote-below", def: strconv.Itoa(server.DefaultSplitRemoteBelow), value: whole(&s.SplitRemoteBelow, 0, 0),
				help: "auto placement: a server holding fewer meganodes places new ones on the least loaded other server"},
			{name: "orphan-target-age", def: server.DefaultOrphanTargetAge.String(), value: duration(&s.OrphanTargetAge, time.Second),
				help: "how long a remote split's new meganode may stay frozen before this server asks its source whether the split goes on, and drops it if not"},
		}},
		{title: "Resource limits", doc: "limits.md", options: []option{
			{name: "max-request-bytes", def: "4MiB", value: frameBody(&s.MaxFrameSize),
				help: "largest request or reply body (a frame less its 32-byte header), at least 64KiB; larger requests are answered FrameTooLarge. Clients must allow as much (wire.Options.MaxFrameSize)"},
			{name: "frame-timeout", def: server.DefaultFrameTimeout.String(), value: orNever(&s.FrameTimeout),
				help: "close a client connection whose request started and did not arrive whole within this (stalled, slowloris); 0 never"},
			{name: "idle-timeout", def: server.DefaultIdleTimeout.String(), value: orNever(&s.IdleTimeout),
				help: "close a client connection on which no request started for this long; 0 never"},
			{name: "max-connections", def: strconv.Itoa(server.DefaultMaxConnections), value: whole(&s.MaxConnections, 1, 0),
				help: "client connections open at once, on the RPC port and (counted apart) on the one-sided read port; more are refused"},
			{name: "max-connections-per-host", def: strconv.Itoa(server.DefaultMaxConnsPerHost), value: whole(&s.MaxConnectionsPerHost, 1, 0),
				help: "client connections open at once from one IP address, on each of the two ports; more are refused"},
			{name: "max-inflight-per-connection", def: strconv.Itoa(server.DefaultMaxInflight), value: whole(&s.MaxInflightPerConn, 1, 0),
				help: "requests of one connection read and not answered; beyond it the server stops reading that connection until one is answered"},
			{name: "max-range-rows", def: strconv.Itoa(server.DefaultMaxRangePairs), value: whole(&s.MaxRangePairs, 1, 0),
				help: "pairs in one range reply; the client pages on"},
			{name: "max-range-bytes", def: "1MiB", value: size(&s.MaxRangeBytes, 0, 1<<32, "a size up to 4GiB"),
				help: "bytes of pairs in one range reply (a reply carries at least one pair); the client pages on"},
		}},
		{title: "TLS", doc: "tls.md",
			about: "cellserver makes server.Options' TLS, PeerTLS and RaftTLS configurations of these files, and reads the files again when they change; --client-cert-auth is also ClientCertAuth.",
			options: []option{
				{name: "cert-file", value: text(&c.tls.CertFile),
					help: "certificate of the RPC port (PEM, with any intermediates): serve it, the one-sided read port and the embedded etcd's client port over TLS"},
				{name: "key-file", value: text(&c.tls.KeyFile),
					help: "key of --cert-file"},
				{name: "trusted-ca-file", value: text(&c.tls.TrustedCAFile),
					help: "CAs that verify client certificates on the RPC port (and the other servers' peer certificates)"},
				{name: "client-cert-auth", def: "false", bare: true, value: boolean(&c.tls.ClientCertAuth),
					help: "require a client certificate signed by --trusted-ca-file on the RPC port; its role (OU cell-client, cell-admin, cell-server) decides which ops it may send"},
				{name: "peer-cert-file", value: text(&c.peerTLS.CertFile),
					help: "certificate this server presents when it calls other servers and etcd, and serves on the raft port (which then speaks TLS); role cell-server"},
				{name: "peer-key-file", value: text(&c.peerTLS.KeyFile),
					help: "key of --peer-cert-file"},
				{name: "peer-trusted-ca-file", value: text(&c.peerTLS.TrustedCAFile),
					help: "CAs that verify the other servers' certificates when this server calls them"},
				{name: "peer-client-cert-auth", def: "false", bare: true, value: boolean(&c.peerTLS.ClientCertAuth),
					help: "require peer certificates on the embedded etcd's peer port (the raft port, TLS with --peer-cert-file, always requires the cell-server role); the RPC port follows --client-cert-auth"},
				{name: "etcd-auth", bare: true, value: optionalBool(&c.etcdAuthFlag),
					help: "turn on etcd's roles at start (users named by certificate CommonNames: cell-server and cell-admin read and write the region table, cell-client reads it; docs/tls.md): default true with an embedded etcd and --client-cert-auth, false otherwise; true with an external etcd turns its roles on if they are off (or use cellctl etcd-roles)"},
			}},
	}
}

// parseProvider parses --provider.
func parseProvider(s string) (string, error) {
	switch s {
	case rdma.ProviderTCP, rdma.ProviderFabric:
		return s, nil
	}
	return "", fmt.Errorf("provider %q", s)
}

// parseLevel parses --log-level.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// parsePlacement parses --split-placement.
func parsePlacement(s string) (server.Placement, error) {
	switch p := server.Placement(s); p {
	case server.PlaceAuto, server.PlaceLocal, server.PlaceRemote:
		return p, nil
	}
	return "", fmt.Errorf("split placement %q", s)
}
