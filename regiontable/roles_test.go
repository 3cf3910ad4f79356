package regiontable_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
)

// tlsEtcd starts an embedded etcd requiring client certificates of the
// development CA written into dir, and returns it.
func tlsEtcd(t *testing.T, dir string) *embedded.Etcd {
	t.Helper()
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
	return e
}

// certClient is a raw etcd client presenting dir's certificate cert (with
// key), trusting dir's CA.
func certClient(t *testing.T, e *embedded.Etcd, dir, cert, key string) *clientv3.Client {
	t.Helper()
	src, err := tlsconf.NewSource(tlsconf.Files{CertFile: filepath.Join(dir, cert), KeyFile: filepath.Join(dir, key), TrustedCAFile: filepath.Join(dir, tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), TLS: src.ClientConfig("127.0.0.1"), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestEtcdRoles: with EnableRoles run on an etcd requiring client
// certificates, the cell-client certificate reads the region table but may
// not write or delete under the prefix; the cell-server certificate writes
// it and keeps a member's lease alive and campaigns; the cell-admin one
// writes; a certificate whose CommonName names no user is refused; only
// the root certificate may change users afterwards. Before, the client
// certificate could write the table (the gap this closes).
func TestEtcdRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	dir := filepath.Join(t.TempDir(), "certs")
	e := tlsEtcd(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	server := certClient(t, e, dir, tlsconf.ServerCertFile, tlsconf.ServerKeyFile)
	admin := certClient(t, e, dir, tlsconf.AdminCertFile, tlsconf.AdminKeyFile)
	cl := certClient(t, e, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile)
	root := certClient(t, e, dir, tlsconf.RootCertFile, tlsconf.RootKeyFile)

	// Before: etcd admits any certificate of its CA to write the table.
	if _, err := cl.Put(ctx, "/cell/root", "before"); err != nil {
		t.Fatalf("client certificate writing the table before roles: %v", err)
	}
	if _, err := cl.Delete(ctx, "/cell/root"); err != nil {
		t.Fatal(err)
	}

	// A store of the server certificate: a member registered (its lease
	// kept alive) and a campaign under way when auth comes on.
	ssrc, err := tlsconf.NewSource(tlsconf.Files{CertFile: filepath.Join(dir, tlsconf.ServerCertFile), KeyFile: filepath.Join(dir, tlsconf.ServerKeyFile), TrustedCAFile: filepath.Join(dir, tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{TLS: ssrc.ClientConfig(""), LeaseTTL: 4 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg, err := store.RegisterMember(ctx, member("srv-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctx)

	res, err := regiontable.EnableRoles(ctx, server, regiontable.RolesOptions{})
	if err != nil {
		t.Fatalf("EnableRoles: %v", err)
	}
	if !res.Enabled || res.WasOn || !res.Configured {
		t.Fatalf("EnableRoles on a fresh etcd: %+v, want Enabled and Configured", res)
	}

	// The client certificate reads, and may not write.
	if _, err := cl.Get(ctx, "/cell/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("client certificate reading the table: %v", err)
	}
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"put root", func() error { _, err := cl.Put(ctx, "/cell/root", "1"); return err }},
		{"put region", func() error { _, err := cl.Put(ctx, "/cell/regions/00000001", "{}"); return err }},
		{"delete member", func() error { _, err := cl.Delete(ctx, "/cell/members/srv-1"); return err }},
		{"delete the prefix", func() error { _, err := cl.Delete(ctx, "/cell/", clientv3.WithPrefix()); return err }},
		{"txn put", func() error {
			_, err := cl.Txn(ctx).Then(clientv3.OpPut("/cell/members/evil", "x")).Commit()
			return err
		}},
		{"put outside the table", func() error { _, err := cl.Put(ctx, "/other", "1"); return err }},
		// (Without a password: etcd hashes one with bcrypt before it
		// checks the permission, which on a loaded machine stalls it for
		// seconds, longer than the member's lease.)
		{"user add", func() error {
			_, err := cl.UserAddWithOptions(ctx, "evil", "", &clientv3.UserAddOptions{NoPassword: true})
			return err
		}},
	} {
		if err := op.do(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("client certificate: %s = %v, want permission denied", op.name, err)
		}
	}
	// The client's store reads what it needs: the snapshot.
	csrc, err := tlsconf.NewSource(tlsconf.Files{CertFile: filepath.Join(dir, tlsconf.ClientCertFile), KeyFile: filepath.Join(dir, tlsconf.ClientKeyFile), TrustedCAFile: filepath.Join(dir, tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	cstore, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{TLS: csrc.ClientConfig(""), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cstore.Close()
	// The server certificate writes, the client's store reads it.
	if err := store.PutRegion(ctx, region(7, 1)); err != nil {
		t.Fatalf("server store PutRegion under roles: %v", err)
	}
	if st, err := cstore.Load(ctx); err != nil || len(st.Regions) != 1 || st.Regions[0].ID != 7 {
		t.Fatalf("client store Load under roles: %+v, %v; want region 7", st, err)
	}
	if err := cstore.PutRegion(ctx, region(9, 1)); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("client store PutRegion under roles: %v, want permission denied", err)
	}

	// The member's lease, registered before auth came on, stays alive
	// across several TTLs (keepalives under auth), and it campaigns.
	time.Sleep(7 * time.Second)
	if ms, err := store.Members(ctx); err != nil || len(ms) != 1 {
		t.Fatalf("members after 1.75 lease TTLs under roles: %v, %v; want srv-1 alive", ms, err)
	}
	select {
	case <-reg.Done():
		t.Fatalf("member registration ended under roles: %v", reg.Err())
	default:
	}
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	lead, err := store.Campaign(cctx, "srv-1")
	ccancel()
	if err != nil {
		t.Fatalf("campaign under roles: %v", err)
	}
	_ = lead.Resign(ctx)
	if _, err := admin.Put(ctx, "/cell/draining/srv-1", "1"); err != nil {
		t.Fatalf("admin certificate writing the table: %v", err)
	}
	if _, err := admin.Put(ctx, "/other", "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("admin certificate writing outside the table: %v, want permission denied", err)
	}

	// A certificate whose CommonName names no user is refused.
	ca, err := tlsconf.LoadCA(filepath.Join(dir, tlsconf.CAFile), filepath.Join(dir, tlsconf.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cp, kp, err := ca.Issue(tlsconf.Issue{CommonName: "node1.example.com", Role: tlsconf.RoleServer, Hosts: tlsconf.DefaultHosts,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"node1.crt": cp, "node1.key": kp} {
		if err := tlsconf.WriteFileAtomic(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	node1 := certClient(t, e, dir, "node1.crt", "node1.key")
	if _, err := node1.Get(ctx, "/cell/root"); err == nil {
		t.Fatal("a certificate whose CommonName names no user read the table")
	} else {
		t.Logf("a certificate whose CommonName names no user: %v", err)
	}
	if _, err := node1.Put(ctx, "/cell/root", "1"); err == nil {
		t.Fatal("a certificate whose CommonName names no user wrote the table")
	}

	// Once auth is on, only root changes users: a server quietly stops,
	// an admin is told, root adds node1.example.com as a server.
	users := map[string]tlsconf.Role{"node1.example.com": tlsconf.RoleServer}
	if res, err := regiontable.EnableRoles(ctx, server, regiontable.RolesOptions{IfAuthOff: true, Users: users}); err != nil || !res.WasOn || res.Configured {
		t.Fatalf("EnableRoles by a server with auth on: %+v, %v; want WasOn, nothing done", res, err)
	}
	if _, err := regiontable.EnableRoles(ctx, admin, regiontable.RolesOptions{Users: users}); !errors.Is(err, regiontable.ErrNotEtcdRoot) {
		t.Fatalf("EnableRoles by an admin with auth on: %v, want ErrNotEtcdRoot", err)
	}
	if res, err := regiontable.EnableRoles(ctx, root, regiontable.RolesOptions{Users: users}); err != nil || !res.WasOn || !res.Configured || res.Enabled {
		t.Fatalf("EnableRoles by root with auth on: %+v, %v; want WasOn and Configured", res, err)
	}
	if _, err := node1.Put(ctx, "/cell/root", "1"); err != nil {
		t.Fatalf("node1.example.com after root added it as a server: %v", err)
	}
	// Moved to the client role: it may no longer write.
	users["node1.example.com"] = tlsconf.RoleClient
	if _, err := regiontable.EnableRoles(ctx, root, regiontable.RolesOptions{Users: users}); err != nil {
		t.Fatal(err)
	}
	if _, err := node1.Put(ctx, "/cell/root", "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("node1.example.com moved to the client role writing: %v, want permission denied", err)
	}
	if _, err := node1.Get(ctx, "/cell/root"); err != nil {
		t.Fatalf("node1.example.com moved to the client role reading: %v", err)
	}
}

// TestEtcdRolesConcurrent: several servers running EnableRoles at once (as
// every server of an embedded etcd cluster does at bootstrap) all succeed,
// one of them turning auth on, and the roles work afterwards; running it
// again is a quiet no-op.
func TestEtcdRolesConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	dir := filepath.Join(t.TempDir(), "certs")
	e := tlsEtcd(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const n = 4
	results := make([]regiontable.RolesResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		cli := certClient(t, e, dir, tlsconf.ServerCertFile, tlsconf.ServerKeyFile)
		wg.Go(func() {
			results[i], errs[i] = regiontable.EnableRoles(ctx, cli, regiontable.RolesOptions{IfAuthOff: true})
		})
	}
	wg.Wait()
	enabled := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("EnableRoles %d: %v", i, errs[i])
		}
		if results[i].Enabled {
			enabled++
		}
	}
	t.Logf("results %+v", results)
	if enabled < 1 {
		t.Fatalf("no EnableRoles turned auth on: %+v", results)
	}
	server := certClient(t, e, dir, tlsconf.ServerCertFile, tlsconf.ServerKeyFile)
	if res, err := regiontable.EnableRoles(ctx, server, regiontable.RolesOptions{IfAuthOff: true}); err != nil || !res.WasOn || res.Enabled {
		t.Fatalf("EnableRoles again: %+v, %v; want a quiet no-op", res, err)
	}
	root := certClient(t, e, dir, tlsconf.RootCertFile, tlsconf.RootKeyFile)
	if res, err := regiontable.EnableRoles(ctx, root, regiontable.RolesOptions{}); err != nil || !res.Configured || res.Enabled {
		t.Fatalf("EnableRoles again by root: %+v, %v", res, err)
	}
	st, err := root.AuthStatus(ctx)
	if err != nil || !st.Enabled {
		t.Fatalf("auth status: %+v, %v", st, err)
	}
	if _, err := server.Put(ctx, "/cell/root", "1"); err != nil {
		t.Fatalf("server writing after concurrent EnableRoles: %v", err)
	}
	cl := certClient(t, e, dir, tlsconf.ClientCertFile, tlsconf.ClientKeyFile)
	if _, err := cl.Put(ctx, "/cell/root", "2"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("client writing after concurrent EnableRoles: %v, want permission denied", err)
	}
}

// TestEtcdRolesInvalid: bad options are refused before etcd is asked.
func TestEtcdRolesInvalid(t *testing.T) {
	for _, o := range []regiontable.RolesOptions{
		{Prefix: "cell"},
		{Prefix: "/cell/"},
		{Users: map[string]tlsconf.Role{"root": tlsconf.RoleAdmin}},
		{Users: map[string]tlsconf.Role{"": tlsconf.RoleAdmin}},
		{Users: map[string]tlsconf.Role{"x": tlsconf.RoleNone}},
	} {
		if _, err := regiontable.EnableRoles(context.Background(), nil, o); !errors.Is(err, regiontable.ErrInvalid) {
			t.Errorf("EnableRoles(%+v) = %v, want ErrInvalid", o, err)
		}
	}
	for s, want := range map[string]tlsconf.Role{"server": tlsconf.RoleServer, "cell-admin": tlsconf.RoleAdmin, "Client": tlsconf.RoleClient} {
		if r, err := regiontable.ParseEtcdRole(s); err != nil || r != want {
			t.Errorf("ParseEtcdRole(%q) = %v, %v; want %v", s, r, err, want)
		}
	}
	if _, err := regiontable.ParseEtcdRole("root"); !errors.Is(err, regiontable.ErrInvalid) {
		t.Errorf("ParseEtcdRole(root) = %v, want ErrInvalid", err)
	}
}
