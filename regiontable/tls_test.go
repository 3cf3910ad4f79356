package regiontable_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
)

// TestEtcdTLS: an embedded etcd with TLS on its client port (client
// certificates required) and its peer port serves a store opened with a
// client certificate of its CA; a store without one fails, and its errors
// say that the TLS handshake failed over the certificate.
func TestEtcdTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	dir := filepath.Join(t.TempDir(), "certs")
	if err := tlsconf.WriteDevCerts(dir, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	serverFiles := tlsconf.Files{CertFile: p(tlsconf.ServerCertFile), KeyFile: p(tlsconf.ServerKeyFile), TrustedCAFile: p(tlsconf.CAFile), ClientCertAuth: true}
	var e *embedded.Etcd
	var err error
	for range 3 { // a port may be taken between freeAddr and etcd's listen
		e, err = embedded.Start(embedded.Options{
			Dir:        t.TempDir(),
			ClientAddr: freeAddr(t),
			PeerAddr:   freeAddr(t),
			ClientTLS:  serverFiles,
			PeerTLS:    serverFiles,
			Logger:     testLogger(t),
		})
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start embedded etcd with TLS: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if eps := e.Endpoints(); len(eps) != 1 || !strings.HasPrefix(eps[0], "https://127.0.0.1:") {
		t.Fatalf("endpoints %v, want https://127.0.0.1:port", eps)
	}

	source := func(f tlsconf.Files) *tlsconf.Source {
		s, err := tlsconf.NewSource(f)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// With the client certificate: works.
	good := source(tlsconf.Files{CertFile: p(tlsconf.ClientCertFile), KeyFile: p(tlsconf.ClientKeyFile), TrustedCAFile: p(tlsconf.CAFile)})
	s, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{TLS: good.ClientConfig(""), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Connect(ctx); err != nil {
		t.Fatalf("Connect with a client certificate: %v", err)
	}
	r := region(7, 1)
	if err := s.PutRegion(ctx, r); err != nil {
		t.Fatalf("PutRegion over TLS: %v", err)
	}
	if got, err := s.Region(ctx, 7); err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("Region over TLS: %+v, %v; want %+v", got, err, r)
	}
	reg, err := s.RegisterMember(ctx, member("srv-tls"))
	if err != nil {
		t.Fatalf("RegisterMember over TLS: %v", err)
	}
	_ = reg.Close(ctx)

	// Without a client certificate: refused, and the errors say why.
	bare := source(tlsconf.Files{TrustedCAFile: p(tlsconf.CAFile)})
	s2, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{TLS: bare.ClientConfig(""), DialTimeout: time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	err = s2.Connect(ctx)
	t.Logf("Connect without a client certificate: %v", err)
	if !errors.Is(err, regiontable.ErrUnreachable) || !strings.Contains(err.Error(), "TLS handshake failed") || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Connect without a client certificate: %v, want ErrUnreachable saying the TLS handshake failed over the certificate", err)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer lcancel()
	_, err = s2.Region(lctx, 7)
	t.Logf("Region without a client certificate: %v", err)
	if err == nil || !strings.Contains(err.Error(), "TLS handshake failed") || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Region without a client certificate: %v, want an error saying the TLS handshake failed", err)
	}

	// A client that does not trust etcd's CA refuses etcd.
	other := filepath.Join(t.TempDir(), "other")
	if err := tlsconf.WriteDevCerts(other, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	stranger := source(tlsconf.Files{CertFile: filepath.Join(other, tlsconf.ClientCertFile), KeyFile: filepath.Join(other, tlsconf.ClientKeyFile),
		TrustedCAFile: filepath.Join(other, tlsconf.CAFile)})
	s3, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{TLS: stranger.ClientConfig(""), DialTimeout: time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	err = s3.Connect(ctx)
	t.Logf("Connect trusting another CA: %v", err)
	if !errors.Is(err, regiontable.ErrUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Connect trusting another CA: %v, want ErrUnreachable naming the certificate", err)
	}
}
