package client

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellstore/cell/locality"
)

// Metrics are the client's Prometheus metrics. Counters are read from the
// client's own atomic counters when Prometheus scrapes (the hot path pays
// nothing extra for them); only the latency histograms are updated per
// operation. Build one with NewMetrics; New does it when
// Config.Registerer is set.
//
// Metric names (all prefixed cell_client_):
//
//	op_duration_seconds{op,path}      histogram, 5µs..10s (see below)
//	ops_total{op,path}                operations by kind and path of the last hop
//	op_errors_total{op}               failed operations (not found excluded)
//	hops_total{method}                meganode hops, server or client side
//	one_sided_reads_total             one-sided reads
//	one_sided_read_bytes_total        bytes they fetched
//	retries_total{cause}              retries by cause
//	cache_{hits,misses,inserts,evictions,invalidations}_total{cache}
//	cache_entries{cache}, node_cache_bytes
//	selector_m                        running average meganode height
//	selector_{ls,lr,rtt,queue,service}_seconds{server}
//	selector_server_better{server}    the rule's verdict now (0/1)
//	selector_decisions_total{server,method,op}, selector_explorations_total{server,op}
//	selector_page_{server,client}_seconds{server}  range page cost per pair
//
// op is get, contains, put, delete or range; path is server or client (for
// reads, the method of the hop that reached the data; writes and ranges
// are server). The selector's decisions carry op: search for meganode
// hops, range for forward range pages (the page rule).
type Metrics struct {
	latency [numOpKinds][2]prometheus.Observer
	hist    *prometheus.HistogramVec
	reg     prometheus.Registerer
}

// latencyBuckets span 5µs (a shared-memory get) to 10s in 24 exponential
// steps.
var latencyBuckets = prometheus.ExponentialBucketsRange(5e-6, 10, 24)

// NewMetrics returns the client's metrics, to be registered with reg
// (nil: not registered) when a client is attached to them by New.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reg: reg}
	m.hist = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "cell", Subsystem: "client", Name: "op_duration_seconds",
		Help:    "Latency of client operations by kind and path (server or client side for the hop that reached the data).",
		Buckets: latencyBuckets,
	}, []string{"op", "path"})
	for k := range numOpKinds {
		for _, meth := range []locality.Method{locality.ServerSide, locality.ClientSide} {
			m.latency[k][meth] = m.hist.WithLabelValues(k.String(), meth.String())
		}
	}
	return m
}

// register registers the histograms and a collector reading c's counters.
func (m *Metrics) register(c *Client) error {
	if m == nil || m.reg == nil {
		return nil
	}
	if err := m.reg.Register(m.hist); err != nil {
		return err
	}
	if err := m.reg.Register(&collector{c: c}); err != nil {
		m.reg.Unregister(m.hist)
		return err
	}
	return nil
}

// unregister removes what register registered.
func (m *Metrics) unregister() {
	m.reg.Unregister(m.hist)
	m.reg.Unregister(&collector{})
}

// observe records one operation's latency.
func (m *Metrics) observe(k opKind, path locality.Method, d time.Duration) {
	if m == nil {
		return
	}
	m.latency[k][path&1].Observe(d.Seconds())
}

// collector exports the client's counters, cache sizes and selector state
// when scraped.
type collector struct{ c *Client }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("cell_client_"+name, help, labels, nil)
}

var (
	descOps         = desc("ops_total", "Operations by kind and path of the hop that reached the data.", "op", "path")
	descOpErrors    = desc("op_errors_total", "Failed operations by kind (not found excluded).", "op")
	descHops        = desc("hops_total", "Meganode hops by search method.", "method")
	descReads       = desc("one_sided_reads_total", "One-sided reads.")
	descReadBytes   = desc("one_sided_read_bytes_total", "Bytes fetched by one-sided reads.")
	descRetries     = desc("retries_total", "Retries by cause.", "cause")
	descCacheHits   = desc("cache_hits_total", "Cache hits.", "cache")
	descCacheMisses = desc("cache_misses_total", "Cache misses.", "cache")
	descCacheIns    = desc("cache_inserts_total", "Cache inserts.", "cache")
	descCacheEvict  = desc("cache_evictions_total", "Entries evicted to stay within the cache's bound.", "cache")
	descCacheInval  = desc("cache_invalidations_total", "Entries dropped as stale.", "cache")
	descCacheSize   = desc("cache_entries", "Entries in the cache.", "cache")
	descNodeBytes   = desc("node_cache_bytes", "Bytes held by the node cache.")
	descSelM        = desc("selector_m", "Running average meganode height m.")
	descSelLS       = desc("selector_ls_seconds", "Moving average server-side search latency l_s.", "server")
	descSelLR       = desc("selector_lr_seconds", "Moving average one-sided read latency l_r.", "server")
	descSelRTT      = desc("selector_rtt_seconds", "Lowest one-sided read latency seen (RTT).", "server")
	descSelQueue    = desc("selector_queue_seconds", "Moving average server-reported queueing time.", "server")
	descSelService  = desc("selector_service_seconds", "Moving average server-reported service time.", "server")
	descSelBetter   = desc("selector_server_better", "1 when the rule currently prefers server-side search.", "server")
	descSelDec      = desc("selector_decisions_total", "Selector decisions by method, for meganode hops (op search) and range pages (op range).", "server", "method", "op")
	descSelExplore  = desc("selector_explorations_total", "Decisions that were exploration.", "server", "op")
	descSelPageS    = desc("selector_page_server_seconds", "Moving average cost per pair of server-side range pages.", "server")
	descSelPageC    = desc("selector_page_client_seconds", "Moving average cost per pair of client-side range pages.", "server")
)

var allDescs = []*prometheus.Desc{
	descOps, descOpErrors, descHops, descReads, descReadBytes, descRetries,
	descCacheHits, descCacheMisses, descCacheIns, descCacheEvict, descCacheInval, descCacheSize, descNodeBytes,
	descSelM, descSelLS, descSelLR, descSelRTT, descSelQueue, descSelService, descSelBetter, descSelDec, descSelExplore,
	descSelPageS, descSelPageC,
}

// Describe implements prometheus.Collector.
func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (col *collector) Collect(ch chan<- prometheus.Metric) {
	c := col.c
	ct := &c.counters
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for k := range numOpKinds {
		for _, meth := range []locality.Method{locality.ServerSide, locality.ClientSide} {
			counter(descOps, ct.ops[k][meth].Load(), k.String(), meth.String())
		}
		counter(descOpErrors, ct.errors[k].Load(), k.String())
	}
	for _, meth := range []locality.Method{locality.ServerSide, locality.ClientSide} {
		counter(descHops, ct.hops[meth].Load(), meth.String())
	}
	counter(descReads, ct.reads.Load())
	counter(descReadBytes, ct.readBytes.Load())
	for r := range numCauses {
		counter(descRetries, ct.retries[r].Load(), r.String())
	}
	nodeEntries, nodeBytes := c.nodes.size()
	for _, cc := range []struct {
		name    string
		ct      *cacheCounters
		entries int
	}{{"node", &ct.node, nodeEntries}, {"path", &ct.path, c.paths.len()}} {
		counter(descCacheHits, cc.ct.hits.Load(), cc.name)
		counter(descCacheMisses, cc.ct.misses.Load(), cc.name)
		counter(descCacheIns, cc.ct.inserts.Load(), cc.name)
		counter(descCacheEvict, cc.ct.evictions.Load(), cc.name)
		counter(descCacheInval, cc.ct.invalidations.Load(), cc.name)
		gauge(descCacheSize, float64(cc.entries), cc.name)
	}
	gauge(descNodeBytes, float64(nodeBytes))
	snap := c.sel.Snapshot()
	gauge(descSelM, snap.M)
	for _, s := range snap.Servers {
		id := strconv.FormatUint(uint64(s.Server), 10)
		if name := c.serverName(uint64(s.Server)); name != "" {
			id = name
		}
		gauge(descSelLS, s.LS.Mean.Seconds(), id)
		gauge(descSelLR, s.LR.Mean.Seconds(), id)
		gauge(descSelRTT, s.RTT.Seconds(), id)
		gauge(descSelQueue, s.QueueTime.Seconds(), id)
		gauge(descSelService, s.ServiceTime.Seconds(), id)
		better := 0.0
		if s.ServerBetter {
			better = 1
		}
		gauge(descSelBetter, better, id)
		counter(descSelDec, s.Decisions.Server, id, locality.ServerSide.String(), "search")
		counter(descSelDec, s.Decisions.Client, id, locality.ClientSide.String(), "search")
		counter(descSelExplore, s.Decisions.Explore, id, "search")
		counter(descSelDec, s.PageDecisions.Server, id, locality.ServerSide.String(), "range")
		counter(descSelDec, s.PageDecisions.Client, id, locality.ClientSide.String(), "range")
		counter(descSelExplore, s.PageDecisions.Explore, id, "range")
		gauge(descSelPageS, s.PageServer.Mean.Seconds(), id)
		gauge(descSelPageC, s.PageClient.Mean.Seconds(), id)
	}
}
