package client

import (
	"context"
	"sync/atomic"
	"time"
)

// CPUSlots bound how many goroutines of a process do client-side work
// over shm (one-sided meganode hops and client-side range pages of
// regions mapped from this host) at once, while a server-side call of the
// clients that share them waits for its reply.
//
// Such work never blocks: a hop or a page is loads from mapped memory.
// (Over tcp a one-sided read waits for its reply, parked, and is not
// bounded.) When more goroutines do it than the process has Ps
// (GOMAXPROCS), every P always has one to run, and Go's scheduler polls
// the network only from sysmon, every 10 ms at most: the reply of a
// server-side operation (a put, or a hop the selector sent to the server)
// waits in its socket for that long (docs/bench-history.md §16, "Why inserts in E
// over shm take 8 ms"). Fewer slots than Ps leave a P that runs out of
// work and polls at once. A goroutine that finds every slot taken waits,
// parked, for one. With no call waiting there is no bound: a workload of
// client-side reads alone keeps every P.
//
// The bound trades client-side throughput for the latency of server-side
// operations (BENCHMARKS.md §11, "The update tail over shm"). One
// CPUSlots is shared by every Client of a process that should count
// against the same cores (cellctl bench --cpu-slots gives one to all its
// client instances); Config.CPUSlots nil means no bound, the default.
type CPUSlots struct {
	ch chan struct{}
	// calls are the server-side calls waiting for replies.
	calls atomic.Int64
}

// NewCPUSlots returns n slots; n < 1 is taken as 1.
func NewCPUSlots(n int) *CPUSlots {
	return &CPUSlots{ch: make(chan struct{}, max(n, 1))}
}

// Cap is the number of slots.
func (s *CPUSlots) Cap() int { return cap(s.ch) }

// InUse is the number of slots taken now.
func (s *CPUSlots) InUse() int { return len(s.ch) }

// acquire takes a slot if a call is waiting, waiting for one until ctx
// ends; held reports whether it took one (then release it). A nil
// CPUSlots never bounds.
func (s *CPUSlots) acquire(ctx context.Context) (held bool, _ error) {
	held, _, err := s.acquireTimed(ctx, func() time.Duration { return 0 })
	return held, err
}

// acquireTimed is acquire that also reports how long it waited for a
// slot, read with clock (a monotonic reading) only when it had to wait.
func (s *CPUSlots) acquireTimed(ctx context.Context, clock func() time.Duration) (held bool, wait time.Duration, _ error) {
	if s == nil || s.calls.Load() == 0 {
		return false, 0, nil
	}
	select {
	case s.ch <- struct{}{}:
		return true, 0, nil
	default:
	}
	start := clock()
	select {
	case s.ch <- struct{}{}:
		return true, clock() - start, nil
	case <-ctx.Done():
		return false, 0, ctx.Err()
	}
}

// release gives back a slot acquire took (held).
func (s *CPUSlots) release(held bool) {
	if held {
		<-s.ch
	}
}

// callStart and callEnd bracket a server-side call.
func (s *CPUSlots) callStart() {
	if s != nil {
		s.calls.Add(1)
	}
}

func (s *CPUSlots) callEnd() {
	if s != nil {
		s.calls.Add(-1)
	}
}
