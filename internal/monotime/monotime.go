// Package monotime reads CLOCK_MONOTONIC as the Go runtime does, cheaply
// (the vDSO, no system call, no allocation). On Linux the clock is the
// same for every process on the host, so a deadline one process stamps in
// shared memory (a region's read lease, package rdma) is judged by
// another against the same clock. It never jumps with the wall clock.
package monotime

import (
	_ "unsafe" // go:linkname
)

// Now returns the host's monotonic clock in nanoseconds.
func Now() int64 { return nanotime() }

// nanotime is the runtime's monotonic clock (CLOCK_MONOTONIC through the
// vDSO on Linux), the one time.Now's monotonic reading comes from.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
