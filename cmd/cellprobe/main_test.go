package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
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

// TestProbeEtcdTLS: with --cacert, --cert and --key the etcd probe speaks
// https to an end that requires client certificates; without a client
// certificate, or trusting another CA, it fails.
func TestProbeEtcdTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := tlsconf.WriteDevCerts(dir, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := tlsconf.WriteDevCerts(other, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	cf := func(d, n string) string { return filepath.Join(d, n) }
	src, err := tlsconf.NewSource(tlsconf.Files{CertFile: cf(dir, tlsconf.ServerCertFile), KeyFile: cf(dir, tlsconf.ServerKeyFile),
		TrustedCAFile: cf(dir, tlsconf.CAFile), ClientCertAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"health":"true","reason":""}`)
	}))
	srv.TLS = src.ServerConfig()
	srv.StartTLS()
	defer srv.Close()
	ok := []string{"--cacert", cf(dir, tlsconf.CAFile), "--cert", cf(dir, tlsconf.ClientCertFile), "--key", cf(dir, tlsconf.ClientKeyFile), "etcd", srv.URL}
	if code := run(ok, io.Discard); code != 0 {
		t.Fatalf("https etcd with a client certificate: exit %d", code)
	}
	if code := run([]string{"--timeout", "2s", "--cacert", cf(dir, tlsconf.CAFile), "etcd", srv.URL}, io.Discard); code != 1 {
		t.Fatalf("https etcd without a client certificate: exit %d, want 1", code)
	}
	if code := run([]string{"--timeout", "2s", "--cacert", cf(other, tlsconf.CAFile), "--cert", cf(other, tlsconf.ClientCertFile), "--key", cf(other, tlsconf.ClientKeyFile), "etcd", srv.URL}, io.Discard); code != 1 {
		t.Fatalf("https etcd of another CA: exit %d, want 1", code)
	}
}
