// Package storetest starts the stores the bindings' tests run against —
// a cellserver built from this repository, etcd and redis-server from
// PATH — on free loopback ports with temporary data, and stops them and
// removes what they made when the test ends. It also runs a short YCSB
// load and run through go-ycsb's own client and checks what the binding
// returned (RunWorkload).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
)

// startTimeout bounds a store's start.
const startTimeout = 60 * time.Second

// freePorts returns n loopback ports free right now (the usual race: a
// port may be taken before the store binds it; the start then fails
// clearly).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// addr is a loopback address.
func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// process is a store started by a test.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs name with args, its output in logPath, and stops it with
// SIGTERM (SIGKILL after 20 s) at the end of the test.
func start(t *testing.T, logPath, name string, args ...string) *process {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop ends the process: SIGTERM, then SIGKILL after 20 s.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the end of the process's log, for failure messages.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitUntil polls ready until it succeeds, the process exits or
// startTimeout passes.
func (p *process) waitUntil(t *testing.T, what string, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		err := ready()
		if err == nil {
			return
		}
		if p.exited() {
			t.Fatalf("%s exited before it was ready (%v); log:\n%s", what, err, p.tail())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v: %v; log:\n%s", what, startTimeout, err, p.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lookPath returns the path of a store's binary, or skips the test with
// what to install.
func lookPath(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not on PATH: install Debian's %s (apt-get install %s) to run this test", name, pkg, pkg)
	}
	return path
}

var (
	buildOnce  sync.Once
	buildPath  string
	buildError error
)

// cellserverBinary builds cmd/cellserver of this repository once per
// test process, into a directory removed by Cleanup.
func cellserverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			buildError = err
			return
		}
		dir, err := os.MkdirTemp("", "cell-ycsb-bin-")
		if err != nil {
			buildError = err
			return
		}
		buildPath = filepath.Join(dir, "cellserver")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/cellserver")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildError = fmt.Errorf("go build ./cmd/cellserver: %v\n%s", err, out)
		}
	})
	if buildError != nil {
		t.Fatal(buildError)
	}
	return buildPath
}

// Cleanup removes the cellserver binary built by the tests; call it from
// TestMain after the tests.
func Cleanup() {
	if buildPath != "" {
		os.RemoveAll(filepath.Dir(buildPath))
	}
}

// repoRoot is the directory of the main module (github.com/cellstore/cell),
// which the ycsb module replaces with ../.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cellstore/cell").Output()
	if err != nil {
		return "", fmt.Errorf("locate the main module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// StartCell starts one cellserver (embedded etcd, RF 1) on free loopback
// ports with a temporary data directory, and returns its etcd endpoint.
// At the end of the test the server is stopped and its data directory
// and region files removed (cellserver wipe).
func StartCell(t *testing.T) string {
	t.Helper()
	bin := cellserverBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ports := freePorts(t, 5)
	etcd := addr(ports[4])
	t.Cleanup(func() { wipeCell(t, bin, data) }) // runs after the stop
	p := start(t, filepath.Join(dir, "cellserver.log"), bin,
		"--data-dir", data, "--server-id", "t1", "--cores", "1",
		"--listen", addr(ports[0]), "--rdma-listen", addr(ports[1]), "--metrics-listen", "",
		"--raft-listen", addr(ports[2]), "--etcd-listen", etcd, "--etcd-peer-listen", addr(ports[3]),
		"--region-size", "64MiB", "--meganode-size", "16MiB", "--log-level", "warn")
	p.waitUntil(t, "cellserver", func() error { return cellReady(etcd) })
	return etcd
}

// cellReady connects a client through etcd and writes a key.
func cellReady(etcd string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{etcd}, EtcdDialTimeout: time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Put(ctx, []byte("storetest/ready"), []byte("1"))
}

// wipeCell deletes a stopped cellserver's data directory and region
// files.
func wipeCell(t *testing.T, bin, data string) {
	out, err := exec.Command(bin, "wipe", "--data-dir", data).CombinedOutput()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cellserver wipe --data-dir %s: %v\n%s", data, err, out)
	}
}

// StartEtcd starts a one-member etcd (fsync on, as always) from PATH on
// free loopback ports with a temporary data directory, and returns its
// client endpoint. Skips the test when etcd is not on PATH.
func StartEtcd(t *testing.T) string {
	t.Helper()
	bin := lookPath(t, "etcd", "etcd-server")
	dir := t.TempDir()
	ports := freePorts(t, 2)
	client, peer := "http://"+addr(ports[0]), "http://"+addr(ports[1])
	p := start(t, filepath.Join(dir, "etcd.log"), bin,
		"--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "t="+peer, "--log-level", "warn")
	p.waitUntil(t, "etcd", func() error { return dialOK(addr(ports[0])) })
	return addr(ports[0])
}

// StartRedis starts redis-server from PATH on a free loopback port with
// a temporary working directory and persistence off, and returns its
// address. Skips the test when redis-server is not on PATH.
func StartRedis(t *testing.T) string {
	t.Helper()
	bin := lookPath(t, "redis-server", "redis-server")
	dir := t.TempDir()
	port := freePorts(t, 1)[0]
	p := start(t, filepath.Join(dir, "redis.log"), bin,
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	p.waitUntil(t, "redis-server", func() error { return dialOK(addr(port)) })
	return addr(port)
}

// dialOK reports whether a TCP connection to a succeeds.
func dialOK(a string) error {
	c, err := net.DialTimeout("tcp", a, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
