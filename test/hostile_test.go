package test

import (
	"bufio"
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
	"github.com/cellstore/cell/wire"
)

// TestHostileClientsMemory measures a real cellserver under hostile
// clients (BENCHMARKS.md, "Hostile clients: bounded memory"): 200
// connections that each send a header claiming the largest frame and
// 4 KiB of its body, then stall, and 1,000 connections that stay idle.
// It reports the process's peak RSS (VmHWM) and the largest Go heap that
// /metrics showed meanwhile, while a normal client keeps reading. It only
// runs with CELL_HOSTILE_BENCH=1; CELL_HOSTILE_BIN runs another cellserver
// binary (an older build, for a before/after comparison).
func TestHostileClientsMemory(t *testing.T) {
	if os.Getenv("CELL_HOSTILE_BENCH") != "1" {
		t.Skip("a measurement: set CELL_HOSTILE_BENCH=1 to run it")
	}
	if bin := os.Getenv("CELL_HOSTILE_BIN"); bin != "" {
		saved := bins.cellserver
		bins.cellserver = bin
		t.Cleanup(func() { bins.cellserver = saved })
	}
	srv := startServer(t, serverOptions{cores: 1})
	c := srv.newClient(t, func(c *client.Config) { c.Provider = client.ProviderTCP })
	mustPut(t, c, "keep", "me")
	baseline := procStatusKB(t, srv.pid(), "VmRSS")

	claim := wire.AppendFrame(nil, wire.Header{Op: wire.OpPut, ID: 1}, make([]byte, 4<<10))
	binary.LittleEndian.PutUint32(claim, uint32(wire.DefaultMaxFrameSize))
	// Spread over loopback addresses, under the default per-host limit.
	from := func(i int) string { return fmt.Sprintf("127.0.0.%d", 2+i%8) }
	var conns []net.Conn
	t.Cleanup(func() {
		for _, nc := range conns {
			_ = nc.Close()
		}
	})
	dialFrom := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		nc, err := d.Dial("tcp", srv.rpc)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		return nc
	}
	start := time.Now()
	for i := range 200 {
		if _, err := dialFrom(from(i)).Write(claim); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		dialFrom(from(i))
	}
	// Under the frame timeout (10 s by default), sample the heap while a
	// client reads.
	var maxHeap, maxInuse float64
	for time.Since(start) < 5*time.Second {
		mustGet(t, c, "keep", "me")
		m := scrapeValues(t, "http://"+srv.metrics+"/metrics")
		maxHeap = max(maxHeap, m["go_memstats_heap_alloc_bytes"])
		maxInuse = max(maxInuse, m["go_memstats_heap_inuse_bytes"])
		time.Sleep(250 * time.Millisecond)
	}
	peak := procStatusKB(t, srv.pid(), "VmHWM")
	t.Logf("cellserver under 200 stalled %d-byte claims and 1000 idle connections: peak RSS %.1f MiB (%.1f MiB before them), Go heap max %.1f MiB alloc / %.1f MiB in use",
		wire.DefaultMaxFrameSize, float64(peak)/1024, float64(baseline)/1024, maxHeap/(1<<20), maxInuse/(1<<20))
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
