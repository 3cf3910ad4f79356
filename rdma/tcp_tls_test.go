package rdma

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
)

// testCerts are development certificates (tlsconf.WriteDevCerts) in a
// temporary directory.
type testCerts struct{ dir string }

func newTestCerts(t testing.TB) testCerts {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := tlsconf.WriteDevCerts(dir, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	return testCerts{dir: dir}
}

func (c testCerts) source(t testing.TB, cert, key string, clientAuth bool) *tlsconf.Source {
	t.Helper()
	src, err := tlsconf.NewSource(tlsconf.Files{
		CertFile:       filepath.Join(c.dir, cert),
		KeyFile:        filepath.Join(c.dir, key),
		TrustedCAFile:  filepath.Join(c.dir, tlsconf.CAFile),
		ClientCertAuth: clientAuth,
	})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// server is the responder's config: the server certificate, client
// certificates required.
func (c testCerts) server(t testing.TB) *tls.Config {
	return c.source(t, tlsconf.ServerCertFile, tlsconf.ServerKeyFile, true).ServerConfig()
}

// client is a client's config with the client certificate.
func (c testCerts) client(t testing.TB, _ string) *tls.Config {
	return c.source(t, tlsconf.ClientCertFile, tlsconf.ClientKeyFile, false).ClientConfig("")
}

// TestTCPTLSPlainClientRefused: a client without TLS cannot read from a
// responder that speaks it; the responder counts the refused handshake.
func TestTCPTLSPlainClientRefused(t *testing.T) {
	certs := newTestCerts(t)
	srv, cl, rk, _ := newTCP(t, TCPOptions{TLS: certs.server(t)}, TCPClientOptions{})
	err := cl.Read(context.Background(), &rk, 0, make([]byte, 64))
	if !errors.Is(err, ErrDisconnected) {
		t.Fatalf("plain read from a TLS responder: %v, want ErrDisconnected", err)
	}
	waitFor(t, "refused handshakes counted", func() bool { return srv.Stats().TLSRefused >= 1 })
	if st := srv.Stats(); st.Reads != 0 {
		t.Fatalf("responder served %d reads to a plain client", st.Reads)
	}
}

// TestTCPTLSClientToPlainResponder: a TLS client dialling a plain
// responder fails with an error that names the TLS handshake.
func TestTCPTLSClientToPlainResponder(t *testing.T) {
	certs := newTestCerts(t)
	_, cl, rk, _ := newTCP(t, TCPOptions{}, TCPClientOptions{TLS: certs.client(t, "client")})
	err := cl.Read(context.Background(), &rk, 0, make([]byte, 64))
	if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "TLS handshake") {
		t.Fatalf("TLS read from a plain responder: %v, want a TLS handshake error wrapping ErrDisconnected", err)
	}
}

// TestTCPTLSReads: reads over TLS return the registered bytes, and the
// responder's certificate is checked against the name in the RemoteKey's
// address.
func TestTCPTLSReads(t *testing.T) {
	certs := newTestCerts(t)
	srv, cl, rk, seed := newTCP(t, TCPOptions{TLS: certs.server(t)}, TCPClientOptions{TLS: certs.client(t, "client")})
	for _, off := range []uint64{0, 4096, 1<<20 - 64} {
		dst := make([]byte, 64)
		if err := cl.Read(context.Background(), &rk, off, dst); err != nil {
			t.Fatal(err)
		}
		checkPattern(t, seed, off, dst)
	}
	if st := srv.Stats(); st.TLSRefused != 0 || st.Reads != 3 {
		t.Fatalf("stats %+v, want 3 reads and no refusal", st)
	}

	// A client that expects another server name refuses the responder.
	other := certs.client(t, "client")
	other.ServerName = "cell.example.com"
	cl2, err := NewTCPClient(TCPClientOptions{TLS: other, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	err = cl2.Read(context.Background(), &rk, 0, make([]byte, 64))
	if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "TLS handshake") || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("read with the wrong server name: %v, want a TLS handshake certificate error", err)
	}
}

// TestTCPTLSUntrustedClientCert: a client whose certificate comes from
// another CA, or has expired, is refused when the responder requires
// client certificates; so is one without a certificate.
func TestTCPTLSUntrustedClientCert(t *testing.T) {
	certs := newTestCerts(t)
	srv, _, rk, _ := newTCP(t, TCPOptions{TLS: certs.server(t)}, TCPClientOptions{})
	ownCA := loadCA(t, certs)

	otherCA, err := tlsconf.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cases := map[string]func() []tls.Certificate{
		"other CA": func() []tls.Certificate {
			return []tls.Certificate{issue(t, otherCA, tlsconf.Issue{CommonName: "intruder", Role: tlsconf.RoleClient})}
		},
		"expired": func() []tls.Certificate {
			return []tls.Certificate{issue(t, ownCA, tlsconf.Issue{CommonName: "old", Role: tlsconf.RoleClient,
				NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)})}
		},
		"none": func() []tls.Certificate { return nil },
	}
	refused := srv.Stats().TLSRefused
	for name, certsFn := range cases {
		pool := x509.NewCertPool()
		pool.AddCert(ownCA.Cert)
		cl, err := NewTCPClient(TCPClientOptions{
			TLS:    &tls.Config{RootCAs: pool, Certificates: certsFn(), MinVersion: tls.VersionTLS12},
			Logger: testLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		err = cl.Read(context.Background(), &rk, 0, make([]byte, 64))
		_ = cl.Close()
		// In TLS 1.3 the client's handshake ends before the responder
		// checks its certificate: the refusal arrives as an alert on
		// the first read.
		if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "tls") {
			t.Fatalf("%s: read: %v, want a tls error wrapping ErrDisconnected", name, err)
		}
		refused++
		waitFor(t, name+" refusal counted", func() bool { return srv.Stats().TLSRefused >= refused })
	}
	if st := srv.Stats(); st.Reads != 0 {
		t.Fatalf("responder served %d reads to untrusted clients", st.Reads)
	}
}

// TestTCPTLSHandshakeTimeout: a connection that never completes its
// handshake is closed after the frame timeout and does not hold up other
// connections (the handshake is not in the accept loop).
func TestTCPTLSHandshakeTimeout(t *testing.T) {
	certs := newTestCerts(t)
	srv, cl, rk, seed := newTCP(t, TCPOptions{TLS: certs.server(t), FrameTimeout: 300 * time.Millisecond},
		TCPClientOptions{TLS: certs.client(t, "client")})
	silent, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	dst := make([]byte, 64)
	if err := cl.Read(context.Background(), &rk, 8, dst); err != nil {
		t.Fatalf("read while another connection stalls its handshake: %v", err)
	}
	checkPattern(t, seed, 8, dst)
	start := time.Now()
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.ReadAll(silent); err != nil || len(n) != 0 {
		t.Fatalf("silent connection: read %d bytes, %v; want it closed", len(n), err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("silent connection closed after %v", d)
	}
	waitFor(t, "timed-out handshake counted", func() bool { return srv.Stats().TLSRefused == 1 })
}

func loadCA(t *testing.T, c testCerts) *tlsconf.CA {
	t.Helper()
	ca, err := tlsconf.LoadCA(filepath.Join(c.dir, tlsconf.CAFile), filepath.Join(c.dir, tlsconf.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *tlsconf.CA, is tlsconf.Issue) tls.Certificate {
	t.Helper()
	cp, kp, err := ca.Issue(is)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
