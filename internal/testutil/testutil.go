// Package testutil holds helpers shared by the tests of several packages:
// golden files, free loopback ports, and a goroutine-safe output buffer. It
// is imported by _test.go files only.
package testutil

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/ (and the generated parts of documents)")

// Update reports whether the test runs with -update: golden files and
// generated documents are rewritten rather than compared.
func Update() bool { return *update }

// Golden compares got with testdata/name, or rewrites that file when the
// test runs with -update. what names the format the file pins (a mismatch
// is a change of it).
func Golden(tb testing.TB, name, got, what string) {
	tb.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		tb.Errorf("%s changed: this is a %s change (run with -update if it is deliberate).\n--- got\n%s--- want\n%s", name, what, got, want)
	}
}

// FreeAddrs returns n distinct loopback addresses whose ports were free a
// moment ago. The ports are chosen at random below the kernel's ephemeral
// range (ip_local_port_range), which outgoing connections draw their local
// ports from: a test that kills a server and restarts it on the same
// ports would otherwise find them taken, now and then, by some process's
// outgoing connection. Where that range leaves too little room below it,
// the kernel picks (port 0).
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	lo, hi := portRange()
	var addrs []string
	for tries := 0; len(addrs) < n; tries++ {
		addr := "127.0.0.1:0"
		if hi-lo >= 1000 && tries < 100*n {
			addr = fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				tb.Fatal(err)
			}
			continue // taken: draw again
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// portRange is the range [lo, hi) FreeAddrs draws from: from 10000 to the
// start of the kernel's ephemeral range.
func portRange() (lo, hi int) {
	lo, hi = 10000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		if v, err := strconv.Atoi(f[0]); err == nil {
			hi = min(hi, v)
		}
	}
	return lo, hi
}

// SyncBuffer collects output written from several goroutines (a process's
// stdout and stderr).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
