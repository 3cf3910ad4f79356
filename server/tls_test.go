package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// TLS on the RPC port, with real certificates from tlsconf over loopback.

// devCerts writes a development CA and its server, admin and client
// certificates into a test directory.
func devCerts(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.WriteDevCerts(dir, nil, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

func tlsSource(t testing.TB, dir, cert, key string, auth bool) *tlsconf.Source {
	t.Helper()
	f := tlsconf.Files{TrustedCAFile: filepath.Join(dir, tlsconf.CAFile), ClientCertAuth: auth}
	if cert != "" {
		f.CertFile, f.KeyFile = filepath.Join(dir, cert), filepath.Join(dir, key)
	}
	src, err := tlsconf.NewSource(f)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// withTLS serves the RPC port over TLS with dir's server certificate,
// requiring client certificates when mtls, and dials other servers with
// the same certificate.
func withTLS(t testing.TB, dir string, mtls bool) func(*Options) {
	return func(o *Options) {
		o.TLS = tlsSource(t, dir, tlsconf.ServerCertFile, tlsconf.ServerKeyFile, mtls).ServerConfig()
		o.ClientCertAuth = mtls
		o.PeerTLS = tlsSource(t, dir, tlsconf.ServerCertFile, tlsconf.ServerKeyFile, false).ClientConfig("")
	}
}

// clientTLS is a client configuration presenting dir's cert ("" none).
func clientTLS(t testing.TB, dir, cert, key string) *tls.Config {
	return tlsSource(t, dir, cert, key, false).ClientConfig("")
}

// dialTLS opens a wire connection over TLS, closed at cleanup.
func dialTLS(t testing.TB, s *Server, cfg *tls.Config) *wire.Conn {
	t.Helper()
	c, err := wire.Dial(ctxT(t), s.Addr(), &wire.Options{TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func tlsClient(t *testing.T, store regiontable.Store, cfg *tls.Config) *client.Client {
	t.Helper()
	c, err := client.New(ctxT(t), client.Config{Store: store, Mode: locality.Mode{Kind: locality.ServerOnly}, Provider: "tcp", TLS: cfg, Logger: testLogger(t), MaxRetries: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestTLSGetPutRange: the Go client reads and writes over TLS with a
// client certificate, against a server requiring one.
func TestTLSGetPutRange(t *testing.T) {
	dir := devCerts(t)
	_, store := newTestServer(t, withTLS(t, dir, true))
	c := tlsClient(t, store, clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile))
	ctx := ctxT(t)
	var keys []string
	for i := range 50 {
		k := fmt.Sprintf("key%03d", i)
		keys = append(keys, k)
		if err := c.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	for _, k := range keys {
		if v, err := c.Get(ctx, []byte(k)); err != nil || string(v) != "v"+k {
			t.Fatalf("get %s = %q, %v", k, v, err)
		}
	}
	pairs, _, err := c.Range(ctx, []byte("key010"), []byte("key020"), client.RangeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range pairs {
		got = append(got, string(kv.Key))
	}
	if !slices.Equal(got, keys[10:20]) {
		t.Fatalf("range = %v, want %v", got, keys[10:20])
	}
}

// TestPlainTCPToTLSPort: a plain TCP connection to a TLS port is refused
// with a refusal frame: its call fails as not sent, with
// ErrPermissionDenied, and the server counts a handshake refusal.
func TestPlainTCPToTLSPort(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, false))
	c, err := wire.Dial(ctxT(t), s.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.CallMessage(ctxT(t), wire.OpPut, &wire.PutRequest{Key: []byte("k"), Value: []byte("v")})
	var ce *wire.ConnError
	if !errors.As(err, &ce) || ce.Sent || !errors.Is(err, wire.ErrRefused) || !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("plain put to a TLS port: %v, want a refusal (not sent) with ErrPermissionDenied", err)
	}
	t.Logf("plain put: %v", err)
	if n := metricValue(gather(t, s), "cell_server_refusals_total", map[string]string{"reason": "tls_handshake"}); n < 1 {
		t.Fatalf("%v tls_handshake refusals", n)
	}
	// The server goes on serving TLS.
	tc := dialTLS(t, s, clientTLS(t, dir, "", ""))
	put(t, tc, "k", "v")
}

// TestPlainClientToTLSServer: the Go client without TLS gets
// ErrPermissionDenied, never an unknown outcome, and the error says why.
func TestPlainClientToTLSServer(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, false))
	c, err := client.New(ctxT(t), client.Config{Servers: []string{s.Addr()}, Provider: "tcp", Logger: testLogger(t), MaxRetries: 1})
	if err == nil {
		defer c.Close()
		err = c.Put(ctxT(t), []byte("k"), []byte("v"))
	}
	if err == nil || errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("plain client to a TLS server: %v", err)
	}
	t.Logf("plain client: %v", err)
}

// TestTLSClientToPlainServer: a TLS dial to a plain port fails at the
// handshake, a dial error (nothing sent).
func TestTLSClientToPlainServer(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t)
	_, err := wire.Dial(ctxT(t), s.Addr(), &wire.Options{TLS: clientTLS(t, dir, "", "")})
	if !errors.Is(err, wire.ErrHandshake) {
		t.Fatalf("TLS dial to a plain port: %v, want ErrHandshake", err)
	}
}

// TestStalledHandshake: connections that never start their handshake do
// not hold up the accept loop (the handshake is the connection's
// goroutine's), and are closed after the frame timeout, counted.
func TestStalledHandshake(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, true), func(o *Options) { o.FrameTimeout = 300 * time.Millisecond })
	var stalled []net.Conn
	for range 5 {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		stalled = append(stalled, nc)
	}
	c := dialTLS(t, s, clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile))
	put(t, c, "k", "v")
	for _, nc := range stalled {
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a stalled handshake: read %v, want the server's close", err)
		}
	}
	if n := metricValue(gather(t, s), "cell_server_refusals_total", map[string]string{"reason": "tls_handshake"}); n != 5 {
		t.Fatalf("%v tls_handshake refusals, want 5", n)
	}
	if v, ok := get(t, c, "k"); !ok || v != "v" {
		t.Fatalf("get = %q, %v", v, ok)
	}
}

// TestClientCertOnServerOp: with mTLS, a client certificate sending the
// server-to-server ops is answered PermissionDenied before the body is
// decoded, and the connection goes on serving gets.
func TestClientCertOnServerOp(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, true))
	c := dialTLS(t, s, clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile))
	put(t, c, "k", "v")
	for _, op := range []wire.Op{wire.OpSplitBegin, wire.OpSplitAppend, wire.OpSplitEnd, wire.OpInsertChild, wire.OpMeganode} {
		_, err := c.Call(ctxT(t), op, []byte("not decoded"))
		if !errors.Is(err, wire.ErrPermissionDenied) {
			t.Fatalf("%v with a client certificate: %v", op, err)
		}
		if v, ok := get(t, c, "k"); !ok || v != "v" {
			t.Fatalf("get after a refused %v = %q, %v", op, v, ok)
		}
	}
	if n := metricValue(gather(t, s), "cell_server_refusals_total", map[string]string{"reason": "permission_denied"}); n != 5 {
		t.Fatalf("%v permission refusals, want 5", n)
	}
	// An admin certificate may not either; a server certificate may (the
	// body is then decoded, and this one is bad).
	a := dialTLS(t, s, clientTLS(t, dir, tlsconf.AdminCertFile, tlsconf.AdminKeyFile))
	if _, err := a.Call(ctxT(t), wire.OpSplitEnd, []byte("x")); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("SplitEnd with an admin certificate: %v", err)
	}
	sc := dialTLS(t, s, clientTLS(t, dir, tlsconf.ServerCertFile, tlsconf.ServerKeyFile))
	if _, err := sc.Call(ctxT(t), wire.OpSplitEnd, []byte("x")); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("SplitEnd with a server certificate: %v, want BadRequest", err)
	}
}

// TestAdminOpNeedsAdminCert: with mTLS, check is refused to a client
// certificate and served to an admin or server certificate; without mTLS
// anyone may run it, as over plain TCP.
func TestAdminOpNeedsAdminCert(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, true))
	check := func(c *wire.Conn) error {
		var rep wire.CheckReply
		_, err := call(t, c, wire.OpCheck, &wire.CheckRequest{Limit: 10}, &rep)
		return err
	}
	c := dialTLS(t, s, clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile))
	if err := check(c); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("check with a client certificate: %v", err)
	}
	if _, err := c.CallMessage(ctxT(t), wire.OpNodeDump, &wire.NodeDumpRequest{}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("node dump with a client certificate: %v", err)
	}
	for _, cert := range [][2]string{{tlsconf.AdminCertFile, tlsconf.AdminKeyFile}, {tlsconf.ServerCertFile, tlsconf.ServerKeyFile}} {
		if err := check(dialTLS(t, s, clientTLS(t, dir, cert[0], cert[1]))); err != nil {
			t.Fatalf("check with %s: %v", cert[0], err)
		}
	}
	s2, _ := newTestServer(t, withTLS(t, dir, false))
	if err := check(dialTLS(t, s2, clientTLS(t, dir, "", ""))); err != nil {
		t.Fatalf("check without mTLS: %v", err)
	}
}

// TestNoClientCertRefused: with mTLS a connection without a certificate
// fails its dial.
func TestNoClientCertRefused(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, true))
	_, err := wire.Dial(ctxT(t), s.Addr(), &wire.Options{TLS: clientTLS(t, dir, "", "")})
	if !errors.Is(err, wire.ErrHandshake) {
		t.Fatalf("dial without a certificate: %v", err)
	}
}

// TestExpiredClientCertRefused: an expired client certificate fails the
// handshake (Dial, not the first call), counted as a handshake refusal.
func TestExpiredClientCertRefused(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, true))
	ca, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.CAFile), filepath.Join(dir, tlsconf.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cp, kp, err := ca.Issue(tlsconf.Issue{CommonName: "old", Role: tlsconf.RoleClient, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"old.crt": cp, "old.key": kp} {
		if err := tlsconf.WriteFileAtomic(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err = wire.Dial(ctxT(t), s.Addr(), &wire.Options{TLS: clientTLS(t, dir, "old.crt", "old.key")})
	if !errors.Is(err, wire.ErrHandshake) {
		t.Fatalf("dial with an expired certificate: %v", err)
	}
	t.Logf("expired: %v", err)
	// Under TLS 1.3 the server sends its alert from inside its failing
	// Handshake and counts the refusal after that returns: the client
	// may see the alert first.
	waitFor(t, func() bool {
		return metricValue(gather(t, s), "cell_server_refusals_total", map[string]string{"reason": "tls_handshake"}) >= 1
	}, "the expired certificate's handshake counted as a tls_handshake refusal")
}

// TestTLSCertificateReload: certificate files replaced while the server
// serves: the next connection sees the new certificate, the old one goes
// on.
func TestTLSCertificateReload(t *testing.T) {
	dir := devCerts(t)
	s, _ := newTestServer(t, withTLS(t, dir, true))
	old := dialTLS(t, s, clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile))
	put(t, old, "k", "v")
	serial := func() string {
		cfg := tlsconf.ForAddr(clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile), s.Addr())
		c, err := tls.Dial("tcp", s.Addr(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	ca, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.CAFile), filepath.Join(dir, tlsconf.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cp, kp, err := ca.Issue(tlsconf.Issue{CommonName: "cell-server-2", Role: tlsconf.RoleServer, Hosts: tlsconf.DefaultHosts, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the files are looked at once a second at most
	if err := tlsconf.WriteFileAtomic(filepath.Join(dir, tlsconf.ServerKeyFile), kp, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tlsconf.WriteFileAtomic(filepath.Join(dir, tlsconf.ServerCertFile), cp, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for serial() == before {
		if time.Now().After(deadline) {
			t.Fatal("the server still presents its old certificate")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, ok := get(t, old, "k"); !ok || v != "v" {
		t.Fatalf("old connection: get = %q, %v", v, ok)
	}
	put(t, dialTLS(t, s, clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile)), "k2", "v2")
}

// TestRemoteSplitTLS is TestRemoteSplit between two servers requiring
// client certificates: the split ops go over TLS with the servers'
// certificates, and a client certificate reads everything back.
func TestRemoteSplitTLS(t *testing.T) {
	dir := devCerts(t)
	srvs, store := startCluster(t, 2, func(i int, o *Options) {
		o.SplitPlacement = PlaceRemote
		withTLS(t, dir, true)(o)
	})
	cfg := clientTLS(t, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile)
	w := tlsClient(t, store, cfg)
	ctx := ctxT(t)
	var keys []string
	for i := range 2000 {
		k := fmt.Sprintf("key%06d", i*7919%100003)
		if err := w.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		keys = append(keys, k)
	}
	remote := remoteSplitsDone(t, srvs)
	for _, s := range srvs {
		if err := s.Check(); err != nil {
			t.Fatalf("%s: %v", s.opts.ServerID, err)
		}
		if n := metricValue(gather(t, s), "cell_server_refusals_total", map[string]string{"reason": "permission_denied"}); n != 0 {
			t.Fatalf("%s: %v permission refusals", s.opts.ServerID, n)
		}
	}
	if remote < 2 {
		t.Fatalf("%d remote splits", remote)
	}
	slices.Sort(keys)
	mustReadAll(t, "at rest", map[string]*client.Client{"server": tlsClient(t, store, cfg)}, keys)
}

// BenchmarkGetTLS: server-side gets of one key, many in flight on one
// connection (as BenchmarkGetParallel), over plain TCP and over TLS with
// client certificates required, side by side (BENCHMARKS.md §2).
func BenchmarkGetTLS(b *testing.B) {
	dir := devCerts(b)
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			edit := func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) }
			var opts *wire.Options
			if mode == "tls" {
				edit = func(o *Options) {
					withTLS(b, dir, true)(o)
					o.Logger = slog.New(slog.DiscardHandler)
				}
				opts = &wire.Options{TLS: clientTLS(b, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile)}
			}
			s, _ := newTestServer(b, edit)
			c, err := wire.Dial(ctxT(b), s.Addr(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			put(b, c, "key", "value")
			body := (&wire.GetRequest{Key: []byte("key")}).AppendTo(nil)
			ctx := ctxT(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					f, err := c.Call(ctx, wire.OpGet, body)
					if err != nil {
						b.Error(err)
						return
					}
					f.Release()
				}
			})
		})
	}
}
