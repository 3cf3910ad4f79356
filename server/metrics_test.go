package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cellstore/cell/wire"
)

func TestMetricsEndpoint(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.MetricsListen = "127.0.0.1:0" })
	c := dial(t, s)
	put(t, c, "a", "1")
	get(t, c, "a")
	if _, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Key: []byte("a")}, &wire.SearchReply{}); err != nil {
		t.Fatal(err)
	}
	body := httpGet(t, "http://"+s.MetricsAddr()+"/metrics")
	for _, want := range []string{
		`cell_server_ops_total{op="put",status="OK"} 1`,
		`cell_server_ops_total{op="get",status="OK"} 1`,
		`cell_server_search_hops_total{result="leaf"} 1`,
		`cell_server_queue_seconds_bucket{op="search",le="1e-06"}`,
		`cell_server_service_seconds_count{op="put"} 1`,
		`cell_server_queue_depth 0`,
		`cell_server_workers 1`,
		`cell_server_worker_busy_seconds_total`,
		`cell_server_worker_utilization`,
		`cell_server_onesided_reads_total{provider="tcp"} 0`,
		`cell_server_tree_retries_total{cause="torn"} 0`,
		`cell_server_meganode_fill_ratio{level="0",meganode="` + s.Root().String() + `"}`,
		`cell_server_region_bytes{backing="file",region="1"} 3.3554432e+07`,
		`cell_server_applied_total{kind="put",result="OK"} 1`,
		fmt.Sprintf("cell_server_apply_index %d", s.reps.own.sm.Applied()),
		`cell_server_connections 1`,
		`cell_raft_state{region="1",state="leader"} 1`,
		`cell_raft_state{region="1",state="follower"} 0`,
		`cell_wal_failed 0`,
		`cell_server_proposal_seconds_count`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if p := httpGet(t, "http://"+s.MetricsAddr()+"/debug/pprof/"); !strings.Contains(p, "goroutine") {
		t.Errorf("pprof index: %.200s", p)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// Metrics registered twice on one registry is an error, not a panic.
func TestNewMetricsTwice(t *testing.T) {
	s, _ := newTestServer(t)
	if _, err := NewMetrics(s.opts.Registry); err == nil {
		t.Fatal("second NewMetrics on one registry succeeded")
	}
}
