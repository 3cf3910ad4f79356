// Command cellprobe is the health check of Cell's container images, which
// are built FROM scratch and have no shell or curl: docker runs it in the
// container and reads its exit status.
//
//	cellprobe etcd [URL]      etcd's /health says "true" (a leader, a quorum); default http://127.0.0.1:2379
//	cellprobe server [ADDR]   a cellserver answers a ping on its RPC address; default 127.0.0.1:7070
//	cellprobe ready [URL]     a cellserver's /readyz (metrics listener) answers 200: it started and serves every region it leads; default http://127.0.0.1:7072
//	cellprobe idle            waits for SIGTERM or SIGINT: the main process of a container kept for docker exec
//
// A probe gives up after --timeout (3s) and exits 1 with one line on
// stderr; 2 is a usage error. With --cacert (and --cert, --key where the
// other end requires a client certificate) the etcd probe speaks https and
// the server probe TLS, as in the compose cluster's TLS variant
// (docker-compose.tls.yml).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/wire"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("cellprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "time limit of the probe")
	var files tlsconf.Files
	fs.StringVar(&files.TrustedCAFile, "cacert", "", "CA file that verifies the probed end's certificate: probe over TLS")
	fs.StringVar(&files.CertFile, "cert", "", "client certificate file, for ends that require one")
	fs.StringVar(&files.KeyFile, "key", "", "key file of --cert")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: cellprobe [--timeout 3s] [--cacert F [--cert F --key F]] etcd [URL] | server [ADDR] | ready [URL] | idle\n")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var tc *tls.Config
	if files.Enabled() {
		src, err := tlsconf.NewSource(files)
		if err != nil {
			fmt.Fprintf(stderr, "cellprobe: %v\n", err)
			return 2
		}
		tc = src.ClientConfig("")
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return 2
	}
	arg := func(def string) string {
		if fs.NArg() == 2 {
			return fs.Arg(1)
		}
		return def
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	switch fs.Arg(0) {
	case "etcd":
		err = probeEtcd(ctx, arg("http://127.0.0.1:2379"), tc)
	case "server":
		err = probeServer(ctx, arg("127.0.0.1:7070"), tc)
	case "ready":
		err = probeReady(ctx, arg("http://127.0.0.1:7072"), tc)
	case "idle":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		return 0
	default:
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "cellprobe: %v\n", err)
		return 1
	}
	return 0
}

// probeEtcd asks etcd's /health endpoint, which answers "true" only when
// the member has a leader and a read through raft succeeds.
func probeEtcd(ctx context.Context, base string, tc *tls.Config) error {
	base, resp, err := httpGet(ctx, base, "/health", tc)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h); err != nil {
		return fmt.Errorf("etcd %s: %s: %w", base, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || h.Health != "true" {
		return fmt.Errorf("etcd %s: %s, health %q %s", base, resp.Status, h.Health, h.Reason)
	}
	return nil
}

// probeServer pings a cellserver. A server answers only once it serves:
// it binds its RPC listener after it has rebuilt its region.
func probeServer(ctx context.Context, addr string, tc *tls.Config) error {
	var o *wire.Options
	if tc != nil {
		o = &wire.Options{TLS: tc}
	}
	c, err := wire.Dial(ctx, addr, o)
	if err != nil {
		return err
	}
	defer c.Close()
	f, err := c.Call(ctx, wire.OpPing, []byte("cellprobe"))
	if err != nil {
		return fmt.Errorf("ping %s: %w", addr, err)
	}
	f.Release()
	return nil
}

// probeReady asks a cellserver's /readyz on its metrics listener: 200
// once it started and serves every region whose raft group it leads, 503
// and why not otherwise (starting, a region not taken over yet, a failed
// log).
func probeReady(ctx context.Context, base string, tc *tls.Config) error {
	base, resp, err := httpGet(ctx, base, "/readyz", tc)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cellserver %s: %s: %s", base, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// httpGet GETs path at base ("host:port" or a URL; https:// with tc) and
// returns base as a URL with the response; the caller closes its body.
func httpGet(ctx context.Context, base, path string, tc *tls.Config) (string, *http.Response, error) {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return base, nil, err
	}
	hc := http.DefaultClient
	if tc != nil && req.URL.Scheme == "https" {
		hc = &http.Client{Transport: &http.Transport{DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := tls.Dialer{Config: tlsconf.ForAddr(tc, addr)}
			return d.DialContext(ctx, network, addr)
		}}}
	}
	resp, err := hc.Do(req)
	return base, resp, err
}
