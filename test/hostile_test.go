package test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/wire"
)

// TestHostileClientsMemory measures a real cellserver under hostile
// clients (BENCHMARKS.md, "Hostile clients: bounded memory"): 200
// connections that each send a header claiming the largest frame and
// 4 KiB of its body, then stall, 1,000 connections that stay idle, and
// 200 connections to the one-sided read port that stall in the middle of
// a request. It reports the process's peak RSS (VmHWM) and the largest Go
// heap that /metrics showed meanwhile, while a normal client keeps
// reading. It only runs with CELL_HOSTILE_BENCH=1; CELL_HOSTILE_BIN runs
// another cellserver binary (an older build, for a before/after
// comparison).
func TestHostileClientsMemory(t *testing.T) {
	hostileBench(t)
	srv := startServer(t, serverOptions{cores: 1})
	dial := func(ip, addr string) net.Conn { return dialFrom(t, ip, addr) }
	measureHostile(t, srv, "plain", dial, dial)
}

// TestHostileClientsMemoryTLS is TestHostileClientsMemory with TLS and
// client certificates required on the RPC and one-sided ports: the
// stalled claims come over TLS connections (a client certificate, the
// handshake done), and the 1,000 idle connections never start their
// handshake (a slowloris of the handshake, which FrameTimeout bounds).
func TestHostileClientsMemoryTLS(t *testing.T) {
	hostileBench(t)
	cf, src := devCerts(t)
	// An etcd of its own (plain): this measures Cell's ports.
	cl := startCluster(t, 1, serverOptions{cores: 1, clientTLS: src.ClientConfig(""),
		flags: []string{"--cert-file", cf(tlsconf.ServerCertFile), "--key-file", cf(tlsconf.ServerKeyFile), "--trusted-ca-file", cf(tlsconf.CAFile), "--client-cert-auth",
			"--peer-cert-file", cf(tlsconf.ServerCertFile), "--peer-key-file", cf(tlsconf.ServerKeyFile), "--peer-trusted-ca-file", cf(tlsconf.CAFile)}})
	srv := cl.servers[0]
	dialTLS := func(ip, addr string) net.Conn {
		nc := dialFrom(t, ip, addr)
		tc := tls.Client(nc, tlsconf.ForAddr(src.ClientConfig(""), addr))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tc.HandshakeContext(ctx); err != nil {
			t.Fatalf("TLS handshake with %s: %v", addr, err)
		}
		return tc
	}
	raw := func(ip, addr string) net.Conn { return dialFrom(t, ip, addr) }
	measureHostile(t, srv, "TLS", dialTLS, raw)
}

// hostileBench skips a hostile-client measurement unless asked for, and
// swaps in CELL_HOSTILE_BIN's cellserver if set.
func hostileBench(t *testing.T) {
	t.Helper()
	if os.Getenv("CELL_HOSTILE_BENCH") != "1" {
		t.Skip("a measurement: set CELL_HOSTILE_BENCH=1 to run it")
	}
	if bin := os.Getenv("CELL_HOSTILE_BIN"); bin != "" {
		saved := bins.cellserver
		bins.cellserver = bin
		t.Cleanup(func() { bins.cellserver = saved })
	}
}

// dialFrom connects to addr from the loopback address ip, closed when the
// test ends.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// measureHostile opens the hostile connections against srv — claims
// (through session, which does any handshake), idle ones (through idle)
// and stalled one-sided requests (through session) — and reports peak
// RSS and the Go heap's maximum over the next 5 s while a client reads.
func measureHostile(t *testing.T, srv *cellServer, name string, session, idle func(ip, addr string) net.Conn) {
	c := srv.newClient(t, func(c *client.Config) { c.Provider = client.ProviderTCP })
	mustPut(t, c, "keep", "me")
	baseline := procStatusKB(t, srv.pid(), "VmRSS")

	claim := wire.AppendFrame(nil, wire.Header{Op: wire.OpPut, ID: 1}, make([]byte, 4<<10))
	binary.LittleEndian.PutUint32(claim, uint32(wire.DefaultMaxFrameSize))
	// Half of a one-sided read request's 32-byte header.
	var half [16]byte
	binary.LittleEndian.PutUint32(half[:], 48)
	half[4], half[5], half[6] = 0xCD, 1, 1
	// Spread over loopback addresses, under the default per-host limit.
	from := func(i int) string { return fmt.Sprintf("127.0.0.%d", 2+i%8) }
	start := time.Now()
	for i := range 200 {
		if _, err := session(from(i), srv.rpc).Write(claim); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		idle(from(i), srv.rpc)
	}
	for i := range 200 {
		if _, err := session(from(i), srv.rdma).Write(half[:]); err != nil {
			t.Fatal(err)
		}
	}
	opened := time.Since(start)
	// Under the frame timeout (10 s by default), sample the heap while a
	// client reads.
	var maxHeap, maxInuse float64
	for time.Since(start) < opened+5*time.Second {
		mustGet(t, c, "keep", "me")
		m := scrapeValues(t, "http://"+srv.metrics+"/metrics")
		maxHeap = max(maxHeap, m["go_memstats_heap_alloc_bytes"])
		maxInuse = max(maxInuse, m["go_memstats_heap_inuse_bytes"])
		time.Sleep(250 * time.Millisecond)
	}
	peak := procStatusKB(t, srv.pid(), "VmHWM")
	t.Logf("cellserver (%s) under 200 stalled %d-byte claims, 1000 idle connections and 200 stalled one-sided requests (opened in %v): peak RSS %.1f MiB (%.1f MiB before them), Go heap max %.1f MiB alloc / %.1f MiB in use",
		name, wire.DefaultMaxFrameSize, opened.Round(time.Millisecond), float64(peak)/1024, float64(baseline)/1024, maxHeap/(1<<20), maxInuse/(1<<20))
}

// procStatusKB reads a "kB" field of /proc/pid/status.
func procStatusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// scrapeValues returns the unlabelled samples of a /metrics page.
func scrapeValues(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out
}
