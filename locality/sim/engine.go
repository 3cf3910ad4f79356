package sim

import (
	"math/rand/v2"
	"time"

	"github.com/cellstore/cell/locality"
)

// epoch is virtual time zero as the selectors' clock shows it.
var epoch = time.Date(2016, 6, 22, 0, 0, 0, 0, time.UTC)

// server is one server's two queues. The CPU is one FIFO queue served by
// Cores identical cores; the NIC is one FIFO queue served by one reader.
//
// Invariant: because every request reaches its server RTT/2 after it was
// sent and requests are sent in virtual-time order, requests reach each
// queue in the order they are handled here; so a request's start time can
// be fixed when it is sent: max(arrival, earliest free core).
type server struct {
	coreFree []time.Duration // when each core finishes its last job
	nicFree  time.Duration   // when the NIC finishes its last read
	cpuWork  time.Duration   // CPU service time of jobs started since resetUsage
	nicWork  time.Duration   // NIC service time of reads started since resetUsage
}

// client is one client process with its own selector. It keeps at most
// limit searches in flight; searches handed to it beyond that wait in
// backlog (open loop).
type client struct {
	id       int32
	sel      *locality.Selector
	ests     []*locality.Estimator // per server, cached like a connection would
	inflight int
	limit    int
	backlog  []time.Duration // arrival times of waiting searches, FIFO from head
	head     int
	until    time.Duration // open loop: the client stops receiving searches at this time
	interval time.Duration // open loop: time between searches
}

// op is one search in flight: one meganode traversal on one server.
type op struct {
	idx       int32
	c         *client
	server    int
	choice    locality.Choice
	issued    time.Duration // when the application issued the search
	sent      time.Duration // when the current RPC or read was sent
	queue     time.Duration // server-side: time spent waiting for a core
	service   time.Duration // server-side: CPU service time
	readsLeft int
}

// hooks connect a scenario to the engine.
type hooks struct {
	arrival func(c *client)                     // an evArrival for c is due
	choose  func(c *client, ch locality.Choice) // c's selector decided (may be nil)
	done    func(o *op)                         // a search completed; o is recycled afterwards
}

// engine is one deterministic discrete-event run.
type engine struct {
	m       Model
	mode    locality.Mode
	now     time.Duration
	q       eventQueue
	rng     *rand.Rand
	servers []server
	clients []*client
	ops     []*op         // every op ever made; events refer to them by index
	free    []int32       // indices of ops not in flight
	half    time.Duration // RTT/2
	cpuMean float64       // ns
	nicMean float64       // ns
	hooks   hooks
}

// newEngine returns an engine for model m (defaults filled, validated) with
// every client's selector in mode.
func newEngine(m Model, mode locality.Mode, h hooks) *engine {
	e := &engine{
		m:       m,
		mode:    mode,
		rng:     rand.New(rand.NewPCG(m.Seed, 0x5eed)),
		servers: make([]server, m.Servers),
		half:    m.RTT / 2,
		cpuMean: 1e9 / m.CoreRate,
		nicMean: 1e9 / m.NICRate,
		hooks:   h,
	}
	for i := range e.servers {
		e.servers[i].coreFree = make([]time.Duration, m.Cores)
	}
	return e
}

// addClient creates a client that keeps at most limit searches in flight.
func (e *engine) addClient(limit int) (*client, error) {
	id := int32(len(e.clients))
	opts := e.m.Selector
	opts.Mode = e.mode
	opts.Clock = locality.ClockFunc(func() time.Time { return epoch.Add(e.now) })
	// A distinct, nonzero, reproducible seed per client.
	opts.Seed = (e.m.Seed*0x9e3779b97f4a7c15 + uint64(id)*0xbf58476d1ce4e5b9) | 1
	sel, err := locality.NewSelector(opts)
	if err != nil {
		return nil, err
	}
	c := &client{id: id, sel: sel, limit: limit, ests: make([]*locality.Estimator, e.m.Servers)}
	for s := range c.ests {
		c.ests[s] = sel.Estimator(locality.ServerID(s))
	}
	e.clients = append(e.clients, c)
	return c, nil
}

// arrive schedules an evArrival for c at t.
func (e *engine) arrive(t time.Duration, c *client) {
	e.q.push(event{at: t, kind: evArrival, ref: c.id})
}

// run handles events up to and including time until, or until none are
// left; the clock ends at until if events remain.
func (e *engine) run(until time.Duration) {
	for e.q.len() > 0 && e.q.h[0].at <= until {
		ev := e.q.pop()
		e.now = ev.at
		switch ev.kind {
		case evArrival:
			e.hooks.arrival(e.clients[ev.ref])
		case evServerReply:
			o := e.ops[ev.ref]
			o.c.ests[o.server].ObserveServer(e.now-o.sent, o.queue, o.service)
			e.finish(o)
		case evReadReply:
			o := e.ops[ev.ref]
			o.c.ests[o.server].ObserveRead(e.now - o.sent)
			if o.readsLeft--; o.readsLeft > 0 {
				e.sendRead(o)
			} else {
				e.finish(o)
			}
		}
	}
	if e.q.len() > 0 {
		e.now = until
	}
}

// start begins a search that the application issued at issued.
func (e *engine) start(c *client, issued time.Duration) {
	var o *op
	if n := len(e.free); n > 0 {
		o, e.free = e.ops[e.free[n-1]], e.free[:n-1]
	} else {
		o = &op{idx: int32(len(e.ops))}
		e.ops = append(e.ops, o)
	}
	*o = op{idx: o.idx, c: c, server: e.rng.IntN(len(e.servers)), issued: issued}
	c.inflight++
	o.choice = c.ests[o.server].Choose()
	if e.hooks.choose != nil {
		e.hooks.choose(c, o.choice)
	}
	if o.choice.Method == locality.ServerSide {
		e.sendServer(o)
	} else {
		o.readsLeft = e.m.M
		e.sendRead(o)
	}
}

// finish completes a search: the client learns the meganode's height, the
// scenario records it, and a waiting search, if any, starts.
func (e *engine) finish(o *op) {
	c := o.c
	c.sel.ObserveHeight(e.m.M)
	c.inflight--
	e.hooks.done(o)
	e.free = append(e.free, o.idx)
	if c.head < len(c.backlog) && c.inflight < c.limit {
		issued := c.backlog[c.head]
		c.head++
		if c.head == len(c.backlog) {
			c.backlog, c.head = c.backlog[:0], 0
		}
		e.start(c, issued)
	}
}

// sendServer sends a server-side search RPC: it waits for the earliest free
// core, is served, and the reply travels back.
func (e *engine) sendServer(o *op) {
	s := &e.servers[o.server]
	arrive := e.now + e.half
	k := 0
	for i, f := range s.coreFree {
		if f < s.coreFree[k] {
			k = i
		}
	}
	begin := max(arrive, s.coreFree[k])
	svc := e.serviceTime(e.cpuMean)
	s.coreFree[k] = begin + svc
	s.cpuWork += svc
	o.sent, o.queue, o.service = e.now, begin-arrive, svc
	e.q.push(event{at: begin + svc + e.back(), kind: evServerReply, ref: o.idx})
}

// sendRead issues the next one-sided read of a client-side traversal.
func (e *engine) sendRead(o *op) {
	s := &e.servers[o.server]
	begin := max(e.now+e.half, s.nicFree)
	svc := e.serviceTime(e.nicMean)
	s.nicFree = begin + svc
	s.nicWork += svc
	o.sent = e.now
	e.q.push(event{at: begin + svc + e.back(), kind: evReadReply, ref: o.idx})
}

// back draws the time a reply takes to travel back: RTT/2 plus jitter.
func (e *engine) back() time.Duration {
	if e.m.NetJitter > 0 {
		return e.half + time.Duration(e.rng.ExpFloat64()*float64(e.m.NetJitter))
	}
	return e.half
}

// serviceTime draws a service time with the given mean (ns), at least 1ns.
func (e *engine) serviceTime(mean float64) time.Duration {
	if e.m.Jitter > 0 {
		mean *= 1 + e.m.Jitter*(2*e.rng.Float64()-1)
	}
	return max(time.Duration(mean), 1)
}

// resetUsage starts a new utilisation measurement.
func (e *engine) resetUsage() {
	for i := range e.servers {
		e.servers[i].cpuWork, e.servers[i].nicWork = 0, 0
	}
}

// usage returns the mean CPU and NIC utilisation of the servers over a
// measurement of length d started by resetUsage.
func (e *engine) usage(d time.Duration) (cpu, nic float64) {
	var cw, nw time.Duration
	for _, s := range e.servers {
		cw += s.cpuWork
		nw += s.nicWork
	}
	n := float64(len(e.servers))
	return float64(cw) / (n * float64(e.m.Cores) * float64(d)), float64(nw) / (n * float64(d))
}
