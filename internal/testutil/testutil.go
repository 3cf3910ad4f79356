// Package testutil holds helpers shared by the tests of several packages:
// golden files, free loopback ports, and a goroutine-safe output buffer. It
// is imported by _test.go files only.
package testutil

import (
	"bytes"
	"flag"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

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
// moment ago.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	var lns []net.Listener
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
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
