package raftmux

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
)

// Reject is why the accept side of a Mux turned a connection away.
type Reject uint8

const (
	// RejectOverload: MaxPendingHandshakes headers were being awaited; the
	// connection was closed unread.
	RejectOverload Reject = iota
	// RejectTimeout: no complete header within HandshakeTimeout.
	RejectTimeout
	// RejectIO: the peer closed, or a read or the reply's write failed,
	// before the handshake completed.
	RejectIO
	// RejectBadMagic: the first 16 bytes do not start with "CRFT"; closed
	// without a reply.
	RejectBadMagic
	// RejectBadHeader: wrong checksum or non-zero reserved bytes.
	RejectBadHeader
	// RejectBadVersion: a well-formed header of another version.
	RejectBadVersion
	// RejectUnknownRegion: no open Group for the header's region.
	RejectUnknownRegion
	// RejectBusy: the region's accept backlog was full.
	RejectBusy
	// RejectClosed: the Group or the Mux closed during the handshake.
	RejectClosed
	// RejectTLS: the TLS handshake failed (a plain peer, a certificate
	// that is not trusted, expired, or missing where one is required).
	RejectTLS
	// RejectNotServer: the TLS peer's verified certificate does not have
	// the server role (or it sent none); replied statusNotServer.
	RejectNotServer

	numRejects
)

func (r Reject) String() string {
	switch r {
	case RejectOverload:
		return "overload"
	case RejectTimeout:
		return "timeout"
	case RejectIO:
		return "io"
	case RejectBadMagic:
		return "bad-magic"
	case RejectBadHeader:
		return "bad-header"
	case RejectBadVersion:
		return "bad-version"
	case RejectUnknownRegion:
		return "unknown-region"
	case RejectBusy:
		return "busy"
	case RejectClosed:
		return "closed"
	case RejectTLS:
		return "tls"
	case RejectNotServer:
		return "not-server"
	default:
		return fmt.Sprintf("reject(%d)", uint8(r))
	}
}

// Stats are a Mux's counters since Listen. Counts per region include
// groups since closed.
type Stats struct {
	// Accepted counts, per region, the connections handed to the region's
	// Accept.
	Accepted map[uint32]uint64
	// Dialed counts, per region, the Dials that completed their handshake.
	Dialed map[uint32]uint64
	// DialFailed counts, per region, the Dials that returned an error.
	DialFailed map[uint32]uint64
	// Rejected counts the connections the accept side turned away, by
	// reason; reasons that never happened are absent.
	Rejected map[Reject]uint64
	// Pending is the number of handshakes in progress on the accept side
	// (at most MaxPendingHandshakes; a handshake stops counting when its
	// goroutine is done with it).
	Pending int
	// Open is the number of connections of the mux's groups (accepted or
	// dialed) that are not closed yet.
	Open int
}

// counters are a Mux's Stats as they are kept.
type counters struct {
	rejected [numRejects]atomic.Uint64
	open     atomic.Int64

	mu struct {
		sync.Mutex
		accepted, dialed, dialFailed map[uint32]uint64
	}
}

func newCounters() *counters {
	c := &counters{}
	c.mu.accepted = map[uint32]uint64{}
	c.mu.dialed = map[uint32]uint64{}
	c.mu.dialFailed = map[uint32]uint64{}
	return c
}

func (c *counters) add(m map[uint32]uint64, region uint32) {
	c.mu.Lock()
	m[region]++
	c.mu.Unlock()
}

func (c *counters) stats() Stats {
	s := Stats{Rejected: map[Reject]uint64{}, Open: int(c.open.Load())}
	for r := range numRejects {
		if n := c.rejected[r].Load(); n > 0 {
			s.Rejected[r] = n
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.Accepted = maps.Clone(c.mu.accepted)
	s.Dialed = maps.Clone(c.mu.dialed)
	s.DialFailed = maps.Clone(c.mu.dialFailed)
	return s
}
