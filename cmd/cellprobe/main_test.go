package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestProbeEtcd(t *testing.T) {
	health := `{"health":"true","reason":""}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, health)
	}))
	defer srv.Close()
	if code := run([]string{"etcd", srv.URL}, io.Discard); code != 0 {
		t.Fatalf("healthy etcd: exit %d", code)
	}
	if code := run([]string{"etcd", srv.Listener.Addr().String()}, io.Discard); code != 0 {
		t.Fatalf("healthy etcd without a scheme: exit %d", code)
	}
	health = `{"health":"false","reason":"RAFT NO LEADER"}`
	if code := run([]string{"etcd", srv.URL}, io.Discard); code != 1 {
		t.Fatalf("etcd without a leader: exit %d, want 1", code)
	}
}

func TestProbeReady(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/readyz":
			http.NotFound(w, r)
		case ready.Load():
			_, _ = io.WriteString(w, "ok\n")
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "starting\n")
		}
	}))
	defer srv.Close()
	for _, u := range []string{srv.URL, srv.Listener.Addr().String()} {
		if code := run([]string{"ready", u}, io.Discard); code != 0 {
			t.Fatalf("ready server %s: exit %d", u, code)
		}
	}
	ready.Store(false)
	if code := run([]string{"ready", srv.URL}, io.Discard); code != 1 {
		t.Fatalf("starting server: exit %d, want 1", code)
	}
}

func TestProbeFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, args := range [][]string{{"server", addr}, {"etcd", "http://" + addr}, {"ready", addr}, {"--timeout", "100ms", "server", addr}} {
		if code := run(args, io.Discard); code != 1 {
			t.Errorf("%q: exit %d, want 1", args, code)
		}
	}
	for _, args := range [][]string{{}, {"nonsense"}, {"server", "a", "b"}, {"--no-such-flag", "idle"}} {
		if code := run(args, io.Discard); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
