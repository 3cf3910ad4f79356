package client

import "context"

// CPUSlots bound how many goroutines of a process do client-side work
// over shm (one-sided meganode hops and client-side range pages of
// regions mapped from this host) at once.
//
// Such work never blocks: a hop or a page is loads from mapped memory.
// (Over tcp a one-sided read waits for its reply, parked, and is not
// bounded.) When more goroutines do
// it than the process has Ps (GOMAXPROCS), every P always has one to run,
// and Go's scheduler polls the network only from sysmon, every 10 ms at
// most: the reply of a server-side operation (a put, or a hop the
// selector sent to the server) waits in its socket for that long
// (BENCHMARKS.md §16, "Why inserts in E over shm take 8 ms"). Fewer slots
// than Ps leave a P that runs out of work and polls at once. A goroutine
// that finds every slot taken waits, parked, for one.
//
// One CPUSlots is shared by every Client of a process that should count
// against the same cores (cellctl bench gives one to all its client
// instances); Config.CPUSlots nil means no bound, as before.
type CPUSlots struct {
	ch chan struct{}
}

// NewCPUSlots returns n slots; n < 1 is taken as 1.
func NewCPUSlots(n int) *CPUSlots {
	return &CPUSlots{ch: make(chan struct{}, max(n, 1))}
}

// Cap is the number of slots.
func (s *CPUSlots) Cap() int { return cap(s.ch) }

// InUse is the number of slots taken now.
func (s *CPUSlots) InUse() int { return len(s.ch) }

// acquire takes a slot, waiting for one until ctx ends. A nil CPUSlots
// always has one.
func (s *CPUSlots) acquire(ctx context.Context) error {
	if s == nil {
		return nil
	}
	select {
	case s.ch <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives back a slot acquire took.
func (s *CPUSlots) release() {
	if s != nil {
		<-s.ch
	}
}
