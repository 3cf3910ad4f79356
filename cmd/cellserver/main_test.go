package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cellstore/cell/internal/buildinfo"
	"github.com/cellstore/cell/internal/testutil"
	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// binary is cellserver built once for the tests that run it, linked with
// main.version testVersion.
var binary string

const testVersion = "v0.0.0-celltest"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cellserver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "cellserver")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running cellserver.
type proc struct {
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	exited chan struct{}
	err    error // Wait's result, once exited is closed
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), stderr: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	p.cmd.Env = append(os.Environ(), "CELL_LOG_LEVEL=debug")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("cellserver output:\n%s", p.stderr.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("cellserver still running after %v", timeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

// waitMember waits until the server serves (it logged so) and its member
// is registered in etcd, and returns the member. (A server joins the
// members before it replays its log: a member does not serve yet.)
func waitMember(t *testing.T, p *proc, store regiontable.Store) regiontable.Member {
	t.Helper()
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			t.Fatalf("cellserver exited while starting: %v", p.err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ms, err := store.Members(ctx)
		cancel()
		if err == nil && len(ms) == 1 && strings.Contains(p.stderr.String(), `msg="server: serving"`) {
			return ms[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("cellserver did not serve and register in etcd")
	return regiontable.Member{}
}

// The binary with an embedded etcd on free loopback ports: it starts,
// serves Ping, Put and Get over the wire, registers in etcd, shuts down
// cleanly on SIGTERM (exit 0, a snapshot written), and a second run
// finds the data of the first.
func TestCellserverBinary(t *testing.T) {
	dataDir, shmDir := t.TempDir(), t.TempDir()
	a := testutil.FreeAddrs(t, 6)
	listen, rdmaListen, metrics, etcdListen, etcdPeer, raftListen := a[0], a[1], a[2], a[3], a[4], a[5]
	args := []string{
		"--data-dir", dataDir, "--listen", listen, "--rdma-listen", rdmaListen, "--metrics-listen", metrics, "--raft-listen", raftListen,
		"--etcd-listen", etcdListen, "--etcd-peer-listen", etcdPeer, "--hugepages", "off",
		"--region-size", "64MiB", "--meganode-size", "4MiB", "--server-id", "cell-test", "--cores", "2", "--shm-dir", shmDir,
	}
	store, err := regiontable.OpenEtcd([]string{etcdListen}, regiontable.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	p := start(t, args...)
	m := waitMember(t, p, store)
	if m.ID != "cell-test" || m.RPCAddr != listen || m.ReadAddr != rdmaListen || m.HostID == "" || m.Version != testVersion {
		t.Fatalf("member %+v", m)
	}
	regions, err := store.Regions(ctx)
	if err != nil || len(regions) != 1 || regions[0].Host != "cell-test" || regions[0].Epoch != 1 || len(regions[0].ReadKey) != 2 {
		t.Fatalf("regions %+v, %v", regions, err)
	}
	if root, err := store.Root(ctx); err != nil || root.Region() != regions[0].ID {
		t.Fatalf("root %v, %v", root, err)
	}
	c, err := wire.Dial(ctx, m.RPCAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Call(ctx, wire.OpPing, []byte("ping"))
	if err != nil || string(f.Body) != "ping" {
		t.Fatalf("ping: %q, %v", f.Body, err)
	}
	f.Release()
	f, err = c.CallMessage(ctx, wire.OpPut, &wire.PutRequest{Key: []byte("hello"), Value: []byte("world")})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	f.Release()
	if v := getValue(t, ctx, c, "hello"); v != "world" {
		t.Fatalf("get: %q", v)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `cell_server_ops_total{op="put",status="OK"} 1`) {
		t.Fatalf("metrics: %.500s", body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	if ents, _ := os.ReadDir(shmDir); len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "cell-rdma-") {
		t.Fatalf("shm directory of a running server: %v, want its registration table", ents)
	}
	c.Close()

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	if ents, err := os.ReadDir(filepath.Join(dataDir, "snapshots")); err != nil || len(ents) == 0 {
		t.Fatalf("no snapshot of the region after SIGTERM: %v %v", ents, err)
	}
	if !strings.Contains(p.stderr.String(), "stopped cleanly") {
		t.Fatal("no clean stop in the log")
	}
	if ents, _ := os.ReadDir(shmDir); len(ents) != 0 {
		t.Fatalf("a clean stop left %v in the shm directory", ents)
	}

	// A restart keeps the data.
	p2 := start(t, args...)
	m = waitMember(t, p2, store)
	c, err = wire.Dial(ctx, m.RPCAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := getValue(t, ctx, c, "hello"); v != "world" {
		t.Fatalf("get after restart: %q", v)
	}
	c.Close()
	if err := p2.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGINT", code)
	}
}

func getValue(t *testing.T, ctx context.Context, c *wire.Conn, key string) string {
	t.Helper()
	f, err := c.CallMessage(ctx, wire.OpGet, &wire.GetRequest{Key: []byte(key)})
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	defer f.Release()
	var rep wire.GetReply
	if err := rep.Decode(f.Body); err != nil {
		t.Fatal(err)
	}
	return string(rep.Value)
}

// Startup errors print one clear line and exit non-zero.
func TestCellserverStartupErrors(t *testing.T) {
	p := start(t, "--hugepages", "maybe")
	if code := p.wait(t, 10*time.Second); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	if out := strings.TrimSpace(p.stderr.String()); strings.Count(out, "\n") != 0 || !strings.HasPrefix(out, "cellserver: --hugepages") {
		t.Fatalf("bad flag output: %q", out)
	}

	a := testutil.FreeAddrs(t, 5)
	busy, err := net.Listen("tcp", "127.0.0.1:0") // the RPC port is taken
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p = start(t, "--data-dir", t.TempDir(), "--listen", busy.Addr().String(), "--rdma-listen", a[0], "--metrics-listen", "",
		"--etcd-listen", a[1], "--etcd-peer-listen", a[2], "--raft-listen", a[4], "--hugepages", "off", "--region-size", "16MiB", "--meganode-size", "1MiB")
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("busy port: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "cellserver: ") || !strings.Contains(last, busy.Addr().String()) {
		t.Fatalf("busy port: last line %q", last)
	}
}

// --version prints the build (package buildinfo): the linked version, then
// the revision when the build has one, and the Go version; exit 0.
func TestCellserverVersion(t *testing.T) {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "cellserver "+testVersion+"\n") || !strings.Contains(string(out), "\ngo: go") {
		t.Errorf("cellserver --version: %v, %q", err, out)
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"--version"}, &stdout, &stderr); code != 0 || stdout.String() != buildinfo.Read(version).String("cellserver") || stderr.Len() != 0 {
		t.Errorf("run --version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// What a kill -9 leaves outside the data directory, and how it goes: the
// region file (in --shm-dir, named after the data directory) and the shm
// registration table outlive the process and an rm -rf of the data
// directory; 'cellserver wipe' on the deleted directory removes both.
func TestKillThenWipe(t *testing.T) {
	dataDir, shmDir := filepath.Join(t.TempDir(), "d1"), t.TempDir()
	a := testutil.FreeAddrs(t, 5)
	store, err := regiontable.OpenEtcd([]string{a[3]}, regiontable.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	p := start(t, "--data-dir", dataDir, "--shm-dir", shmDir, "--listen", a[0], "--rdma-listen", a[1], "--metrics-listen", "",
		"--raft-listen", a[2], "--etcd-listen", a[3], "--etcd-peer-listen", a[4], "--region-size", "64MiB", "--meganode-size", "4MiB")
	waitMember(t, p, store)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	var names []string
	for _, e := range must(os.ReadDir(shmDir)) {
		names = append(names, e.Name())
	}
	var region, table bool
	for _, n := range names {
		region = region || strings.HasPrefix(n, "cell-") && !strings.HasPrefix(n, "cell-rdma-")
		table = table || strings.HasPrefix(n, fmt.Sprintf("cell-rdma-%d-", p.cmd.Process.Pid))
	}
	if !region || !table {
		t.Skipf("the killed server left %v in --shm-dir (a hugetlbfs region?)", names)
	}
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	w := start(t, "wipe", "--data-dir", dataDir, "--shm-dir", shmDir)
	if code := w.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("wipe: exit %d: %s", code, w.stderr.String())
	}
	if left := must(os.ReadDir(shmDir)); len(left) != 0 {
		t.Fatalf("after wipe, --shm-dir holds %v (it held %v)", left, names)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The binary with the TLS flags, requiring client certificates: the Go
// wire client and cellctl put and get over TLS with a client certificate
// (cellctl --cacert/--cert/--key), cellctl check is refused to it and
// runs with the admin certificate, and a plain TCP connection is refused.
// etcd's roles are on: cellctl with the client certificate reads the
// table but cannot write it (drain, a raw put or delete), the admin
// certificate can, and only the root certificate changes etcd's users.
func TestCellserverTLS(t *testing.T) {
	certs := filepath.Join(t.TempDir(), "certs")
	cellctl := filepath.Join(t.TempDir(), "cellctl")
	if out, err := exec.Command("go", "build", "-o", cellctl, "../cellctl").CombinedOutput(); err != nil {
		t.Fatalf("go build cellctl: %v\n%s", err, out)
	}
	if out, err := exec.Command(cellctl, "certs", "--dir", certs, "--valid-for", "1h").CombinedOutput(); err != nil {
		t.Fatalf("cellctl certs: %v\n%s", err, out)
	}
	cf := func(name string) string { return filepath.Join(certs, name) }
	a := testutil.FreeAddrs(t, 6)
	listen, rdmaListen, metrics, etcdListen, etcdPeer, raftListen := a[0], a[1], a[2], a[3], a[4], a[5]
	p := start(t,
		"--data-dir", t.TempDir(), "--listen", listen, "--rdma-listen", rdmaListen, "--metrics-listen", metrics, "--raft-listen", raftListen,
		"--etcd-listen", etcdListen, "--etcd-peer-listen", etcdPeer, "--hugepages", "off",
		"--region-size", "64MiB", "--meganode-size", "4MiB", "--server-id", "cell-tls", "--shm-dir", t.TempDir(),
		"--cert-file", cf("server.crt"), "--key-file", cf("server.key"), "--trusted-ca-file", cf("ca.crt"), "--client-cert-auth",
		"--peer-cert-file", cf("server.crt"), "--peer-key-file", cf("server.key"), "--peer-trusted-ca-file", cf("ca.crt"),
	)
	// The embedded etcd serves TLS on its client port too, with the same
	// certificate and client certificates required.
	etcdURL := "https://" + etcdListen
	src, err := tlsconf.NewSource(tlsconf.Files{CertFile: cf("admin.crt"), KeyFile: cf("admin.key"), TrustedCAFile: cf("ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	store, err := regiontable.OpenEtcd([]string{etcdURL}, regiontable.EtcdOptions{TLS: src.ClientConfig("")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m := waitMember(t, p, store)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	// Without a client certificate etcd refuses, saying why.
	nocert, err := tlsconf.NewSource(tlsconf.Files{TrustedCAFile: cf("ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := regiontable.OpenEtcd([]string{etcdURL}, regiontable.EtcdOptions{TLS: nocert.ClientConfig(""), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := bare.Connect(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("etcd without a client certificate: %v", err)
	}
	bare.Close()

	// Plain TCP is refused, not lost.
	pc, err := wire.Dial(ctx, m.RPCAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pc.Call(ctx, wire.OpPing, nil)
	pc.Close()
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("plain ping to a TLS port: %v", err)
	}

	ctl := func(cert string, args ...string) (string, error) {
		args = append([]string{"--endpoints", etcdURL, "--cacert", cf("ca.crt"), "--cert", cf(cert + ".crt"), "--key", cf(cert + ".key")}, args...)
		out, err := exec.Command(cellctl, args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := ctl("client", "put", "hello", "world"); err != nil {
		t.Fatalf("cellctl put: %v: %s", err, out)
	}
	if out, err := ctl("client", "get", "hello"); err != nil || !strings.Contains(out, "world") {
		t.Fatalf("cellctl get: %q, %v", out, err)
	}
	if out, err := ctl("client", "check"); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("cellctl check with a client certificate: %q, %v", out, err)
	}
	if out, err := ctl("admin", "check"); err != nil {
		t.Fatalf("cellctl check with an admin certificate: %v: %s", err, out)
	}
	// etcd's roles are on (--etcd-auth defaults on here): the client
	// certificate reads the region table but may not write it, neither
	// through cellctl nor directly; the admin certificate may.
	if out, err := ctl("client", "drain", "--undo", "cell-tls"); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("cellctl drain --undo with a client certificate: %q, %v; want etcd's permission denied", out, err)
	}
	if out, err := ctl("client", "members"); err != nil || !strings.Contains(out, "cell-tls") {
		t.Fatalf("cellctl members with a client certificate: %q, %v", out, err)
	}
	if out, err := ctl("admin", "drain", "--undo", "cell-tls"); err != nil {
		t.Fatalf("cellctl drain --undo with an admin certificate: %v: %s", err, out)
	}
	csrc, err := tlsconf.NewSource(tlsconf.Files{CertFile: cf("client.crt"), KeyFile: cf("client.key"), TrustedCAFile: cf("ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	cstore, err := regiontable.OpenEtcd([]string{etcdURL}, regiontable.EtcdOptions{TLS: csrc.ClientConfig("")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cstore.Client().Put(ctx, regiontable.DefaultPrefix+"/root", "1:1"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("client certificate putting the root pointer in etcd: %v, want permission denied", err)
	}
	if _, err := cstore.Client().Delete(ctx, regiontable.DefaultPrefix+"/", clientv3.WithPrefix()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("client certificate deleting the region table: %v, want permission denied", err)
	}
	cstore.Close()
	// Users change only with the root certificate.
	if out, err := ctl("admin", "etcd-roles", "--user", "node1.example.com=server"); err == nil || !strings.Contains(out, "not etcd's root user") {
		t.Fatalf("cellctl etcd-roles with an admin certificate: %q, %v; want refused", out, err)
	}
	if out, err := ctl("root", "etcd-roles", "--user", "node1.example.com=server"); err != nil || !strings.Contains(out, "user node1.example.com: role cell-server") {
		t.Fatalf("cellctl etcd-roles with the root certificate: %q, %v", out, err)
	}
	// One-sided reads over the tcp responder, which serves TLS too.
	out, err := ctl("client", "bench", "--workload", "get", "--provider", "tcp", "--mode", "client", "--keys", "200",
		"--clients", "1", "--warmup", "0s", "--duration", "1s", "--no-progress")
	if err != nil || !strings.Contains(out, "client-side") || strings.Contains(out, " 0 client-side") {
		t.Fatalf("one-sided reads over TLS: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "one-sided reads") {
			t.Log(strings.TrimSpace(l))
		}
	}
	// cellctl's variables name the files too.
	cmd := exec.Command(cellctl, "--endpoints", etcdURL, "get", "hello")
	cmd.Env = append(os.Environ(), "CELLCTL_CACERT="+cf("ca.crt"), "CELLCTL_CERT="+cf("client.crt"), "CELLCTL_KEY="+cf("client.key"))
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "world") {
		t.Fatalf("cellctl get with CELLCTL_CACERT etc.: %q, %v", out, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
}
