package server

import (
	"slices"
	"sync"
	"time"
)

// Writes that must wait for a meganode split are parked, not blocked: a
// write whose record met a frozen range (or a full meganode that must
// split first) is handed to the parking lot by settleWrite (write.go),
// and no worker waits for it. The
// split's progress (splitEvent) puts every parked job back in the queue,
// where a worker runs it again from its search; so does the end of a job's
// wait bound (its deadline, or Options.MaxSplitWait), and the re-run then
// answers Expired or NeedsRetry. A split therefore never holds a worker,
// and reads keep flowing during it, whatever the number of cores.
//
// Close stops parking (closeParking) before it waits for the connections:
// parked jobs are run again, and a job that would park is answered
// Unavailable instead.
//
// Locking notes: parking.mu is a leaf.

type parking struct {
	mu     sync.Mutex
	jobs   []job
	closed bool
	timer  *time.Timer // fires at the earliest wait bound of a parked job
	next   time.Time   // when timer fires; zero when it is not armed
}

// splitEvent tells the writes waiting for a split that it moved on: the
// blocking ones through the broadcast, the parked ones by requeueing them.
func (s *Server) splitEvent() {
	s.splits.wake.broadcast()
	s.rpc.unpark(false)
}

// park parks job j, whose write met a split at generation gen. It returns
// false when parking is closed (the server stops). A split that moved on
// since gen gets the job back in the queue at once.
func (rs *rpcServer) park(j job, gen uint64) bool {
	s := rs.s
	p := &rs.parking
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	if s.splits.wake.generation() != gen {
		p.mu.Unlock()
		rs.requeue(j)
		return true
	}
	p.jobs = append(p.jobs, j)
	if p.next.IsZero() || j.waitUntil.Before(p.next) {
		p.next = j.waitUntil
		d := max(time.Until(j.waitUntil), 0)
		if p.timer == nil {
			p.timer = time.AfterFunc(d, func() { rs.unpark(true) })
		} else {
			p.timer.Reset(d)
		}
	}
	p.mu.Unlock()
	return true
}

// unpark requeues the parked jobs: all of them, or with expired only those
// whose wait bound passed (the timer), re-arming the timer for the rest.
func (rs *rpcServer) unpark(expired bool) {
	p := &rs.parking
	p.mu.Lock()
	var run []job
	if expired {
		now := time.Now()
		var keep []job
		p.next = time.Time{}
		for _, j := range p.jobs {
			if now.Before(j.waitUntil) {
				keep = append(keep, j)
				if p.next.IsZero() || j.waitUntil.Before(p.next) {
					p.next = j.waitUntil
				}
			} else {
				run = append(run, j)
			}
		}
		p.jobs = keep
		if !p.next.IsZero() && p.timer != nil {
			p.timer.Reset(max(time.Until(p.next), 0))
		}
	} else {
		run, p.jobs = p.jobs, nil
		p.next = time.Time{}
		if p.timer != nil {
			p.timer.Stop()
		}
	}
	p.mu.Unlock()
	for _, j := range run {
		rs.requeue(j)
	}
}

// closeParking stops parking and requeues every parked job. Close calls it
// while the queue still takes jobs.
func (rs *rpcServer) closeParking() {
	p := &rs.parking
	p.mu.Lock()
	p.closed = true
	run := slices.Clone(p.jobs)
	p.jobs, p.next = nil, time.Time{}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	for _, j := range run {
		rs.requeue(j)
	}
}

// parked returns the number of parked jobs.
func (rs *rpcServer) parked() int {
	rs.parking.mu.Lock()
	defer rs.parking.mu.Unlock()
	return len(rs.parking.jobs)
}

// requeue puts a parked job back in the queue, or answers it Overloaded
// when the queue is full (it was not applied; the client retries).
func (rs *rpcServer) requeue(j job) {
	select {
	case rs.queue <- j:
	default:
		j.c.overloaded(j.f, time.Since(j.arrived))
	}
}
