package test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/testutil"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// bins are cellserver and cellctl, built once by TestMain.
var bins struct {
	dir, cellserver, cellctl string
}

// binTags and binCgo are how cellserver and cellctl are built for the
// tests: pure Go, unless the tests are built with the libfabric tag.
var binTags, binCgo = "", "CGO_ENABLED=0"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cell-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins.dir = dir
	bins.cellserver = filepath.Join(dir, "cellserver")
	bins.cellctl = filepath.Join(dir, "cellctl")
	for bin, pkg := range map[string]string{
		bins.cellserver: "github.com/cellstore/cell/cmd/cellserver",
		bins.cellctl:    "github.com/cellstore/cell/cmd/cellctl",
	} {
		// Static, as in the images of make images (which then finds every
		// package of these two in the build cache); with cgo and the
		// libfabric provider when the tests are built with its tag
		// (fabric_test.go).
		args := []string{"build", "-o", bin}
		if binTags != "" {
			args = append(args, "-tags", binTags)
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Env = append(os.Environ(), binCgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

// serverOptions shape a cellserver.
type serverOptions struct {
	cores        int    // --cores; default 2
	regionSize   string // default 64MiB
	meganodeSize string // default 16MiB
	nodeSize     string // default 1KiB
	// etcdEndpoint is an etcd client URL for --etcd-endpoints: the
	// server joins that etcd's cluster. Empty: it embeds its own etcd.
	etcdEndpoint string
	// env is added to the process's environment (testing knobs).
	env []string
	// flags are added to the command line (--replicas 3, say).
	flags []string
	// clientTLS, when the flags make the server serve TLS, is what the
	// test's readiness pings and clients dial it with.
	clientTLS *tls.Config
}

// cellServer is a running cellserver subprocess with its embedded etcd,
// or in the cluster of an external etcd.
type cellServer struct {
	id                                   string
	dataDir                              string
	rpc, rdma, metrics, raft, etcd, peer string   // etcd: the client endpoint; peer: "" unless embedded
	args, env                            []string // cellserver's flags and extra environment
	clientTLS                            *tls.Config
	launchedAt                           int // length of out when the process was started
	cmd                                  *exec.Cmd
	out                                  *testutil.SyncBuffer
	exited                               chan struct{}
	err                                  error // Wait's result, once exited is closed
	// stopped is set when the test stopped or killed the server on
	// purpose: its exit is then no failure.
	stopped atomic.Bool
}

// serverSeq numbers the servers of this process, for unique IDs.
var serverSeq struct {
	sync.Mutex
	n int
}

// startServer starts a cellserver on free loopback ports, waits until it
// is registered in its etcd and answers a ping, and stops it when the test
// ends. A start that lost a port race to another process is retried.
func startServer(t testing.TB, o serverOptions) *cellServer {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s, err := tryStartServer(t, o)
		if err == nil {
			return s
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("cellserver did not start: %v", err)
		}
		t.Logf("cellserver start %d lost a port race, retrying: %v", attempt, err)
	}
}

func tryStartServer(t testing.TB, o serverOptions) (*cellServer, error) {
	t.Helper()
	s := newServer(t, o)
	if err := s.launch(t); err != nil {
		return nil, err
	}
	t.Cleanup(func() { s.stop(t) })
	return s, nil
}

// newServer picks free loopback ports, a data directory and the command
// line of a cellserver shaped by o, and starts nothing.
func newServer(t testing.TB, o serverOptions) *cellServer {
	t.Helper()
	if o.cores == 0 {
		o.cores = 2
	}
	if o.regionSize == "" {
		o.regionSize = "64MiB"
	}
	if o.meganodeSize == "" {
		o.meganodeSize = "16MiB"
	}
	if o.nodeSize == "" {
		o.nodeSize = "1KiB"
	}
	serverSeq.Lock()
	serverSeq.n++
	id := fmt.Sprintf("cell-test-%d-%d", os.Getpid(), serverSeq.n)
	serverSeq.Unlock()
	a := testutil.FreeAddrs(t, 6)
	s := &cellServer{
		id: id, dataDir: t.TempDir(),
		rpc: a[0], rdma: a[1], metrics: a[2], etcd: a[3], peer: a[4], raft: a[5],
		out: &testutil.SyncBuffer{},
	}
	args := []string{"--data-dir", s.dataDir, "--listen", s.rpc, "--rdma-listen", s.rdma, "--metrics-listen", s.metrics, "--raft-listen", s.raft,
		"--server-id", id, "--hugepages", "off", "--cores", fmt.Sprint(o.cores),
		"--region-size", o.regionSize, "--meganode-size", o.meganodeSize, "--node-size", o.nodeSize}
	if o.etcdEndpoint != "" {
		s.etcd, s.peer = o.etcdEndpoint, ""
		args = append(args, "--etcd-endpoints", o.etcdEndpoint)
	} else {
		args = append(args, "--etcd-listen", s.etcd, "--etcd-peer-listen", s.peer)
	}
	args = append(args, o.flags...)
	s.args, s.env, s.clientTLS = args, o.env, o.clientTLS
	return s
}

// launch starts the cellserver process with s.args and waits until it is
// ready; a server that does not get ready is killed.
func (s *cellServer) launch(t testing.TB) error {
	if err := s.spawn(); err != nil {
		return err
	}
	if err := s.waitReady(t, 60*time.Second); err != nil {
		s.kill()
		return fmt.Errorf("%w\ncellserver output:\n%s", err, s.out.String())
	}
	return nil
}

// spawn starts the cellserver process with s.args and returns at once.
func (s *cellServer) spawn() error {
	s.cmd = exec.Command(bins.cellserver, s.args...)
	// A test binary that dies (a -timeout panic skips every cleanup)
	// takes its servers with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.Env = append(os.Environ(), s.env...)
	s.exited = make(chan struct{})
	s.launchedAt = len(s.out.String())
	if err := s.cmd.Start(); err != nil {
		return err
	}
	exited := s.exited
	go func() {
		s.err = s.cmd.Wait()
		close(exited)
	}()
	return nil
}

// restart starts a server that was killed or stopped again, on the same
// data directory, ports and flags.
func (s *cellServer) restart(t testing.TB) {
	t.Helper()
	if s.alive() {
		t.Fatalf("restart of %s, which still runs", s.id)
	}
	// Another test process may be probing one of the ports for a moment
	// (testutil.FreeAddrs binds candidates to see whether they are free):
	// a start that finds a port in use is tried again for up to 5 s.
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := s.launch(t)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			t.Fatalf("restart %s: %v", s.id, err)
		}
		t.Logf("restart %s: a port was in use; trying again", s.id)
		time.Sleep(100 * time.Millisecond)
	}
	s.stopped.Store(false)
}

// waitReady polls until the server is registered in etcd and answers a
// ping, or it exits, or timeout passes.
func (s *cellServer) waitReady(t testing.TB, timeout time.Duration) error {
	store, err := regiontable.OpenEtcd([]string{s.etcd}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer store.Close()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("cellserver exited while starting: %v", s.err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		last = s.ready(ctx, store)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-s.exited:
		case <-time.After(20 * time.Millisecond): // poll interval
		}
	}
	return fmt.Errorf("not ready after %v: %w", timeout, last)
}

func (s *cellServer) ready(ctx context.Context, store regiontable.Store) error {
	// A restarted server's member entry may be its killed predecessor's,
	// whose lease has not run out: only the new process's own word says
	// it finished starting.
	if !strings.Contains(s.out.String()[s.launchedAt:], `msg="server: serving"`) {
		return fmt.Errorf("%s has not logged that it serves", s.id)
	}
	ms, err := store.Members(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(ms, func(m regiontable.Member) bool { return m.ID == s.id }) {
		return fmt.Errorf("%s not among the members %+v", s.id, ms)
	}
	var wo *wire.Options
	if s.clientTLS != nil {
		wo = &wire.Options{TLS: s.clientTLS}
	}
	c, err := wire.Dial(ctx, s.rpc, wo)
	if err != nil {
		return err
	}
	defer c.Close()
	f, err := c.Call(ctx, wire.OpPing, []byte("ready?"))
	if err != nil {
		return err
	}
	f.Release()
	return nil
}

// alive reports whether the process is still running.
func (s *cellServer) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *cellServer) pid() int { return s.cmd.Process.Pid }

// stop sends SIGTERM and waits for a clean exit; after 20 s it kills.
// A server that does not exit cleanly fails the test, and so does one that
// exited before unless the test stopped or killed it.
func (s *cellServer) stop(t testing.TB) {
	if s.stopped.Swap(true) && !s.alive() {
		return
	}
	if !s.alive() {
		if !t.Failed() {
			t.Errorf("cellserver exited before the end of the test: %v\n%s", s.err, s.out.String())
		}
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		if s.err != nil {
			t.Errorf("cellserver exit after SIGTERM: %v\n%s", s.err, s.out.String())
		}
	case <-time.After(20 * time.Second):
		s.kill()
		t.Errorf("cellserver still running 20s after SIGTERM: killed\n%s", s.out.String())
	}
	if t.Failed() {
		t.Logf("cellserver %s output:\n%s", s.id, s.out.String())
	}
}

// kill sends SIGKILL and waits for the process to end.
func (s *cellServer) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.reap()
}

// reap takes note that the server died on purpose (killed by the test, or
// by itself at a failpoint the test set) and removes what it could not.
func (s *cellServer) reap() {
	s.stopped.Store(true)
	// A killed server cannot remove its shm registration table.
	files, _ := filepath.Glob(fmt.Sprintf("/dev/shm/cell-rdma-%d-*", s.cmd.Process.Pid))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

// clientConfig is a client configuration for the server's cluster.
func (s *cellServer) clientConfig(t testing.TB) client.Config {
	return client.Config{
		Endpoints: []string{s.etcd},
		Logger:    slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		TLS:       s.clientTLS,
	}
}

// newClient connects a client, closed when the test ends.
func (s *cellServer) newClient(t testing.TB, edit func(*client.Config)) *client.Client {
	t.Helper()
	cfg := s.clientConfig(t)
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testWriter sends log output to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// cellctl runs the cellctl binary against the server's cluster.
func (s *cellServer) cellctl(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCellctl(t, append([]string{"--endpoints", s.etcd}, args...)...)
}

// runCellctl runs the cellctl binary with args.
func runCellctl(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.cellctl, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("cellctl %q: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// put stores key=value through c, failing the test on error.
func mustPut(t testing.TB, c *client.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Put(ctx, []byte(key), []byte(value)); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

// mustGet reads key through c and checks its value.
func mustGet(t testing.TB, c *client.Client, key, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Get(ctx, []byte(key))
	if err != nil || string(v) != want {
		t.Fatalf("get %q = %.40q, %v; want %.40q", key, v, err, want)
	}
}
