package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// handshake runs a TLS handshake over a pipe and returns both ends'
// states, or the first error.
func handshake(t *testing.T, srv, cli *tls.Config) (server, client tls.ConnectionState, err error) {
	t.Helper()
	// Loopback TCP, not net.Pipe: in TLS 1.3 the client is done before the
	// server has checked its certificate, and the server's alert must not
	// block on a reader that is gone.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		cs  tls.ConnectionState
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- res{err: err}
			return
		}
		defer c.Close()
		sc := tls.Server(c, srv)
		_ = sc.SetDeadline(time.Now().Add(10 * time.Second))
		err = sc.Handshake()
		if err == nil {
			_, err = sc.Write([]byte{1}) // the client's signal that all went well
		}
		done <- res{sc.ConnectionState(), err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc := tls.Client(c, cli)
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	cerr := cc.Handshake()
	if cerr == nil {
		// TLS 1.3: the server's verdict on the client's certificate comes
		// with the first read.
		_, cerr = cc.Read(make([]byte, 1))
	}
	_ = cc.Close()
	r := <-done
	if cerr != nil {
		return server, client, cerr
	}
	if r.err != nil {
		return server, client, r.err
	}
	return r.cs, cc.ConnectionState(), nil
}

func devDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := WriteDevCerts(dir, nil, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

func source(t *testing.T, f Files) *Source {
	t.Helper()
	s, err := NewSource(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func files(dir, cert, key string, auth bool) Files {
	return Files{CertFile: filepath.Join(dir, cert), KeyFile: filepath.Join(dir, key), TrustedCAFile: filepath.Join(dir, CAFile), ClientCertAuth: auth}
}

func TestRolesOverMutualTLS(t *testing.T) {
	dir := devDir(t)
	srv := source(t, files(dir, ServerCertFile, ServerKeyFile, true))
	for _, c := range []struct {
		cert, key string
		want      Role
		cn        string // etcd's user name for it
	}{
		{ServerCertFile, ServerKeyFile, RoleServer, "cell-server"},
		{AdminCertFile, AdminKeyFile, RoleAdmin, "cell-admin"},
		{ClientCertFile, ClientKeyFile, RoleClient, "cell-client"},
		{RootCertFile, RootKeyFile, RoleAdmin, "root"},
	} {
		cli := source(t, files(dir, c.cert, c.key, false))
		ss, cs, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "localhost:1"))
		if err != nil {
			t.Fatalf("%s: %v", c.cert, err)
		}
		if got := PeerRole(&ss); got != c.want {
			t.Errorf("%s: server sees role %v, want %v", c.cert, got, c.want)
		}
		if got := ss.VerifiedChains[0][0].Subject.CommonName; got != c.cn {
			t.Errorf("%s: CommonName %q, want %q", c.cert, got, c.cn)
		}
		if got := RoleOf(cs.PeerCertificates[0]); got != RoleServer {
			t.Errorf("%s: client sees the server as %v", c.cert, got)
		}
	}
}

// TestForAddrIP: an address by IP is verified against the certificate's
// IP addresses (crypto/tls sends no SNI for it, so ForAddr hands the host
// to the verification itself).
func TestForAddrIP(t *testing.T) {
	dir := devDir(t)
	srv := source(t, files(dir, ServerCertFile, ServerKeyFile, true))
	cli := source(t, files(dir, ClientCertFile, ClientKeyFile, false))
	if _, _, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "127.0.0.1:1")); err != nil {
		t.Fatalf("handshake with 127.0.0.1: %v", err)
	}
	_, _, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "10.9.8.7:1"))
	var he x509.HostnameError
	if !errors.As(err, &he) {
		t.Fatalf("handshake with an IP the certificate lacks: %v, want a HostnameError", err)
	}
}

func TestRefusals(t *testing.T) {
	dir, other := devDir(t), devDir(t)
	srv := source(t, files(dir, ServerCertFile, ServerKeyFile, true))
	t.Run("no client certificate", func(t *testing.T) {
		cli := source(t, Files{TrustedCAFile: filepath.Join(dir, CAFile)})
		if _, _, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "localhost:1")); err == nil {
			t.Fatal("handshake without a client certificate succeeded")
		}
	})
	t.Run("client certificate of another CA", func(t *testing.T) {
		cli := source(t, Files{CertFile: filepath.Join(other, ClientCertFile), KeyFile: filepath.Join(other, ClientKeyFile), TrustedCAFile: filepath.Join(dir, CAFile)})
		if _, _, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "localhost:1")); err == nil {
			t.Fatal("handshake with another CA's client certificate succeeded")
		}
	})
	t.Run("server of another CA", func(t *testing.T) {
		cli := source(t, files(other, ClientCertFile, ClientKeyFile, false))
		if _, _, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "localhost:1")); err == nil {
			t.Fatal("client trusted another CA's server")
		}
	})
	t.Run("wrong host name", func(t *testing.T) {
		cli := source(t, files(dir, ClientCertFile, ClientKeyFile, false))
		_, _, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "db.example.com:1"))
		var he x509.HostnameError
		if !errors.As(err, &he) {
			t.Fatalf("err = %v, want a HostnameError", err)
		}
	})
	t.Run("expired client certificate", func(t *testing.T) {
		ca, err := LoadCA(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		cp, kp, err := ca.Issue(Issue{CommonName: "old", Role: RoleAdmin, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		cdir := t.TempDir()
		writeFile(t, filepath.Join(cdir, "c.crt"), cp)
		writeFile(t, filepath.Join(cdir, "c.key"), kp)
		cli := source(t, Files{CertFile: filepath.Join(cdir, "c.crt"), KeyFile: filepath.Join(cdir, "c.key"), TrustedCAFile: filepath.Join(dir, CAFile)})
		_, _, err = handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "localhost:1"))
		if err == nil {
			t.Fatal("expired certificate accepted")
		}
	})
	t.Run("no server name", func(t *testing.T) {
		cli := source(t, files(dir, ClientCertFile, ClientKeyFile, false))
		if _, _, err := handshake(t, srv.ServerConfig(), cli.ClientConfig("")); err == nil {
			t.Fatal("client verified a server without a name")
		}
	})
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := WriteFileAtomic(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReload: a server whose certificate files are replaced presents the
// new certificate on the next handshake; a half-written file keeps the old.
func TestReload(t *testing.T) {
	dir := devDir(t)
	srv := source(t, files(dir, ServerCertFile, ServerKeyFile, false))
	clock := time.Now()
	srv.now = func() time.Time { return clock }
	cli := source(t, Files{TrustedCAFile: filepath.Join(dir, CAFile)})
	serial := func() string {
		_, cs, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "localhost:1"))
		if err != nil {
			t.Fatal(err)
		}
		return cs.PeerCertificates[0].SerialNumber.String()
	}
	before := serial()

	ca, err := LoadCA(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cp, kp, err := ca.Issue(Issue{CommonName: "renewed", Role: RoleServer, Hosts: DefaultHosts})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ServerCertFile), cp)
	writeFile(t, filepath.Join(dir, ServerKeyFile), kp)
	if got := serial(); got != before {
		t.Fatal("reloaded within a second of the last check")
	}
	clock = clock.Add(2 * time.Second)
	after := serial()
	if after == before {
		t.Fatal("the replaced certificate was not reloaded")
	}
	if srv.Reloads() != 1 || srv.Err() != nil {
		t.Fatalf("reloads %d, err %v", srv.Reloads(), srv.Err())
	}

	// A torn certificate file: the last good one stays in use.
	if err := os.WriteFile(filepath.Join(dir, ServerCertFile), cp[:len(cp)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Second)
	if got := serial(); got != after {
		t.Fatal("a torn certificate file replaced the good one")
	}
	if srv.Err() == nil {
		t.Fatal("the failed reload is not reported")
	}
}

func TestWriteDevCertsRefusesToOverwrite(t *testing.T) {
	dir := devDir(t)
	if err := WriteDevCerts(dir, nil, time.Hour); !errors.Is(err, os.ErrExist) {
		t.Fatalf("err = %v, want ErrExist", err)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode %v", fi.Mode().Perm())
	}
}

func TestFilesValidate(t *testing.T) {
	for _, f := range []Files{{CertFile: "a"}, {KeyFile: "a"}, {ClientCertAuth: true, CertFile: "a", KeyFile: "b"}} {
		if f.Validate() == nil {
			t.Errorf("%+v validated", f)
		}
	}
}

// TestIPServerName: a server dialled by IP address is verified against the
// certificate's IP addresses, through ForAddr and through ClientConfig's
// own name, though an IP is never sent as SNI; another IP is refused.
func TestIPServerName(t *testing.T) {
	dir := devDir(t)
	srv := source(t, files(dir, ServerCertFile, ServerKeyFile, false))
	cli := source(t, Files{TrustedCAFile: filepath.Join(dir, CAFile)})
	for name, cfg := range map[string]*tls.Config{
		"ForAddr":      ForAddr(cli.ClientConfig(""), "127.0.0.1:7070"),
		"ClientConfig": cli.ClientConfig("127.0.0.1"),
	} {
		if _, _, err := handshake(t, srv.ServerConfig(), cfg); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := handshake(t, srv.ServerConfig(), ForAddr(cli.ClientConfig(""), "127.0.0.2:7070")); err == nil {
		t.Error("a certificate for 127.0.0.1 accepted for 127.0.0.2")
	}
}
