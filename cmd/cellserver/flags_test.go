package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellstore/cell/meganode"
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
	if cfg.dataDir != "/from/flag" || cfg.cores != 3 || cfg.metricsListen != "" || cfg.regionSize != 128<<20 ||
		cfg.hugepages != meganode.HugepagesOff || len(cfg.etcdEndpoints) != 2 || cfg.etcdEndpoints[1] != "b:2" ||
		cfg.logLevel != slog.LevelDebug || cfg.nodeSize != 1024 || cfg.meganodeSize != 64<<20 || cfg.serverID == "" {
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
