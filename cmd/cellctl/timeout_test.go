package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

// With etcd down, a command fails after about --dial-timeout, not
// --command-timeout, and its error names the endpoint and what it met.
func TestDialTimeoutBoundsEtcdConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
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
				t.Fatalf("%q succeeded with etcd down", args)
			}
			if el > 3*time.Second {
				t.Errorf("%q took %v with --dial-timeout 500ms (--command-timeout 15s)", args, el)
			}
			if !strings.Contains(msg, ep+": connection refused") || strings.Contains(msg, "deadline exceeded") ||
				strings.Contains(msg, "command-timeout") {
				t.Errorf("%q: %q, want %s: connection refused, and no deadline or --command-timeout", args, msg, ep)
			}
		})
	}
}
