package rdma

import (
	"fmt"
	"strings"
)

// Caps states what a provider guarantees. The client package reads it to
// decide how to use a provider (for example, it batches the ranges of a scan
// into vector reads only with VectorReads, and the selector of docs/design.md §7
// counts one-sided reads as free for the server only with SparesServerCPU).
type Caps struct {
	// OrderedReads: every range is read from the region in increasing
	// address order in 8-byte atomic words, as docs/design.md §3 (and the paper's
	// footnote 3) requires for the head/tail version check to catch every
	// torn node. A provider without it would need a version per cache line
	// (FaRM); Cell's node format has none, so Cell uses such a provider
	// only for extents (CRC-checked).
	OrderedReads bool
	// VectorReads: ReadV of several ranges costs one request (one round
	// trip, one remote operation), not one per range.
	VectorReads bool
	// SparesServerCPU: the server's CPU does no work per read: no thread
	// wakes up, no system call is made on the server's behalf.
	SparesServerCPU bool
	// SameHostOnly: the client must run on the server's host (same host
	// identity; see HostID).
	SameHostOnly bool
	// InOrderCompletion: ops posted by one goroutine complete in the order
	// they were posted.
	InOrderCompletion bool
	// MaxReadLen is the largest number of bytes one request (a Read, or a
	// ReadV in all) may read.
	MaxReadLen int
	// MaxSegments is the largest number of ranges in one vector read.
	MaxSegments int
}

// String lists the capabilities, e.g.
// "ordered-reads,vector-reads max-read=2MiB max-segments=64".
func (c Caps) String() string {
	var flags []string
	for _, f := range []struct {
		on   bool
		name string
	}{
		{c.OrderedReads, "ordered-reads"},
		{c.VectorReads, "vector-reads"},
		{c.SparesServerCPU, "spares-server-cpu"},
		{c.SameHostOnly, "same-host-only"},
		{c.InOrderCompletion, "in-order-completion"},
	} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	s := "none"
	if len(flags) > 0 {
		s = strings.Join(flags, ",")
	}
	return fmt.Sprintf("%s max-read=%s max-segments=%d", s, byteSize(c.MaxReadLen), c.MaxSegments)
}

// byteSize formats n bytes compactly: 2MiB, 64KiB, 1000B.
func byteSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
