package client

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellstore/cell/locality"
)

// family returns the gathered metric family name, or nil.
func family(t *testing.T, reg prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// sample returns the value of the sample of family name with the given
// labels (counter, gauge, or a histogram's count).
func sample(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mf := family(t, reg, name)
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics: with a Registerer the client exports its counters,
// latency histograms, cache and selector state, and unregisters them on
// Close.
func TestMetrics(t *testing.T) {
	rc := startReal(t, 1, nil)
	reg := prometheus.NewRegistry()
	cfg := realConfig(t, rc)
	cfg.Registerer = reg
	cfg.Mode = locality.Mode{Kind: locality.ClientOnly}
	c := mustClient(t, cfg)
	mustPut(t, c, 50)
	getAll(t, c, 50)
	for _, tt := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"cell_client_ops_total", map[string]string{"op": "get", "path": "client"}, 50},
		{"cell_client_ops_total", map[string]string{"op": "put", "path": "server"}, 50},
		{"cell_client_op_duration_seconds", map[string]string{"op": "get", "path": "client"}, 50},
		{"cell_client_hops_total", map[string]string{"method": "client"}, 50},
		{"cell_client_one_sided_reads_total", nil, 50},
		{"cell_client_one_sided_read_bytes_total", nil, 50 * 512},
		{"cell_client_cache_hits_total", map[string]string{"cache": "path"}, 1},
		{"cell_client_cache_entries", map[string]string{"cache": "path"}, 1},
		{"cell_client_selector_m", nil, 1},
		{"cell_client_selector_decisions_total", map[string]string{"method": "client", "op": "search"}, 50},
		{"cell_client_selector_lr_seconds", nil, 1e-9},
		{"cell_client_retries_total", map[string]string{"cause": "torn"}, 0},
	} {
		v, ok := sample(t, reg, tt.name, tt.labels)
		if !ok || v < tt.min {
			t.Errorf("%s%v = %v (present %v), want >= %v", tt.name, tt.labels, v, ok, tt.min)
		}
	}
	// A second client on the same registerer fails, and Close
	// unregisters.
	if _, err := New(testCtx(t, 5e9), cfg); err == nil {
		t.Error("two clients registered the same metrics")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mustClient(t, cfg)
	// Clients told apart by a label share a registry.
	reg2 := prometheus.NewRegistry()
	for _, id := range []string{"1", "2"} {
		cfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"client": id}, reg2)
		mustClient(t, cfg)
	}
	if v, ok := sample(t, reg2, "cell_client_selector_m", map[string]string{"client": "2"}); !ok || v < 1 {
		t.Errorf("labelled client's m = %v, %v", v, ok)
	}
}
