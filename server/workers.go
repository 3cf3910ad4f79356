package server

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// rpcServer serves the wire protocol: it accepts connections (conn.go),
// whose readers queue requests for exactly Options.Cores workers (the
// paper's server cores), which run the handlers (handlers.go, scan.go,
// checkop.go) and answer; a write leaves its worker once proposed and
// settles, requeues or parks later (write.go, park.go). It keeps the
// workers' accounting, which the selector hints report. It reaches
// replicas through the server's registry.
type rpcServer struct {
	s     *Server
	queue chan job
	// parking is the writes waiting for a split (park.go).
	parking parking
	workers sync.WaitGroup
	conns   sync.WaitGroup

	// Worker accounting.
	busyNanos   atomic.Int64
	queueEWMA   atomic.Int64
	serviceEWMA atomic.Int64
	utilization atomic.Uint64 // math.Float64bits of the last second's busy fraction
}

// job is a request read off a connection, waiting for a worker.
type job struct {
	c       *conn
	f       wire.Frame // owned by the job until the reply is written
	arrived time.Time  // when the reader had read it

	// A write that met a meganode split (write.go, park.go): the end of
	// its wait, how many splits it asked for, and how many times its key
	// had moved to another meganode.
	waitUntil time.Time
	fullWaits uint8
	moves     uint8
	// The full meganode it last waited for, and how many of its splits
	// had run then (localMeganode.Splits.Runs).
	full     *rsm.Meganode
	fullRuns uint64
}

// worker runs tree work: exactly Options.Cores of them take jobs from the
// bounded queue, so the server's CPU budget for tree work is explicit (the
// paper's "server cores"). Each keeps its decode targets, reply messages
// and buffers, so that a steady stream of requests does not allocate.
func (rs *rpcServer) worker() {
	s := rs.s
	defer rs.workers.Done()
	w := newWorker(s)
	for j := range rs.queue {
		w.run(j)
	}
}

// run handles one job and answers it with its queueing and service time;
// a write in flight is answered by settleWrite (write.go).
func (w *worker) run(j job) {
	s := w.s
	start := time.Now()
	queued := start.Sub(j.arrived)
	h := &j.f.Header
	if hook := s.opts.TestingKnobs.BeforeHandle; hook != nil {
		hook(h.Op)
	}
	var msg wire.Message
	var err error
	dl, ok := h.Deadline(j.arrived)
	if ok && start.After(dl) {
		err = wire.ErrExpired // the caller gave up: not executed
	} else {
		w.started, w.deadline = start, dl
		// The handlers see the job through w.job, pointing into the
		// worker (a pointer to j would move every job to the heap).
		w.cur = j
		w.job = &w.cur
		out := w.handle(h.Op, j.f.Body)
		j, w.cur, w.job = w.cur, job{}, nil
		if out.proposed {
			go s.rpc.settleWrite(j, out.p, start)
			s.rpc.busyNanos.Add(int64(time.Since(start)))
			return
		}
		msg, err = out.msg, out.err
	}
	service := time.Since(start)
	s.rpc.busyNanos.Add(int64(service))
	s.rpc.answer(j, msg, err, queued, service)
	w.resetLarge()
}

// answer writes job j's reply (msg, or err's status) with its queueing and
// service time, and ends the job.
func (rs *rpcServer) answer(j job, msg wire.Message, err error, queued, service time.Duration) {
	h := &j.f.Header
	rs.respond(j.c, h, msg, err, queued, service)
	j.f.Release()
	ewmaAdd(&rs.queueEWMA, int64(queued))
	if h.Op == wire.OpSearch {
		ewmaAdd(&rs.serviceEWMA, int64(service))
	}
	j.c.done()
}

// ewmaAdd folds x into the moving average at a with weight 1/8, lock-free.
func ewmaAdd(a interface {
	Load() int64
	CompareAndSwap(old, new int64) bool
}, x int64) {
	for {
		old := a.Load()
		nv := x
		if old != 0 {
			nv = old + (x-old)/8
		}
		if a.CompareAndSwap(old, nv) {
			return
		}
	}
}

// utilizationLoop computes the workers' busy fraction over each second.
func (rs *rpcServer) utilizationLoop() {
	s := rs.s
	t := time.NewTicker(time.Second)
	defer t.Stop()
	lastBusy, lastT := rs.busyNanos.Load(), time.Now()
	for {
		select {
		case <-s.bgCtx.Done():
			return
		case now := <-t.C:
			busy := rs.busyNanos.Load()
			wall := now.Sub(lastT) * time.Duration(s.opts.Cores)
			u := 0.0
			if wall > 0 {
				u = min(float64(busy-lastBusy)/float64(wall), 1)
			}
			rs.utilization.Store(math.Float64bits(u))
			lastBusy, lastT = busy, now
		}
	}
}

// hints are the selector hints of a Metadata reply.
func (rs *rpcServer) hints() wire.SelectorHints {
	s := rs.s
	sat := func(v int64) uint32 { return uint32(min(max(v, 0), math.MaxUint32)) }
	return wire.SelectorHints{
		Workers:      uint16(min(s.opts.Cores, math.MaxUint16)),
		Queued:       uint32(len(rs.queue)),
		QueueNanos:   sat(rs.queueEWMA.Load()),
		ServiceNanos: sat(rs.serviceEWMA.Load()),
	}
}

// respond answers request h on c with msg (err nil; a nil msg is an empty
// body) or with err's status. The reply is counted in the metrics before
// it is queued, so that a client holding a reply finds it in /metrics. A
// reply over the frame limit is a bug (replies are sized below it):
// logged, and answered Internal.
func (rs *rpcServer) respond(c *conn, h *wire.Header, msg wire.Message, err error, queued, service time.Duration) {
	s := rs.s
	var r wire.Reply
	if err == nil {
		rh := h.Reply(wire.StatusOK)
		rh.SetTiming(queued, service)
		var eerr error
		if r, eerr = c.rw.Encode(rh, msg); eerr != nil {
			s.log.Error("server: reply over the frame limit", slog.String("op", h.Op.String()), slog.Any("err", eerr))
			err = wireErrorf(wire.StatusInternal, "reply too large")
		}
	}
	st := wire.StatusOK
	if err != nil {
		err = wireError(err)
		if st = wire.StatusOf(err); st == wire.StatusInternal {
			s.log.Error("server: internal error", slog.String("op", h.Op.String()), slog.Any("err", err))
		}
	}
	s.metrics.observe(h.Op, st, queued, service)
	alone := c.answered()
	switch {
	case err != nil:
		_ = c.rw.WriteError(h, err, queued, service)
	case alone:
		// A failed write fails the connection, which its reader sees.
		_ = c.rw.SendAlone(r)
	default:
		_ = c.rw.Send(r)
	}
}
