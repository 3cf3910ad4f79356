package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/server"
	"github.com/cellstore/cell/wire"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"1024": 1024, "1KiB": 1 << 10, "1k": 1 << 10, "64MiB": 64 << 20, "64mb": 64 << 20, "1GiB": 1 << 30,
		"2g": 2 << 30, " 512 ": 512, "100B": 100, "1TiB": 1 << 40,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1.5GiB", "GiB", "1XB", "1 PiB", "99999999999999999999", "17179869184GiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("CELL_CORES", "3")
	t.Setenv("CELL_METRICS_LISTEN", "")
	t.Setenv("CELL_DATA_DIR", "/from/env")
	cfg, err := parseFlags([]string{"--data-dir", "/from/flag", "--region-size", "128MiB", "--hugepages", "off", "--etcd-endpoints", "a:1, b:2,", "--log-level", "debug"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.srv.DataDir != "/from/flag" || cfg.srv.Cores != 3 || cfg.srv.MetricsListen != "" || cfg.srv.RegionSize != 128<<20 ||
		cfg.srv.Hugepages != meganode.HugepagesOff || len(cfg.etcdEndpoints) != 2 || cfg.etcdEndpoints[1] != "b:2" ||
		cfg.logLevel != slog.LevelDebug || cfg.srv.NodeSize != 1024 || cfg.srv.MeganodeSize != 64<<20 || cfg.srv.ServerID == "" {
		t.Fatalf("config %+v", cfg)
	}
	for _, args := range [][]string{
		{"--cores", "0"}, {"--cores", "x"}, {"--hugepages", "maybe"}, {"--region-size", "big"},
		{"--node-size", "1GiB"}, {"--log-level", "loud"}, {"--no-such-flag"}, {"stray"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) succeeded", args)
		}
	}
	var out strings.Builder
	if _, err := parseFlags([]string{"-h"}, &out); err != errHelp || !strings.Contains(out.String(), "CELL_DATA_DIR") {
		t.Fatalf("-h: %v, %q", err, out.String())
	}
}

func TestEnvName(t *testing.T) {
	if got := envName("etcd-peer-listen"); got != "CELL_ETCD_PEER_LISTEN" {
		t.Fatal(got)
	}
}

func TestParseFlagsEtcdCluster(t *testing.T) {
	const cluster = "s1=http://127.0.0.1:2380,s2=http://127.0.0.1:2390,s3=http://127.0.0.1:2400"
	cfg, err := parseFlags([]string{"--server-id", "s2", "--etcd-initial-cluster", cluster}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.etcdName != "s2" || cfg.etcdCluster != cluster {
		t.Fatalf("name %q, cluster %q", cfg.etcdName, cfg.etcdCluster)
	}
	if cfg, err = parseFlags([]string{"--server-id", "x", "--etcd-name", "s3", "--etcd-initial-cluster", cluster}, io.Discard); err != nil || cfg.etcdName != "s3" {
		t.Fatalf("--etcd-name s3: %v, %+v", err, cfg)
	}
	for _, args := range [][]string{
		{"--server-id", "s4", "--etcd-initial-cluster", cluster},
		{"--etcd-name", "s", "--etcd-initial-cluster", cluster},
		{"--server-id", "s1", "--etcd-initial-cluster", cluster, "--etcd-endpoints", "127.0.0.1:2379"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) succeeded", args)
		}
	}
}

func TestParseFlagsRegionFiles(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil || cfg.srv.ShmDir != "/dev/shm" || cfg.srv.Prefault {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	cfg, err = parseFlags([]string{"--shm-dir", "/mnt/shm", "--prefault", "true"}, io.Discard)
	if err != nil || cfg.srv.ShmDir != "/mnt/shm" || !cfg.srv.Prefault {
		t.Fatalf("flags: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"--prefault", "maybe"}, io.Discard); err == nil {
		t.Fatal("--prefault maybe accepted")
	}
	if cfg.srv.ShmGroup != 0 {
		t.Fatalf("--shm-group defaults to %d, want 0 (none)", cfg.srv.ShmGroup)
	}
	for arg, want := range map[string]int{"4242": 4242, "root": -1, "0": -1, "no-such-group-here": -1, "-3": -1} {
		cfg, err := parseFlags([]string{"--shm-group", arg}, io.Discard)
		switch {
		case want < 0 && err == nil:
			t.Errorf("--shm-group %s accepted (%d)", arg, cfg.srv.ShmGroup)
		case want >= 0 && (err != nil || cfg.srv.ShmGroup != want):
			t.Errorf("--shm-group %s: %d, %v; want %d", arg, cfg.srv.ShmGroup, err, want)
		}
	}
	// A group by name (every Linux system has one named after some ID).
	if g, err := user.LookupGroupId("1"); err == nil {
		if cfg, err := parseFlags([]string{"--shm-group", g.Name}, io.Discard); err != nil || cfg.srv.ShmGroup != 1 {
			t.Errorf("--shm-group %s: %d, %v; want 1", g.Name, cfg.srv.ShmGroup, err)
		}
	}
	w, err := parseWipeFlags([]string{"--data-dir", "d1"}, io.Discard)
	if err != nil || w.dataDir != "d1" || w.shmDir != "/dev/shm" {
		t.Fatalf("wipe flags: %+v, %v", w, err)
	}
}

// 'cellserver wipe' deletes a data directory and the region files named
// after it in --shm-dir, and refuses while the directory's LOCK is held.
func TestWipeCommand(t *testing.T) {
	shm := t.TempDir()
	dir := filepath.Join(t.TempDir(), "d1")
	if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Create(filepath.Join(dir, "LOCK"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	abs, _ := filepath.Abs(dir)
	sum := sha256.Sum256([]byte(abs))
	region := filepath.Join(shm, "cell-"+hex.EncodeToString(sum[:8])+"-000001")
	if err := os.WriteFile(region, []byte("left over"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run([]string{"wipe", "--data-dir", dir, "--shm-dir", shm}, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "in use") {
		t.Fatalf("wipe of a locked directory: exit %d: %s", code, out.String())
	}
	_ = unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	out.Reset()
	if code := run([]string{"wipe", "--data-dir", dir, "--shm-dir", shm}, io.Discard, &out); code != 0 {
		t.Fatalf("wipe: exit %d: %s", code, out.String())
	}
	for _, p := range []string{dir, region} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after wipe (%v):\n%s", p, err, out.String())
		}
	}
}

func TestParseFlagsLimits(t *testing.T) {
	t.Setenv("CELL_MAX_CONNECTIONS", "100")
	cfg, err := parseFlags([]string{"--idle-timeout", "0", "--frame-timeout", "3s", "--max-connections-per-host", "7",
		"--max-inflight-per-connection", "9", "--max-range-rows", "11", "--max-range-bytes", "64KiB", "--max-request-bytes", "1MiB"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.srv.IdleTimeout >= 0 || cfg.srv.FrameTimeout != 3*time.Second || cfg.srv.MaxConnections != 100 || cfg.srv.MaxConnectionsPerHost != 7 ||
		cfg.srv.MaxInflightPerConn != 9 || cfg.srv.MaxRangePairs != 11 || cfg.srv.MaxRangeBytes != 64<<10 || cfg.srv.MaxFrameSize != 1<<20+wire.HeaderSize {
		t.Fatalf("config %+v (--idle-timeout 0 is the server's never, negative)", cfg.srv)
	}
	def, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if def.srv.IdleTimeout != server.DefaultIdleTimeout || def.srv.FrameTimeout != server.DefaultFrameTimeout || def.srv.MaxConnectionsPerHost != server.DefaultMaxConnsPerHost ||
		def.srv.MaxInflightPerConn != server.DefaultMaxInflight || def.srv.MaxRangePairs != server.DefaultMaxRangePairs || def.srv.MaxRangeBytes != server.DefaultMaxRangeBytes ||
		def.srv.MaxFrameSize != wire.DefaultMaxFrameSize {
		t.Fatalf("defaults %+v", def.srv)
	}
	for _, args := range [][]string{
		{"--idle-timeout", "-1s"}, {"--idle-timeout", "soon"}, {"--frame-timeout", "-5s"},
		{"--max-connections", "0"}, {"--max-connections", "x"}, {"--max-connections-per-host", "-3"},
		{"--max-inflight-per-connection", "0"}, {"--max-range-rows", "0"}, {"--max-range-bytes", "0"},
		{"--max-range-bytes", "8GiB"}, {"--max-request-bytes", "1KiB"}, {"--max-request-bytes", "4GiB"}, {"--max-request-bytes", "lots"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) succeeded", args)
		}
	}
}

// The TLS flags, in etcd's style: bare booleans, each endpoint's files
// checked together, and the RPC port's TLS needing the peer files.
func TestParseFlagsTLS(t *testing.T) {
	cfg, err := parseFlags([]string{"--cert-file", "s.crt", "--key-file", "s.key", "--trusted-ca-file", "ca.crt", "--client-cert-auth",
		"--peer-cert-file", "p.crt", "--peer-key-file", "p.key", "--peer-trusted-ca-file", "pca.crt"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.tls.ClientCertAuth || cfg.tls.CertFile != "s.crt" || cfg.peerTLS.CertFile != "p.crt" || cfg.peerTLS.ClientCertAuth {
		t.Fatalf("tls %+v, peer %+v", cfg.tls, cfg.peerTLS)
	}
	for _, bad := range [][]string{
		{"--cert-file", "s.crt"},                                                                                  // no key
		{"--cert-file", "s.crt", "--key-file", "s.key"},                                                           // no peer files
		{"--trusted-ca-file", "ca.crt", "--peer-trusted-ca-file", "ca.crt"},                                       // a CA but no certificate
		{"--cert-file", "s.crt", "--key-file", "s.key", "--client-cert-auth", "--peer-trusted-ca-file", "ca.crt"}, // auth without a CA
		{"--peer-cert-file", "p.crt"},
		{"--client-cert-auth=maybe"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		} else {
			t.Logf("%v: %v", bad, err)
		}
	}
	t.Setenv("CELL_CLIENT_CERT_AUTH", "true")
	cfg, err = parseFlags([]string{"--cert-file", "s.crt", "--key-file", "s.key", "--trusted-ca-file", "ca.crt", "--peer-trusted-ca-file", "ca.crt"}, io.Discard)
	if err != nil || !cfg.tls.ClientCertAuth {
		t.Fatalf("CELL_CLIENT_CERT_AUTH=true: %+v, %v", cfg, err)
	}
}

// --etcd-auth: on by default with an embedded etcd requiring client
// certificates and a peer certificate to present, off otherwise; asked
// for where etcd could not name this server, refused.
func TestParseFlagsEtcdAuth(t *testing.T) {
	tlsArgs := []string{"--cert-file", "s.crt", "--key-file", "s.key", "--trusted-ca-file", "ca.crt", "--client-cert-auth",
		"--peer-cert-file", "p.crt", "--peer-key-file", "p.key", "--peer-trusted-ca-file", "pca.crt"}
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{tlsArgs, true},
		{append(slices.Clone(tlsArgs), "--etcd-auth=false"), false},
		{append(slices.Clone(tlsArgs), "--etcd-endpoints", "https://etcd1:2379"), false},
		{append(slices.Clone(tlsArgs), "--etcd-endpoints", "https://etcd1:2379", "--etcd-auth"), true},
		{[]string{"--cert-file", "s.crt", "--key-file", "s.key", "--trusted-ca-file", "ca.crt", "--peer-trusted-ca-file", "pca.crt"}, false},
	} {
		cfg, err := parseFlags(c.args, io.Discard)
		if err != nil || cfg.etcdAuth != c.want {
			t.Errorf("%v: etcdAuth %v, %v; want %v", c.args, cfg != nil && cfg.etcdAuth, err, c.want)
		}
	}
	for _, bad := range [][]string{
		{"--etcd-auth"}, // no client certificates
		{"--cert-file", "s.crt", "--key-file", "s.key", "--trusted-ca-file", "ca.crt", "--peer-trusted-ca-file", "pca.crt", "--etcd-auth"},
		{"--etcd-auth=perhaps"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		} else {
			t.Logf("%v: %v", bad, err)
		}
	}
}

// TestProviderFlags: --provider is tcp (the default) or fabric, which
// needs a build with libfabric and a valid --fabric-provider.
func TestProviderFlags(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil || len(cfg.srv.Fabric) != 0 {
		t.Fatalf("default: %+v, %v", cfg.srv.Fabric, err)
	}
	if _, err := parseFlags([]string{"--provider", "verbs"}, io.Discard); err == nil {
		t.Error("--provider verbs accepted")
	}
	cfg, err = parseFlags([]string{"--provider", "fabric", "--fabric-provider", "shm"}, io.Discard)
	switch {
	case !rdma.FabricBuilt && (err == nil || !strings.Contains(err.Error(), "-tags libfabric")):
		t.Errorf("--provider fabric without libfabric: %v", err)
	case rdma.FabricBuilt && (err != nil || len(cfg.srv.Fabric) != 1 || cfg.srv.Fabric[0].Provider != "shm"):
		t.Errorf("--provider fabric --fabric-provider shm: %+v, %v", cfg, err)
	}
	if rdma.FabricBuilt {
		cfg, err = parseFlags([]string{"--provider", "fabric", "--fabric-provider", "shm, tcp", "--fabric-addr", "10.0.0.1"}, io.Discard)
		if err != nil || len(cfg.srv.Fabric) != 2 || cfg.srv.Fabric[0].Node != "" || cfg.srv.Fabric[1].Provider != "tcp" || cfg.srv.Fabric[1].Node != "10.0.0.1" {
			t.Errorf("two fabric providers: %+v, %v", cfg.srv.Fabric, err)
		}
		if _, err := parseFlags([]string{"--provider", "fabric", "--fabric-provider", "tcp,tcp;ofi_rxm"}, io.Discard); err == nil {
			t.Error("a fabric provider twice accepted")
		}
		if _, err := parseFlags([]string{"--provider", "fabric", "--fabric-progress", "spin"}, io.Discard); err == nil {
			t.Error("--fabric-progress spin accepted")
		}
	}
}
