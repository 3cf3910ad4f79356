package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
)

// The bench runner: clients connect, keys are preloaded, then workers run
// closed loops; operations completed inside [warmup end, run end] are
// counted and their latencies recorded, and the clients' counters, this
// process's CPU time and the server's (--server-pid) are read at both ends
// of that window.

// benchOp is a kind of operation a workload issues.
type benchOp int

const (
	opGet benchOp = iota
	opPut
	opSearch
	opInsert // a put of a new key (ycsb-d, ycsb-e)
	opScan   // a Range with a limit (ycsb-e)
	opRMW    // a get, then a put of the same key (ycsb-f)
	numBenchOps
)

var benchOpNames = [numBenchOps]string{"get", "put", "search", "insert", "scan", "rmw"}

// opCounts are one worker's figures of one kind of operation.
type opCounts struct {
	hist             histogram
	errors, notFound uint64
}

// benchWorker is one closed loop of operations.
type benchWorker struct {
	c    benchClient
	rng  *rand.Rand
	ops  [numBenchOps]*opCounts // allocated on first use
	win  workerWindows
	done atomic.Uint64 // operations completed in the window (for progress)

	firstErr      error
	key, val, buf []byte
	latest        latestKeys // ycsb-d's key choice
}

// benchSnapshot is what is read at each end of the measured window.
type benchSnapshot struct {
	at        time.Time
	stats     []client.Stats
	clientCPU time.Duration
	serverCPU time.Duration
	serverErr error
}

func runBench(g *globals, p *benchParams) (benchResult, error) {
	ctx, cancel := g.commandContext()
	defer cancel()
	clients, err := openBenchClients(ctx, g, p)
	if err != nil {
		return benchResult{}, err
	}
	defer closeBenchClients(clients)
	if p.ServerPID > 0 {
		if _, err := processCPU(p.ServerPID); err != nil {
			return benchResult{}, fmt.Errorf("--server-pid: %w", err)
		}
	}
	if err := preload(g, p, clients); err != nil {
		return benchResult{}, err
	}

	intervals, phases := newSeries(p)
	var series []*windowSeries
	for _, s := range []*windowSeries{intervals, phases} {
		if s != nil {
			series = append(series, s)
		}
	}
	workers := newBenchWorkers(p, clients, len(series))
	start := time.Now()
	from, to := start.Add(p.Warmup), start.Add(p.Warmup+p.Duration)
	runCtx, runCancel := context.WithDeadline(context.Background(), to.Add(max(g.timeout, time.Second)))
	defer runCancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(runCtx, p, from, to)
		}()
	}

	pr := newBenchProgress(g, p, workers, start, from)
	defer pr.stop()
	var snaps [2]benchSnapshot
	pr.waitUntil(from)
	snaps[0] = takeSnapshot(clients, p.ServerPID)
	if p.CPUProfile != "" {
		stop, err := startCPUProfile(p.CPUProfile)
		if err != nil {
			runCancel()
			wg.Wait()
			return benchResult{}, err
		}
		defer stop()
	}
	closeWindowsBefore(series, workers, clients, pr, snaps[0], from, to)
	pr.waitUntil(to)
	snaps[1] = takeSnapshot(clients, p.ServerPID)
	pr.finish()
	wg.Wait()
	for si, s := range series {
		s.closeWindow(si, workers, snaps[1].at, snaps[0].at, snaps[1].stats)
	}
	r := benchSummary(p, workers, snaps)
	if intervals != nil {
		r.Intervals = intervals.out
	}
	if phases != nil {
		r.PhaseResults = phases.out
	}
	return r, nil
}

// newBenchWorkers makes the run's Clients × InFlight workers, each with
// a random source of its own and window counts for nseries series.
func newBenchWorkers(p *benchParams, clients []benchClient, nseries int) []*benchWorker {
	var workers []*benchWorker
	for i := range p.Clients * p.InFlight {
		w := &benchWorker{
			c:   clients[i%p.Clients],
			rng: rand.New(rand.NewPCG(p.Seed, uint64(i)+1)),
			key: make([]byte, 0, len(p.KeyPrefix)+12),
			buf: make([]byte, 0, p.ValueSize),
		}
		w.win.counts = make([]windowCounts, nseries)
		w.val = make([]byte, p.ValueSize)
		fillValue(w.rng, w.val)
		workers = append(workers, w)
	}
	return workers
}

// closeWindowsBefore closes, as their ends pass, every window of the
// series that ends before the run does (at to); the last ones close with
// the run, once the workers have stopped. first is the snapshot at from.
func closeWindowsBefore(series []*windowSeries, workers []*benchWorker, clients []benchClient, pr *benchProgress, first benchSnapshot, from, to time.Time) {
	for _, s := range series {
		s.lastAt, s.lastStats = first.at, first.stats
	}
	for {
		next, si := to, -1
		for i, s := range series {
			if n := len(s.out); n < len(s.ends)-1 {
				if at := from.Add(s.ends[n]); at.Before(next) {
					next, si = at, i
				}
			}
		}
		if si < 0 {
			return
		}
		pr.waitUntil(next)
		series[si].closeWindow(si, workers, time.Now(), first.at, clientStats(clients))
	}
}

// benchProgress is the progress bar of a run: the workers' operations a
// second, updated every 200 ms while the run waits.
type benchProgress struct {
	p           *benchParams
	bar         *progress
	tick        *time.Ticker
	workers     []*benchWorker
	start, from time.Time
	total       int // the run's milliseconds, warm-up included
}

func newBenchProgress(g *globals, p *benchParams, workers []*benchWorker, start, from time.Time) *benchProgress {
	return &benchProgress{
		p: p, workers: workers, start: start, from: from,
		bar:   newProgress(g, fmt.Sprintf("bench %s", p.Mode), p.NoProgress),
		tick:  time.NewTicker(200 * time.Millisecond),
		total: int(p.Warmup/time.Millisecond + p.Duration/time.Millisecond),
	}
}

// waitUntil sleeps until at, updating the progress bar.
func (pr *benchProgress) waitUntil(at time.Time) {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return
		case now := <-pr.tick.C:
			var n uint64
			for _, w := range pr.workers {
				n += w.done.Load()
			}
			desc := fmt.Sprintf("bench %s: warming up", pr.p.Mode)
			if el := now.Sub(pr.from); el > 0 {
				desc = fmt.Sprintf("bench %s: %s", pr.p.Mode, fmtOpsRate(float64(n)/el.Seconds()))
			}
			pr.bar.describe(desc)
			pr.bar.set(int(now.Sub(pr.start)/time.Millisecond), pr.total)
		}
	}
}

// finish completes the bar.
func (pr *benchProgress) finish() { pr.bar.finish() }

// stop stops the ticker.
func (pr *benchProgress) stop() { pr.tick.Stop() }

// run is one worker's loop: operations until to, recording those that
// complete in [from, to].
func (w *benchWorker) run(ctx context.Context, p *benchParams, from, to time.Time) {
	var seq uint64
	for {
		t0 := time.Now()
		if !t0.Before(to) {
			return
		}
		st := p.nextStep(w.rng, &w.latest)
		w.key = appendKey(w.key[:0], p.KeyPrefix, st.idx)
		op := st.op
		var err error
		switch op {
		case opPut, opInsert:
			seq++
			if len(w.val) >= 8 {
				putUint64(w.val, seq)
			}
			err = w.c.Put(ctx, w.key, w.val)
			if op == opInsert && err == nil {
				p.inserts.ack()
			}
		case opSearch:
			var found bool
			found, err = w.c.Contains(ctx, w.key)
			if err == nil && !found {
				err = client.ErrNotFound
			}
		case opScan:
			var pairs []client.KV
			pairs, _, err = w.c.Range(ctx, w.key, nil, client.RangeOptions{Limit: st.scan})
			if err == nil && len(pairs) == 0 {
				err = client.ErrNotFound
			}
		case opRMW:
			w.buf, err = w.c.GetAppend(ctx, w.buf[:0], w.key)
			if err == nil {
				seq++
				if len(w.buf) >= 8 {
					putUint64(w.buf, seq)
				}
				err = w.c.Put(ctx, w.key, w.buf)
			}
		default:
			w.buf, err = w.c.GetAppend(ctx, w.buf[:0], w.key)
		}
		t1 := time.Now()
		if t1.Before(from) || t1.After(to) {
			continue
		}
		oc := w.ops[op]
		if oc == nil {
			oc = &opCounts{}
			w.ops[op] = oc
		}
		d := t1.Sub(t0)
		oc.hist.record(d)
		w.done.Add(1)
		failed := false
		switch {
		case err == nil:
		case errors.Is(err, client.ErrNotFound):
			oc.notFound++
		default:
			failed = true
			oc.errors++
			if w.firstErr == nil {
				w.firstErr = err
			}
		}
		w.win.record(d, failed)
	}
}

// preloadGiveUp is how many failed preload writes make the preload stop
// (a cluster that is down would otherwise cost every key a timeout).
const preloadGiveUp = 100

// preload stores keys 0..Keys-1 with concurrent puts. A failed write does
// not stop it: it goes on and reports how many writes failed, unless
// preloadGiveUp of them did. Each write has --command-timeout (at least
// 1 s).
func preload(g *globals, p *benchParams, clients []benchClient) error {
	if p.Keys == 0 {
		return nil
	}
	bar := newProgress(g, "preloading", p.NoProgress)
	defer bar.finish()
	var next, done, failed atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	workers := max(p.Clients*p.InFlight, 16)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(p.Seed, uint64(1<<32+i)))
			key := make([]byte, 0, len(p.KeyPrefix)+12)
			val := make([]byte, p.ValueSize)
			fillValue(rng, val)
			for {
				k := next.Add(1) - 1
				if k >= int64(p.Keys) {
					return
				}
				key = appendKey(key[:0], p.KeyPrefix, int(k))
				pctx, cancel := context.WithTimeout(context.Background(), max(g.timeout, time.Second))
				err := clients[i%len(clients)].Put(pctx, key, val)
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("key %q: %w", key, err)
					}
					mu.Unlock()
					if failed.Add(1) >= preloadGiveUp {
						next.Store(int64(p.Keys)) // stop everyone
						return
					}
					continue
				}
				done.Add(1)
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-finished:
			bar.set(int(done.Load()), p.Keys)
			return preloadError(p.Keys, done.Load(), failed.Load(), firstErr)
		case <-tick.C:
			bar.set(int(done.Load()), p.Keys)
		}
	}
}

// preloadError reports a preload that did not store all its keys.
func preloadError(keys int, done, failed int64, firstErr error) error {
	if done == int64(keys) {
		return nil
	}
	msg := fmt.Sprintf("preload: %d of %d writes failed", failed, keys)
	if failed >= preloadGiveUp {
		msg += fmt.Sprintf(" (gave up after %d failures; %d stored, %d not tried)", failed, done, int64(keys)-done-failed)
	}
	if firstErr != nil {
		msg += "; first error: " + firstErr.Error()
	}
	return errors.New(msg)
}

// clientStats reads every client's counters.
func clientStats(clients []benchClient) []client.Stats {
	stats := make([]client.Stats, 0, len(clients))
	for _, c := range clients {
		stats = append(stats, c.Stats())
	}
	return stats
}

func takeSnapshot(clients []benchClient, pid int) benchSnapshot {
	s := benchSnapshot{at: time.Now(), stats: clientStats(clients)}
	s.clientCPU, _ = selfCPU()
	if pid > 0 {
		s.serverCPU, s.serverErr = processCPU(pid)
	}
	return s
}

func benchSummary(p *benchParams, workers []*benchWorker, snaps [2]benchSnapshot) benchResult {
	r := benchResult{Params: *p, Retries: map[string]uint64{}, ServerSide: -1, ByOp: map[string]opResult{},
		StartUnixNano: snaps[0].at.UnixNano(), EndUnixNano: snaps[1].at.UnixNano()}
	var h histogram
	for op := range numBenchOps {
		var oh histogram
		var o opResult
		used := false
		for _, w := range workers {
			if oc := w.ops[op]; oc != nil {
				used = true
				oh.merge(&oc.hist)
				o.Errors += oc.errors
				o.NotFound += oc.notFound
			}
		}
		if !used {
			continue
		}
		o.Ops, o.latencies = oh.n, oh.latencies()
		r.ByOp[benchOpNames[op]] = o
		h.merge(&oh)
		r.Errors += o.Errors
		r.NotFound += o.NotFound
	}
	for _, w := range workers {
		if w.firstErr != nil && r.FirstError == "" {
			r.FirstError = w.firstErr.Error()
		}
	}
	r.Ops = h.n
	r.Seconds = snaps[1].at.Sub(snaps[0].at).Seconds()
	if r.Seconds > 0 {
		r.Throughput = float64(r.Ops) / r.Seconds
	}
	r.latencies = h.latencies()
	for i := range snaps[1].stats {
		a, b := &snaps[0].stats[i], &snaps[1].stats[i]
		r.ServerHops += b.ServerHops - a.ServerHops
		r.ClientHops += b.ClientHops - a.ClientHops
		r.Reads += b.Reads - a.Reads
		for k, v := range b.Retries {
			r.Retries[k] += v - a.Retries[k]
		}
		r.M += b.Selector.M / float64(len(snaps[1].stats))
		addSelector(&r.Selector, a.Selector, b.Selector)
	}
	if n := time.Duration(len(snaps[1].stats)); n > 0 {
		r.Selector.MeanLS /= n
		r.Selector.MeanLR /= n
		r.Selector.RTT /= n
		r.Selector.PageServer /= n
		r.Selector.PageClient /= n
	}
	if hops := r.ServerHops + r.ClientHops; hops > 0 {
		r.ServerSide = float64(r.ServerHops) / float64(hops)
	}
	if r.Ops > 0 {
		r.ClientCPUPerOp = (snaps[1].clientCPU - snaps[0].clientCPU).Seconds() * 1e6 / float64(r.Ops)
	}
	if p.ServerPID > 0 && snaps[0].serverErr == nil && snaps[1].serverErr == nil {
		cpu := (snaps[1].serverCPU - snaps[0].serverCPU).Seconds()
		perOp := 0.0
		if r.Ops > 0 {
			perOp = cpu * 1e6 / float64(r.Ops)
		}
		r.ServerCPU, r.ServerCPUPerOp = &cpu, &perOp
	}
	return r
}

// startCPUProfile starts profiling this process into path; stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// addSelector adds the change of one selector from a to b to sum (and its
// final estimates, averaged by the caller).
func addSelector(sum *selectorSummary, a, b locality.Snapshot) {
	sum.Decisions.Server += b.Decisions.Server - a.Decisions.Server
	sum.Decisions.Client += b.Decisions.Client - a.Decisions.Client
	sum.Decisions.Explore += b.Decisions.Explore - a.Decisions.Explore
	sum.PageDecisions.Server += b.PageDecisions.Server - a.PageDecisions.Server
	sum.PageDecisions.Client += b.PageDecisions.Client - a.PageDecisions.Client
	sum.PageDecisions.Explore += b.PageDecisions.Explore - a.PageDecisions.Explore
	before := map[locality.ServerID]locality.EstimatorSnapshot{}
	for _, e := range a.Servers {
		before[e.Server] = e
	}
	n := time.Duration(len(b.Servers))
	for _, e := range b.Servers {
		o := before[e.Server] // zero if the estimator is new
		sum.LS.Observed += e.LS.Observed - o.LS.Observed
		sum.LS.Dropped += e.LS.Dropped - o.LS.Dropped
		sum.LS.Resets += e.LS.Resets - o.LS.Resets
		sum.LR.Observed += e.LR.Observed - o.LR.Observed
		sum.LR.Dropped += e.LR.Dropped - o.LR.Dropped
		sum.LR.Resets += e.LR.Resets - o.LR.Resets
		sum.IdleResets += e.IdleResets - o.IdleResets
		sum.MeanLS += e.LS.Mean / n
		sum.MeanLR += e.LR.Mean / n
		sum.RTT += e.RTT / n
		sum.PageServer += e.PageServer.Mean / n
		sum.PageClient += e.PageClient.Mean / n
	}
}

// appendKey appends prefix and idx as 12 decimal digits.
func appendKey(dst []byte, prefix string, idx int) []byte {
	dst = append(dst, prefix...)
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], uint64(idx), 10)
	for range 12 - len(d) {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}

// fillValue fills v with printable random bytes.
func fillValue(rng *rand.Rand, v []byte) {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i := range v {
		v[i] = alphabet[rng.IntN(len(alphabet))]
	}
}

// putUint64 writes n in the first 8 bytes of v as printable hex digits'
// worth of change: each put stores a different value.
func putUint64(v []byte, n uint64) {
	const digits = "0123456789abcdef"
	for i := 7; i >= 0; i-- {
		v[i] = digits[n&15]
		n >>= 4
	}
}
