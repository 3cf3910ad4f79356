package test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
)

// TestTLSClusterFailover: three cellservers with every port on TLS (the
// RPC and one-sided read ports with client certificates required, raft
// between them with the server role required both ways, from the
// certificates `cellctl certs` writes) replicate every region three ways
// over TLS; the leader of the root's region is killed with SIGKILL, a
// write on its keys is acknowledged by the new leader, the victim comes
// back as a follower, every key written before is read back, and cellctl
// check (admin certificate) finds the replicas equal. The raft port
// answers a plain connection with a TLS alert.
func TestTLSClusterFailover(t *testing.T) {
	cf, src := devCerts(t)
	cl := startCluster(t, 3, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "1MiB", clientTLS: src.ClientConfig(""),
		flags: []string{"--replicas", "3", "--raft-heartbeat-timeout", "300ms",
			"--cert-file", cf(tlsconf.ServerCertFile), "--key-file", cf(tlsconf.ServerKeyFile), "--trusted-ca-file", cf(tlsconf.CAFile), "--client-cert-auth",
			"--peer-cert-file", cf(tlsconf.ServerCertFile), "--peer-key-file", cf(tlsconf.ServerKeyFile), "--peer-trusted-ca-file", cf(tlsconf.CAFile)}})
	store, err := regiontable.OpenEtcd([]string{cl.etcd.endpoint()}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	waitReplicated(t, store, 3)

	// The raft port speaks TLS (a plain client's bytes get the
	// connection closed, nothing else): a TLS handshake with a server's
	// certificate goes through.
	nc, err := net.DialTimeout("tcp", cl.servers[0].raft, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write([]byte("plain bytes, not TLS\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(nc); len(b) != 0 {
		t.Fatalf("raft port answered a plain client with %q", b)
	}
	nc.Close()
	peer, err := tlsconf.NewSource(tlsconf.Files{CertFile: cf(tlsconf.ServerCertFile), KeyFile: cf(tlsconf.ServerKeyFile), TrustedCAFile: cf(tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", cl.servers[0].raft, tlsconf.ForAddr(peer.ClientConfig(""), cl.servers[0].raft))
	if err != nil {
		t.Fatalf("TLS handshake with the raft port: %v", err)
	}
	if got := tlsconf.RoleOf(tc.ConnectionState().PeerCertificates[0]); got != tlsconf.RoleServer {
		t.Fatalf("the raft port presents a %v certificate", got)
	}
	tc.Close()

	c := cl.newClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 300
	for i := range n {
		mustPut(t, c, fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i))
	}
	root, err := store.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, err := store.Region(ctx, root.Region())
	if err != nil {
		t.Fatal(err)
	}
	var victim *cellServer
	for _, s := range cl.servers {
		if s.id == e.Host {
			victim = s
		}
	}
	if victim == nil {
		t.Fatalf("root region's host %q is none of the servers", e.Host)
	}
	victim.kill()
	unknown := 0
	if err := putUntilAcknowledged(ctx, c, "after-kill", "yes", &unknown); err != nil {
		t.Fatalf("write after killing the leader: %v", err)
	}
	victim.restart(t)
	waitReplicated(t, store, 3)
	for i := range n {
		v, err := c.Get(ctx, []byte(fmt.Sprintf("k%04d", i)))
		if err != nil || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("k%04d after failover: %q, %v", i, v, err)
		}
	}
	code, out, errs := runCellctl(t, "--endpoints", cl.etcd.endpoint(), "--cacert", cf(tlsconf.CAFile),
		"--cert", cf(tlsconf.AdminCertFile), "--key", cf(tlsconf.AdminKeyFile), "check")
	if code != 0 {
		t.Fatalf("cellctl check over TLS: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out+errs, "replica") {
		t.Logf("cellctl check: %s %s", out, errs)
	}
}

// devCerts writes the development certificates (cellctl certs) into a
// temporary directory and returns the path of a file there and a source
// of the client certificate.
func devCerts(t *testing.T) (cf func(name string) string, client *tlsconf.Source) {
	t.Helper()
	certs := filepath.Join(t.TempDir(), "certs")
	if code, out, errs := runCellctl(t, "certs", "--dir", certs); code != 0 {
		t.Fatalf("cellctl certs: %d %s %s", code, out, errs)
	}
	cf = func(name string) string { return filepath.Join(certs, name) }
	src, err := tlsconf.NewSource(tlsconf.Files{CertFile: cf(tlsconf.ClientCertFile), KeyFile: cf(tlsconf.ClientKeyFile), TrustedCAFile: cf(tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	return cf, src
}
