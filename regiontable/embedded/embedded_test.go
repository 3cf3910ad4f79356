package embedded

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cellstore/cell/internal/tlsconf"
)

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]Options{
		"no dir":      {},
		"bad client":  {Dir: "d", ClientAddr: "nonsense"},
		"bad peer":    {Dir: "d", PeerAddr: "x"},
		"bad level":   {Dir: "d", LogLevel: "chatty"},
		"bad timeout": {Dir: "d", StartTimeout: -1},
		"bad cluster": {Dir: "d", Name: "a", InitialCluster: "a=http://127.0.0.1:2380,b"},
		"not member":  {Dir: "d", Name: "c", InitialCluster: "a=http://127.0.0.1:2380,b=http://127.0.0.1:2390"},
		"two urls":    {Dir: "d", Name: "a", InitialCluster: "a=http://127.0.0.1:2380,a=http://127.0.0.1:2381"},
		"https":       {Dir: "d", Name: "a", InitialCluster: "a=https://127.0.0.1:2380"},
		"http with peer TLS": {Dir: "d", Name: "a", InitialCluster: "a=http://127.0.0.1:2380",
			PeerTLS: tlsconf.Files{CertFile: "c", KeyFile: "k"}},
		"client TLS without key":  {Dir: "d", ClientTLS: tlsconf.Files{CertFile: "c"}},
		"client TLS without cert": {Dir: "d", ClientTLS: tlsconf.Files{TrustedCAFile: "ca", ClientCertAuth: true}},
		"peer auth without CA":    {Dir: "d", PeerTLS: tlsconf.Files{CertFile: "c", KeyFile: "k", ClientCertAuth: true}},
	} {
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: %v", name, err)
		}
	}
	tlsFiles := tlsconf.Files{CertFile: "c", KeyFile: "k", TrustedCAFile: "ca", ClientCertAuth: true}
	ok := Options{Dir: "d", Name: "a", InitialCluster: "a=https://127.0.0.1:2380", PeerTLS: tlsFiles, ClientTLS: tlsFiles}
	ok.EnsureDefaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("https peers with peer TLS: %v", err)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lockedBuffer is a log sink safe for etcd's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Start serves on the given loopback ports; Close stops etcd without the
// errors it logs about its own listeners closing; a second Close is a
// no-op; the port in use fails a second Start.
func TestStartClose(t *testing.T) {
	var logs lockedBuffer
	opts := Options{Dir: t.TempDir(), ClientAddr: freeAddr(t), PeerAddr: freeAddr(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	e, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	if eps := e.Endpoints(); len(eps) != 1 || eps[0] != "http://"+opts.ClientAddr {
		t.Fatalf("endpoints %v", eps)
	}
	opts2 := opts
	opts2.Dir, opts2.Logger = t.TempDir(), slog.New(slog.DiscardHandler)
	if _, err := Start(opts2); err == nil {
		t.Fatal("second etcd on the same ports started")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("errors logged by a clean start and stop:\n%s", logs.String())
	}
}

func TestSlogCore(t *testing.T) {
	var buf lockedBuffer
	quiet := new(atomic.Bool)
	lg := newZapLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), zapcore.WarnLevel, quiet)
	lg.Info("dropped below the level")
	lg.With(zap.String("member", "m1")).Warn("kept", zap.Int("b", 2), zap.Int("a", 1))
	quiet.Store(true)
	lg.Error("dropped when quiet")
	out := buf.String()
	if strings.Contains(out, "dropped") || !strings.Contains(out, `level=WARN msg=kept component=etcd a=1 b=2 member=m1`) {
		t.Fatalf("log output %q", out)
	}
}

// Three members started with the same InitialCluster form one cluster:
// each is ready once a majority runs and counts three members; so they do
// with TLS on their peer ports (peer certificates required).
func TestInitialCluster(t *testing.T) {
	t.Run("http", func(t *testing.T) { testInitialCluster(t, tlsconf.Files{}) })
	t.Run("https", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "certs")
		if err := tlsconf.WriteDevCerts(dir, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
		testInitialCluster(t, tlsconf.Files{CertFile: filepath.Join(dir, tlsconf.ServerCertFile), KeyFile: filepath.Join(dir, tlsconf.ServerKeyFile),
			TrustedCAFile: filepath.Join(dir, tlsconf.CAFile), ClientCertAuth: true})
	})
}

func testInitialCluster(t *testing.T, peerTLS tlsconf.Files) {
	names := []string{"m1", "m2", "m3"}
	opts := make([]Options, len(names))
	var cluster []string
	scheme := "http"
	if peerTLS.Enabled() {
		scheme = "https"
	}
	for i, n := range names {
		opts[i] = Options{Dir: t.TempDir(), Name: n, ClientAddr: freeAddr(t), PeerAddr: freeAddr(t), PeerTLS: peerTLS, Logger: slog.New(slog.DiscardHandler)}
		cluster = append(cluster, n+"="+scheme+"://"+opts[i].PeerAddr)
	}
	var wg sync.WaitGroup
	es := make([]*Etcd, len(names))
	errs := make([]error, len(names))
	for i := range opts {
		opts[i].InitialCluster = strings.Join(cluster, ",")
		wg.Add(1)
		go func() {
			defer wg.Done()
			es[i], errs[i] = Start(opts[i])
		}()
	}
	wg.Wait()
	for i, e := range es {
		if errs[i] != nil {
			t.Fatalf("member %s: %v", names[i], errs[i])
		}
		defer e.Close()
	}
	for i, e := range es {
		if n := len(e.e.Server.Cluster().Members()); n != 3 {
			t.Errorf("member %s sees %d members", names[i], n)
		}
		if id, first := e.e.Server.Cluster().ID(), es[0].e.Server.Cluster().ID(); id != first {
			t.Errorf("member %s is in cluster %v, m1 in %v", names[i], id, first)
		}
	}
}

// An etcd stopped cleanly can start again at once on the same ports and
// data directory, three times, while a client keeps a watch and a lease
// keep-alive open on it (as the servers of a cluster do): Close returns
// only once its listeners are closed, and quickly (it used to drain the
// client's streams for ~7 s, and a restart right after the server's
// "stopped cleanly" failed with "address already in use").
func TestRestartSamePorts(t *testing.T) {
	opts := Options{Dir: t.TempDir(), ClientAddr: freeAddr(t), PeerAddr: freeAddr(t), Logger: slog.New(slog.DiscardHandler), StartTimeout: 20 * time.Second}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + opts.ClientAddr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range 3 {
		e, err := Start(opts)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		wc := cli.Watch(clientv3.WithRequireLeader(ctx), "/k")
		if _, err := cli.Put(ctx, "/k", "v"); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		<-wc
		l, err := cli.Grant(ctx, 5)
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		if _, err := cli.KeepAlive(ctx, l.ID); err != nil {
			t.Fatalf("keepalive %d: %v", i, err)
		}
		began := time.Now()
		if err := e.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
		took := time.Since(began)
		cancel()
		for _, a := range []string{opts.ClientAddr, opts.PeerAddr} {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("after close %d: %s still bound: %v", i, a, err)
			}
			_ = ln.Close()
		}
		if took > 3*time.Second {
			t.Fatalf("close %d took %v with a client's streams open", i, took)
		}
	}
}
