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
// stderr; 2 is a usage error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cellstore/cell/wire"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("cellprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "time limit of the probe")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: cellprobe [--timeout 3s] etcd [URL] | server [ADDR] | ready [URL] | idle\n")
	}
	if err := fs.Parse(args); err != nil {
		return 2
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
		err = probeEtcd(ctx, arg("http://127.0.0.1:2379"))
	case "server":
		err = probeServer(ctx, arg("127.0.0.1:7070"))
	case "ready":
		err = probeReady(ctx, arg("http://127.0.0.1:7072"))
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
func probeEtcd(ctx context.Context, base string) error {
	base, resp, err := httpGet(ctx, base, "/health")
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
func probeServer(ctx context.Context, addr string) error {
	c, err := wire.Dial(ctx, addr, nil)
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
func probeReady(ctx context.Context, base string) error {
	base, resp, err := httpGet(ctx, base, "/readyz")
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

// httpGet GETs path at base ("host:port" or a URL) and returns base as a
// URL with the response; the caller closes its body.
func httpGet(ctx context.Context, base, path string) (string, *http.Response, error) {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return base, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	return base, resp, err
}
