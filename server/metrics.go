package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

// Metrics are the server's Prometheus metrics. NewMetrics registers them;
// there are no global metrics. Gauges and counters whose source is the
// running server (queue, workers, one-sided reads, trees, region) are read
// at scrape time from the server attached by Start.
//
// Latency histograms (cell_server_queue_seconds, cell_server_service_seconds)
// have 23 buckets doubling from 1 µs to about 4.2 s: a server-side search
// hop takes single microseconds, a large range reply milliseconds, and a
// queue under overload seconds.
type Metrics struct {
	ops       *prometheus.CounterVec   // op, status
	searches  *prometheus.CounterVec   // result: leaf, next
	queue     *prometheus.HistogramVec // op
	service   *prometheus.HistogramVec // op
	conns     prometheus.Gauge
	accepted  prometheus.Counter
	closed    *prometheus.CounterVec // reason
	malformed *prometheus.CounterVec // kind
	refusals  *prometheus.CounterVec // reason (limits.go)
	applies   *prometheus.CounterVec // kind, result
	splits    *prometheus.CounterVec // result: done, aborted, failed
	splitTime prometheus.Histogram
	waits     *prometheus.CounterVec // cause: frozen, full

	// The coordinator (coordinator.go).
	proposals          prometheus.Histogram
	snapshotBytes      prometheus.Gauge
	snapshotPause      prometheus.Histogram
	snapshotSaved      prometheus.Gauge
	coordinator        prometheus.Gauge
	regionsUnavailable prometheus.Gauge
	takeovers          prometheus.Counter
	replicasRemoved    prometheus.Counter
	leaderTransfers    prometheus.Counter
	leaseRenewals      prometheus.Counter
	leaseLapses        prometheus.Counter

	// Resolved children of the vectors on the request path, so that a
	// request does not hash its labels: by op label index (opIndex), and
	// for ops_total by status, filled on first use.
	queueByOp   []prometheus.Observer
	serviceByOp []prometheus.Observer
	opsByStatus [][statusCache]atomic.Pointer[prometheus.Counter]
	searchLeaf  prometheus.Counter
	searchNext  prometheus.Counter

	// srcMu guards src: after detach returns no scrape reads the server
	// (whose region may then be unmapped).
	srcMu sync.RWMutex
	src   *Server
}

// LatencyBuckets are the buckets of the latency histograms: 1 µs to about
// 4.2 s, doubling.
var LatencyBuckets = prometheus.ExponentialBuckets(1e-6, 2, 23)

// NewMetrics creates the server's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_ops_total",
			Help: "Server-side requests answered, by op (ping, search, get, contains, range, put, delete, metadata, node_dump) and reply status.",
		}, []string{"op", "status"}),
		searches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_search_hops_total",
			Help: "Server-side search hops by how they ended: at a leaf meganode's result, or with the next meganode to visit.",
		}, []string{"result"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cell_server_queue_seconds",
			Help:    "Time requests waited for a worker, by op (buckets 1µs..4.2s).",
			Buckets: LatencyBuckets,
		}, []string{"op"}),
		service: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cell_server_service_seconds",
			Help:    "Time a worker spent on a request, by op (buckets 1µs..4.2s).",
			Buckets: LatencyBuckets,
		}, []string{"op"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cell_server_connections",
			Help: "Open client connections.",
		}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cell_server_connections_accepted_total",
			Help: "Client connections accepted.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_connections_closed_total",
			Help: "Client connections closed, by reason (eof, corrupt, bad_version, shutdown, error, idle_timeout, frame_timeout).",
		}, []string{"reason"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_malformed_frames_total",
			Help: "Frames rejected before reaching a worker, by kind (too_large, unknown_op, bad_version, corrupt, not_a_request).",
		}, []string{"kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_refusals_total",
			Help: "Times a client met a resource limit, by reason: max_connections, max_connections_per_host (connection refused), idle_timeout, frame_timeout (connection closed), max_inflight (reading a connection paused), max_range_rows, max_range_bytes (range reply cut short, the client pages on).",
		}, []string{"reason"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_applied_total",
			Help: "Write records applied to the region, by kind (put, delete, child, split_<phase>; put_duplicate, delete_duplicate: applied before, answered as then; put_unverifiable, delete_unverifiable: a retry the region could not vouch for) and result (the status the write was answered with).",
		}, []string{"kind", "result"}),
		splits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_meganode_splits_total",
			Help: "Meganode splits by result: done, aborted (undone before the link), failed (linked, then stopped: readers are right, the parent lacks the separator).",
		}, []string{"result"}),
		splitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cell_server_meganode_split_seconds",
			Help:    "Time from the start of a meganode split to its end record (buckets 1µs..4.2s).",
			Buckets: LatencyBuckets,
		}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cell_server_split_waits_total",
			Help: "Writes that waited for a meganode split, by cause: frozen (the key was in a range being moved), full (the meganode had to split first).",
		}, []string{"cause"}),
		snapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cell_server_snapshot_bytes",
			Help: "Size of the region's last raft snapshot (state and image).",
		}),
		proposals: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cell_server_proposal_seconds",
			Help:    "Time from proposing a record to its outcome: the log's append and sync, commit and apply (buckets 1µs..4.2s).",
			Buckets: LatencyBuckets,
		}),
		snapshotPause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cell_server_snapshot_pause_seconds",
			Help:    "Time a snapshot held the apply path: the replicated state encoded and the region's copy-on-write capture started (buckets 1µs..4.2s).",
			Buckets: LatencyBuckets,
		}),
		snapshotSaved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cell_server_snapshot_saved_bytes",
			Help: "Bytes of region pages that writes saved (copy-on-write) while the last snapshot was written.",
		}),
		coordinator: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cell_coordinator",
			Help: "1 while this server is the cluster's elected coordinator, 0 otherwise.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cell_server_region_takeovers_total",
			Help: "Regions this server took over after their host went down (failover).",
		}),
		replicasRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cell_server_replicas_removed_total",
			Help: "Replicas this server, leading their regions, removed from their groups (moved, dead or draining servers).",
		}),
		leaderTransfers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cell_server_leader_transfers_total",
			Help: "Leaderships this server handed to another replica (cellctl transfer-leader, balancing, draining).",
		}),
		leaseRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cell_server_lease_renewals_total",
			Help: "Read lease renewals of the regions this server serves (a raft VerifyLeader round each, unless it is the group's only voter).",
		}),
		leaseLapses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cell_server_lease_lapses_total",
			Help: "Renewals that failed while a lease was held: the region stopped answering until its leadership was confirmed or moved.",
		}),
		regionsUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cell_regions_unavailable",
			Help: "Regions in the region table whose host has not been a live member for a second, as the coordinator sees them (0 on the other servers).",
		}),
	}
	for _, c := range []prometheus.Collector{m.ops, m.searches, m.queue, m.service, m.conns, m.accepted, m.closed, m.malformed, m.refusals, m.applies, m.splits, m.splitTime, m.waits,
		m.proposals, m.snapshotBytes, m.snapshotPause, m.snapshotSaved, m.coordinator, m.regionsUnavailable, m.takeovers, m.replicasRemoved, m.leaderTransfers, m.leaseRenewals, m.leaseLapses, (*stateCollector)(m)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, name := range opNames {
		m.queueByOp = append(m.queueByOp, m.queue.WithLabelValues(name))
		m.serviceByOp = append(m.serviceByOp, m.service.WithLabelValues(name))
	}
	m.opsByStatus = make([][statusCache]atomic.Pointer[prometheus.Counter], len(opNames))
	for _, r := range refusalReasons {
		m.refusals.WithLabelValues(r)
	}
	m.searchLeaf = m.searches.WithLabelValues("leaf")
	m.searchNext = m.searches.WithLabelValues("next")
	return m, nil
}

// statusCache is the number of statuses whose counters are cached.
const statusCache = 32

// opLabels are the ops counted under their own label value; every other
// op is "other". One table, so that an op and its name cannot drift
// apart (a second list of names once missed an op and panicked).
var opLabels = []struct {
	op   wire.Op
	name string
}{
	{wire.OpPing, "ping"}, {wire.OpMetadata, "metadata"}, {wire.OpSearch, "search"}, {wire.OpGet, "get"},
	{wire.OpContains, "contains"}, {wire.OpRange, "range"}, {wire.OpNodeDump, "node_dump"}, {wire.OpPut, "put"},
	{wire.OpDelete, "delete"}, {wire.OpCondWrite, "cond_write"}, {wire.OpTxn, "txn"}, {wire.OpCheck, "check"},
	{wire.OpReplicaHash, "replica_hash"}, {wire.OpMoveReplica, "move_replica"}, {wire.OpTransferLeader, "transfer_leader"},
}

// opNames are the op label values, "other" first; opIndex maps an op code
// to its name's index (0, "other", for ops without a name).
var (
	opNames = func() []string {
		names := []string{"other"}
		for _, l := range opLabels {
			names = append(names, l.name)
		}
		return names
	}()
	opIndex = func() [256]uint8 {
		var ix [256]uint8
		for i, l := range opLabels {
			ix[l.op] = uint8(i + 1)
		}
		return ix
	}()
)

// observe counts one answered request.
func (m *Metrics) observe(op wire.Op, st wire.Status, queue, service time.Duration) {
	i := opIndex[op]
	m.queueByOp[i].Observe(queue.Seconds())
	m.serviceByOp[i].Observe(service.Seconds())
	if int(st) >= statusCache {
		m.ops.WithLabelValues(opNames[i], st.String()).Inc()
		return
	}
	slot := &m.opsByStatus[i][st]
	c := slot.Load()
	if c == nil {
		cc := m.ops.WithLabelValues(opNames[i], st.String())
		c = &cc
		slot.Store(c)
	}
	(*c).Inc()
}

func (m *Metrics) attach(s *Server) {
	m.srcMu.Lock()
	m.src = s
	m.srcMu.Unlock()
}

func (m *Metrics) detach() {
	m.srcMu.Lock()
	m.src = nil
	m.srcMu.Unlock()
}

// stateCollector exports what the running server knows, read at scrape
// time.
type stateCollector Metrics

var (
	descQueueDepth      = prometheus.NewDesc("cell_server_queue_depth", "Requests waiting for a worker now.", nil, nil)
	descQueueCap        = prometheus.NewDesc("cell_server_queue_capacity", "Most requests that may wait for a worker (beyond: Overloaded).", nil, nil)
	descWorkers         = prometheus.NewDesc("cell_server_workers", "Worker goroutines doing tree work (--cores).", nil, nil)
	descBusy            = prometheus.NewDesc("cell_server_worker_busy_seconds_total", "Time workers spent on requests, summed over workers; rate()/cell_server_workers is the utilisation.", nil, nil)
	descUtil            = prometheus.NewDesc("cell_server_worker_utilization", "Fraction of the workers' time spent on requests over the last second.", nil, nil)
	descApplied         = prometheus.NewDesc("cell_server_apply_index", "Index of the last log entry the region's raft group applied.", nil, nil)
	descOneSided        = prometheus.NewDesc("cell_server_onesided_reads_total", "One-sided read requests served with data by the tcp responder.", []string{"provider"}, nil)
	descOneSidedSegs    = prometheus.NewDesc("cell_server_onesided_segments_total", "Ranges copied by one-sided reads.", []string{"provider"}, nil)
	descOneSidedB       = prometheus.NewDesc("cell_server_onesided_bytes_total", "Bytes copied by one-sided reads.", []string{"provider"}, nil)
	descOneSidedRej     = prometheus.NewDesc("cell_server_onesided_rejected_total", "One-sided read requests refused, by cause.", []string{"provider", "cause"}, nil)
	descOneSidedConn    = prometheus.NewDesc("cell_server_onesided_connections", "Open connections to the tcp responder.", []string{"provider"}, nil)
	descOneSidedRefused = prometheus.NewDesc("cell_server_onesided_refused_connections_total", "Connections to the tcp responder closed at once (max_connections, max_connections_per_host) or after a failed TLS handshake (tls_handshake).", []string{"provider", "reason"}, nil)
	descRetries         = prometheus.NewDesc("cell_server_tree_retries_total", "Lock-free reader retries in the region's trees, by cause (torn, invalid, out_of_range, crc, restart).", []string{"cause"}, nil)
	descFill            = prometheus.NewDesc("cell_server_meganode_fill_ratio", "Fraction of a meganode's nodes in use.", []string{"meganode", "level"}, nil)
	descHeight          = prometheus.NewDesc("cell_server_meganode_height", "Local tree height of a meganode, in nodes.", []string{"meganode", "level"}, nil)
	descRegion          = prometheus.NewDesc("cell_server_region_bytes", "Size of the server's region, with its backing (hugetlbfs, shm, file).", []string{"region", "backing"}, nil)
	descExtents         = prometheus.NewDesc("cell_server_extent_bytes", "Extent area of the region, by state (in_use, capacity).", []string{"region", "state"}, nil)
	descEpoch           = prometheus.NewDesc("cell_server_region_epoch", "Epoch of the served region.", []string{"region"}, nil)
	descRaftState       = prometheus.NewDesc("cell_raft_state", "1 for the raft state the region's group is in on this server (follower, candidate, leader, shutdown), 0 for the others.", []string{"region", "state"}, nil)
	descRaftIndex       = prometheus.NewDesc("cell_raft_index", "The region group's log positions on this server: last (in the log), commit, applied.", []string{"region", "position"}, nil)
	descRaftTerm        = prometheus.NewDesc("cell_raft_term", "The region group's current term on this server.", []string{"region"}, nil)
	descWALWrites       = prometheus.NewDesc("cell_wal_writes_total", "Writes the log acknowledged (all regions); cell_wal_writes_total/cell_wal_commits_total is the mean group commit.", nil, nil)
	descWALCommits      = prometheus.NewDesc("cell_wal_commits_total", "Synced commits of the log (one per group of concurrent writes).", nil, nil)
	descWALCommitT      = prometheus.NewDesc("cell_wal_commit_seconds_total", "Time spent in the log's synced commits (write and fsync).", nil, nil)
	descWALSyncs        = prometheus.NewDesc("cell_wal_syncs_total", "fsyncs of the log's files.", nil, nil)
	descWALSyncT        = prometheus.NewDesc("cell_wal_sync_seconds_total", "Time spent in the log's fsyncs.", nil, nil)
	descWALFailed       = prometheus.NewDesc("cell_wal_failed", "1 once the log latched a failed write or sync (the server stops).", nil, nil)
	descWALFlushes      = prometheus.NewDesc("cell_wal_flushes_total", "Memtable flushes of the log's pebble store.", nil, nil)
	descWALFlushT       = prometheus.NewDesc("cell_wal_flush_seconds_total", "Time spent in the log's memtable flushes.", nil, nil)
	descWALFlushB       = prometheus.NewDesc("cell_wal_flush_bytes_total", "sstable bytes the log's memtable flushes wrote.", nil, nil)
	descWALCompactions  = prometheus.NewDesc("cell_wal_compactions_total", "Compactions of the log's pebble store (background work on the server's CPUs and disk).", nil, nil)
	descWALCompactT     = prometheus.NewDesc("cell_wal_compaction_seconds_total", "Time spent in the log's compactions.", nil, nil)
	descWALCompactB     = prometheus.NewDesc("cell_wal_compaction_bytes_total", "sstable bytes the log's compactions read and wrote.", []string{"direction"}, nil)
	descWALExcises      = prometheus.NewDesc("cell_wal_excises_total", "Log truncations behind a snapshot done by pebble's Excise (no range deletion left to compact).", nil, nil)
	descWALExciseT      = prometheus.NewDesc("cell_wal_excise_seconds_total", "Time spent in those truncations.", nil, nil)

	stateDescs = []*prometheus.Desc{descQueueDepth, descQueueCap, descWorkers, descBusy, descUtil, descApplied, descOneSided, descOneSidedSegs,
		descOneSidedB, descOneSidedRej, descOneSidedConn, descOneSidedRefused, descRetries, descFill, descHeight, descRegion, descExtents, descEpoch,
		descRaftState, descRaftIndex, descRaftTerm, descWALWrites, descWALCommits, descWALCommitT, descWALSyncs, descWALSyncT, descWALFailed,
		descWALFlushes, descWALFlushT, descWALFlushB, descWALCompactions, descWALCompactT, descWALCompactB,
		descWALExcises, descWALExciseT}
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stateDescs {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.srcMu.RLock()
	defer c.srcMu.RUnlock()
	s := c.src
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descQueueDepth, float64(len(s.rpc.queue)))
	gauge(descQueueCap, float64(cap(s.rpc.queue)))
	gauge(descWorkers, float64(s.opts.Cores))
	counter(descBusy, time.Duration(s.rpc.busyNanos.Load()).Seconds())
	gauge(descUtil, math.Float64frombits(s.rpc.utilization.Load()))
	counter(descApplied, float64(s.reps.own.sm.Applied()))

	rs := s.responder.Stats()
	counter(descOneSided, float64(rs.Reads), "tcp")
	counter(descOneSidedSegs, float64(rs.Segments), "tcp")
	counter(descOneSidedB, float64(rs.Bytes), "tcp")
	gauge(descOneSidedConn, float64(rs.OpenConns), "tcp")
	for _, r := range []struct {
		cause string
		n     uint64
	}{{"bad_key", rs.BadKey}, {"revoked", rs.Revoked}, {"out_of_bounds", rs.OutOfBounds}, {"misaligned", rs.Misaligned}, {"too_large", rs.TooLarge}, {"too_many_segments", rs.TooManySegments}} {
		counter(descOneSidedRej, float64(r.n), "tcp", r.cause)
	}
	for _, r := range []struct {
		reason string
		n      int64
	}{{refuseMaxConns, rs.RefusedMaxConns}, {refuseMaxPerHost, rs.RefusedMaxConnsPerHost}, {refuseHandshake, rs.TLSRefused}} {
		counter(descOneSidedRefused, float64(r.n), "tcp", r.reason)
	}

	var torn, invalid, oor, crc, restarts uint64
	for lm := range s.reps.own.sm.Meganodes() {
		st := &lm.T.Stats
		torn += st.Torn.Load()
		invalid += st.Invalid.Load()
		oor += st.OutOfRange.Load()
		crc += st.CRC.Load()
		restarts += st.Restarts.Load()
		h, err := lm.T.Header()
		if err != nil {
			continue
		}
		name, level := lm.Ptr().String(), levelLabel(h)
		gauge(descFill, float64(h.InUse)/float64(max(h.Capacity, 1)), name, level)
		gauge(descHeight, float64(h.Height), name, level)
	}
	counter(descRetries, float64(torn), "torn")
	counter(descRetries, float64(invalid), "invalid")
	counter(descRetries, float64(oor), "out_of_range")
	counter(descRetries, float64(crc), "crc")
	counter(descRetries, float64(restarts), "restart")

	if s.wal != nil {
		wm := s.wal.Metrics()
		counter(descWALWrites, float64(wm.Writes))
		counter(descWALCommits, float64(wm.Commits))
		counter(descWALCommitT, wm.CommitTime.Seconds())
		counter(descWALSyncs, float64(wm.WALSyncs))
		counter(descWALSyncT, wm.WALSyncTime.Seconds())
		counter(descWALFlushes, float64(wm.Flushes))
		counter(descWALFlushT, wm.FlushTime.Seconds())
		counter(descWALFlushB, float64(wm.FlushBytes))
		counter(descWALCompactions, float64(wm.Compactions))
		counter(descWALCompactT, wm.CompactionTime.Seconds())
		counter(descWALCompactB, float64(wm.CompactionBytesRead), "read")
		counter(descWALCompactB, float64(wm.CompactionBytesWritten), "written")
		counter(descWALExcises, float64(wm.Excises))
		counter(descWALExciseT, wm.ExciseTime.Seconds())
		failed := 0.0
		if s.wal.Err() != nil {
			failed = 1
		}
		gauge(descWALFailed, failed)
	}

	// The region and its group, read without the apply lock (a restore
	// replaces the region under it: Region loads the one of the moment).
	if s.reps.own.sm == nil {
		return // not made yet
	}
	region := s.reps.own.sm.Region()
	rid := formatUint(uint64(region.ID()))
	gauge(descRegion, float64(region.Layout().Size), rid, region.Backing().String())
	es := region.Extents().Stats()
	gauge(descExtents, float64(es.InUse), rid, "in_use")
	gauge(descExtents, float64(es.Capacity), rid, "capacity")
	gauge(descEpoch, float64(s.reps.own.shown.epoch.Load()), rid)
	if r := s.reps.own.raftGroup(); r != nil {
		st := r.State()
		for _, name := range []string{"follower", "candidate", "leader", "shutdown"} {
			v := 0.0
			if strings.EqualFold(st.String(), name) {
				v = 1
			}
			gauge(descRaftState, v, rid, name)
		}
		gauge(descRaftIndex, float64(r.LastIndex()), rid, "last")
		gauge(descRaftIndex, float64(r.CommitIndex()), rid, "commit")
		gauge(descRaftIndex, float64(r.AppliedIndex()), rid, "applied")
		if term, err := strconv.ParseUint(r.Stats()["term"], 10, 64); err == nil {
			gauge(descRaftTerm, float64(term), rid)
		}
	}
}

func levelLabel(h blink.Header) string { return formatUint(uint64(h.Level)) }

func formatUint(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// newMetricsServer returns the HTTP server of /metrics, /healthz, /readyz
// and /debug/pprof/.
func (s *Server) newMetricsServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { answerProbe(w, s.unhealthy()) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { answerProbe(w, s.notReady()) })
	mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{Registry: s.opts.Registry}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}

// serveMetrics serves the metrics listener until Close.
func (s *Server) serveMetrics() {
	if err := s.httpSrv.Serve(s.metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("server: metrics listener", slog.Any("err", err))
	}
}

// answerProbe answers a health or readiness probe: 200 "ok", or 503 and
// why not.
func answerProbe(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if why == "" {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, why+"\n")
}

// unhealthy says why the server is not healthy (/healthz), "" when it is:
// a failure that stops it was reported (failed), or its log latched a
// failed write or sync (it acknowledges no write until it restarts).
func (s *Server) unhealthy() string {
	if p := s.failure.Load(); p != nil {
		return "failed: " + (*p).Error()
	}
	if s.wal != nil {
		if err := s.wal.Err(); err != nil {
			return "log failed: " + err.Error()
		}
	}
	return ""
}

// notReady says why the server is not ready (/readyz), "" when it is:
// healthy, started, and serving every region whose raft group it leads
// (a region it was elected for is taken over: until then its requests
// are refused).
func (s *Server) notReady() string {
	if why := s.unhealthy(); why != "" {
		return why
	}
	s.mu.Lock()
	st := s.mu.state
	s.mu.Unlock()
	switch st {
	case stateNew, stateStarting:
		return "starting"
	case stateClosed:
		return "stopping"
	}
	for _, rep := range append([]*replica{s.reps.own}, s.reps.followerList()...) {
		if r := rep.raftGroup(); r != nil && r.State() == raft.Leader && s.reps.servedReplica(rep.regionID) != rep {
			return fmt.Sprintf("region %d: this server leads its raft group and does not serve it yet", rep.regionID)
		}
	}
	return ""
}
