package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

// With etcd not answering (a listener that accepts and says nothing), a
// command fails after about --dial-timeout, not --command-timeout, and
// its error names the endpoint and what it met.
func TestDialTimeoutBoundsEtcdConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	ep := ln.Addr().String()
	for _, args := range [][]string{
		{"--dial-timeout", "500ms", "get", "k", "--endpoints", ep},
		{"--dial-timeout", "500ms", "members", "--endpoints", ep},
	} {
		t.Run(args[2], func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			code := run(args, &out, &errb)
			el := time.Since(start)
			msg := errb.String()
			t.Logf("exit %d after %v: %s", code, el.Round(time.Millisecond), msg)
			if code == 0 {
				t.Fatalf("%q succeeded with etcd silent", args)
			}
			if el < 500*time.Millisecond || el > 3*time.Second {
				t.Errorf("%q took %v with --dial-timeout 500ms (--command-timeout 15s)", args, el)
			}
			if !strings.Contains(msg, ep+": accepts connections but etcd did not answer") || strings.Contains(msg, "deadline exceeded") ||
				strings.Contains(msg, "command-timeout") {
				t.Errorf("%q: %q, want %s: accepts connections but etcd did not answer, and no deadline or --command-timeout", args, msg, ep)
			}
		})
	}
}

// With nothing listening at the endpoints (no server started), a command
// says so at once, in one line, instead of waiting --dial-timeout.
func TestRefusedConnectionAtOnce(t *testing.T) {
	a, b := deadAddr(t), deadAddr(t)
	for _, args := range [][]string{
		{"get", "k"}, {"put", "k", "v"}, {"members"}, {"regions"}, {"status"}, {"check"}, {"range", "a", "z"},
	} {
		start := time.Now()
		code, out, errs := runCellctl(append(args, "--endpoints", a+",http://"+b)...)
		el := time.Since(start)
		want := "cellctl: etcd at " + a + ", " + b + ": connection refused: is a cellserver running? (--endpoints names the cluster's etcd)\n"
		if code != 1 || out != "" || errs != want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, out, errs, want)
		}
		if el > 2*time.Second {
			t.Errorf("%q took %v (--dial-timeout 5s): want at once", args, el)
		}
	}
}
