package raftmux

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/internal/tlsconf"
)

// devCerts writes development certificates (a CA, server, admin and client
// certificates) into a temporary directory.
func devCerts(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := tlsconf.WriteDevCerts(dir, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tlsOptions are the options of a mux with the certificate cert/key of dir
// on both ends, client certificates required, as a server wires them.
func tlsOptions(t testing.TB, dir, cert, key string) Options {
	t.Helper()
	src, err := tlsconf.NewSource(tlsconf.Files{
		CertFile:       filepath.Join(dir, cert),
		KeyFile:        filepath.Join(dir, key),
		TrustedCAFile:  filepath.Join(dir, tlsconf.CAFile),
		ClientCertAuth: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return Options{ServerTLS: src.ServerConfig(), ClientTLS: src.ClientConfig("")}
}

func serverTLSOptions(t testing.TB, dir string) Options {
	return tlsOptions(t, dir, tlsconf.ServerCertFile, tlsconf.ServerKeyFile)
}

// TestRaftOverTLS: three raft groups' voters over TLS muxes elect a leader
// and replicate.
func TestRaftOverTLS(t *testing.T) {
	dir := devCerts(t)
	regions := []uint32{1}
	c := startCluster(t, 3, regions, serverTLSOptions(t, dir))
	c.applyAll(t, regions, "tls", 20)
	for i, m := range c.muxes {
		s := m.Stats()
		if len(s.Rejected) != 0 {
			t.Errorf("mux %d rejected %v", i, s.Rejected)
		}
		if s.Accepted[1] == 0 && s.Dialed[1] == 0 {
			t.Errorf("mux %d carried no traffic: %+v", i, s)
		}
	}
}

// TestTLSPeerRoles: with TLS, a dialer whose certificate is a client's or
// an admin's is refused (RejectNotServer, ErrNotServer), and so is an
// acceptor whose certificate is not a server's.
func TestTLSPeerRoles(t *testing.T) {
	dir := devCerts(t)
	srv := mustListen(t, serverTLSOptions(t, dir))
	echoAll(mustGroup(t, srv, 1))
	for i, c := range []struct{ cert, key string }{
		{tlsconf.ClientCertFile, tlsconf.ClientKeyFile},
		{tlsconf.AdminCertFile, tlsconf.AdminKeyFile},
	} {
		intruder := mustListen(t, tlsOptions(t, dir, c.cert, c.key))
		_, err := mustGroup(t, intruder, 1).Dial(raft.ServerAddress(srv.Addr().String()), patience)
		if !errors.Is(err, ErrNotServer) {
			t.Fatalf("%s dialling a server: %v, want ErrNotServer", c.cert, err)
		}
		if got := srv.Stats().Rejected[RejectNotServer]; got != uint64(i+1) {
			t.Fatalf("%s: %d not-server rejections counted, want %d", c.cert, got, i+1)
		}
	}

	// A server dialling a mux whose certificate (trusted, valid for the
	// address) is not a server's refuses it itself.
	ca, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.CAFile), filepath.Join(dir, tlsconf.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	admin := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{adminServingCert(t, ca)},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, RootCAs: pool}
	odd := mustListen(t, Options{ServerTLS: admin, ClientTLS: admin})
	echoAll(mustGroup(t, odd, 1))
	_, err = srv.group(1).Dial(raft.ServerAddress(odd.Addr().String()), patience)
	if !errors.Is(err, ErrNotServer) || !strings.Contains(err.Error(), "role admin") {
		t.Fatalf("dialling a mux with an admin certificate: %v, want ErrNotServer", err)
	}
}

// adminServingCert is a certificate of ca with the admin role that can
// serve TLS on 127.0.0.1 (tlsconf.CA.Issue gives server usage to servers
// only).
func adminServingCert(t testing.TB, ca *tlsconf.CA) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "admin-serving", OrganizationalUnit: []string{tlsconf.OUAdmin}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLSRefusesPlainAndUntrusted: a plain connection, a certificate of
// another CA and an expired certificate are refused by a TLS mux and
// counted as RejectTLS; a plain mux dialling a TLS one fails its
// handshake.
func TestTLSRefusesPlainAndUntrusted(t *testing.T) {
	dir := devCerts(t)
	srv := mustListen(t, serverTLSOptions(t, dir))
	echoAll(mustGroup(t, srv, 1))
	to := raft.ServerAddress(srv.Addr().String())

	plain := mustListen(t, Options{})
	if _, err := mustGroup(t, plain, 1).Dial(to, patience); !errors.Is(err, ErrHandshake) {
		t.Fatalf("plain dial of a TLS mux: %v, want ErrHandshake", err)
	}
	waitFor(t, "the plain connection counted", func() bool { return srv.Stats().Rejected[RejectTLS] == 1 })

	ownCA, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.CAFile), filepath.Join(dir, tlsconf.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := tlsconf.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, c := range []struct {
		name string
		ca   *tlsconf.CA
		is   tlsconf.Issue
	}{
		{"other CA", otherCA, tlsconf.Issue{CommonName: "intruder", Role: tlsconf.RoleServer, Hosts: []string{"127.0.0.1"}}},
		{"expired", ownCA, tlsconf.Issue{CommonName: "old", Role: tlsconf.RoleServer, Hosts: []string{"127.0.0.1"},
			NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)}},
	} {
		pool := x509.NewCertPool()
		pool.AddCert(ownCA.Cert)
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{tlsCert(t, c.ca, c.is)}}
		m := mustListen(t, Options{ServerTLS: cfg, ClientTLS: cfg})
		_, err := mustGroup(t, m, 1).Dial(to, patience)
		if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), "tls") {
			t.Fatalf("%s: dial: %v, want a TLS ErrHandshake", c.name, err)
		}
		waitFor(t, c.name+" counted", func() bool { return srv.Stats().Rejected[RejectTLS] == uint64(i+2) })
	}
	if s := srv.Stats(); s.Accepted[1] != 0 {
		t.Fatalf("accepted %d connections from refused peers", s.Accepted[1])
	}

	// The TLS mux itself still dials and accepts.
	peer := mustListen(t, serverTLSOptions(t, dir))
	c, err := mustGroup(t, peer, 1).Dial(to, patience)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer c.Close()
	mustRoundTrip(t, c, "over TLS")
}

// TestTLSSlowPeersDoNotBlockAccepts: peers that never finish their TLS
// handshake hold up nobody's accepts, and are closed after
// HandshakeTimeout (RejectTimeout).
func TestTLSSlowPeersDoNotBlockAccepts(t *testing.T) {
	dir := devCerts(t)
	opts := serverTLSOptions(t, dir)
	opts.HandshakeTimeout = 2 * time.Second
	srv := mustListen(t, opts)
	echoAll(mustGroup(t, srv, 1))
	const stalls = 10
	for range stalls {
		_ = rawDial(t, srv) // sends nothing: no ClientHello
	}
	waitFor(t, "the stalled handshakes to be pending", func() bool { return srv.Stats().Pending == stalls })
	peer := mustListen(t, serverTLSOptions(t, dir))
	c, err := mustGroup(t, peer, 1).Dial(raft.ServerAddress(srv.Addr().String()), patience)
	if err != nil {
		t.Fatalf("Dial while %d peers stall: %v", stalls, err)
	}
	defer c.Close()
	mustRoundTrip(t, c, "not blocked")
	waitFor(t, "the stalled handshakes to time out", func() bool { return srv.Stats().Rejected[RejectTimeout] == stalls })
}

func tlsCert(t testing.TB, ca *tlsconf.CA, is tlsconf.Issue) tls.Certificate {
	t.Helper()
	cp, kp, err := ca.Issue(is)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
