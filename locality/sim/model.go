package sim

import (
	"fmt"
	"time"

	"github.com/cellstore/cell/locality"
)

// Defaults of Model: the paper's hardware (§4.2, Table 1).
const (
	DefaultServers  = 4
	DefaultCores    = 1
	DefaultCoreRate = 160_000   // server-side meganode searches/s per core ("Cell performs 158K server-side searches/sec")
	DefaultNICRate  = 1_040_000 // 1 KiB one-sided reads/s per NIC ("1.04M ops/sec over a 1GB area")
	DefaultRTT      = 15 * time.Microsecond
	DefaultM        = 5 // reads per client-side traversal of a 64 MiB meganode of 1 KiB nodes
	DefaultJitter   = 0.2
	DefaultSeed     = 1
)

// Model is the queueing model of a cluster, per server. The zero value of
// every field means its default; see doc.go for the model itself.
type Model struct {
	// Servers is the number of servers; each search goes to one chosen
	// uniformly at random. Default 4 (the paper's Table 2 and Fig. 7).
	Servers int `json:"servers"`
	// Cores is the number of CPU cores per server that run server-side
	// searches, each a server of the shared FIFO CPU queue. Default 1.
	Cores int `json:"cores"`
	// CoreRate is the server-side searches per second one core completes:
	// the mean CPU service time is 1/CoreRate. Default 160,000.
	CoreRate float64 `json:"core_rate"`
	// NICRate is the one-sided reads per second a server's NIC serves: the
	// mean NIC service time of a read is 1/NICRate. Default 1,040,000.
	NICRate float64 `json:"nic_rate"`
	// RTT is the network round trip, without any service time, of both an
	// RPC and a one-sided read. Default 15µs.
	RTT time.Duration `json:"rtt_ns"`
	// NetJitter is the mean of an exponentially distributed delay added to
	// every round trip (on the reply's way back, so that requests still
	// reach the servers in the order they were sent), modelling the
	// variation of network latency around its minimum. Default 0: every
	// round trip takes exactly RTT plus queueing and service.
	NetJitter time.Duration `json:"net_jitter_ns"`
	// M is the number of one-sided reads of a client-side meganode
	// traversal (the meganode's height); clients report it to their
	// selector as the height of every meganode. Default 5.
	M int `json:"m"`
	// Jitter spreads service times uniformly over mean·[1−Jitter,
	// 1+Jitter]. Default 0.2; negative means fixed service times.
	Jitter float64 `json:"jitter"`
	// Seed makes the run reproducible: the same Model, load and seed give
	// the same result. Default 1.
	Seed uint64 `json:"seed"`
	// Selector is the template of every client's selector options (Window,
	// OutlierK, Explore, ...). Mode, Clock and Seed are set by the
	// simulation.
	Selector locality.Options `json:"-"`
}

// EnsureDefaults fills zero fields with their defaults.
func (m *Model) EnsureDefaults() {
	if m.Servers == 0 {
		m.Servers = DefaultServers
	}
	if m.Cores == 0 {
		m.Cores = DefaultCores
	}
	if m.CoreRate == 0 {
		m.CoreRate = DefaultCoreRate
	}
	if m.NICRate == 0 {
		m.NICRate = DefaultNICRate
	}
	if m.RTT == 0 {
		m.RTT = DefaultRTT
	}
	if m.M == 0 {
		m.M = DefaultM
	}
	if m.Jitter == 0 {
		m.Jitter = DefaultJitter
	}
	if m.Seed == 0 {
		m.Seed = DefaultSeed
	}
}

// Validate reports whether the model (after EnsureDefaults) can be run.
func (m *Model) Validate() error {
	switch {
	case m.Servers < 1 || m.Servers > 1024:
		return fmt.Errorf("%w: servers %d not in [1, 1024]", ErrInvalidParams, m.Servers)
	case m.Cores < 1 || m.Cores > 1024:
		return fmt.Errorf("%w: cores %d not in [1, 1024]", ErrInvalidParams, m.Cores)
	case !(m.CoreRate >= 1 && m.CoreRate <= 1e10):
		return fmt.Errorf("%w: core rate %v not in [1, 1e10]/s", ErrInvalidParams, m.CoreRate)
	case !(m.NICRate >= 1 && m.NICRate <= 1e10):
		return fmt.Errorf("%w: NIC rate %v not in [1, 1e10]/s", ErrInvalidParams, m.NICRate)
	case m.RTT < 2 || m.RTT > time.Second:
		return fmt.Errorf("%w: RTT %v not in [2ns, 1s]", ErrInvalidParams, m.RTT)
	case m.M < 1 || m.M > 64:
		return fmt.Errorf("%w: m %d not in [1, 64]", ErrInvalidParams, m.M)
	case m.NetJitter < 0 || m.NetJitter > time.Second:
		return fmt.Errorf("%w: network jitter %v not in [0, 1s]", ErrInvalidParams, m.NetJitter)
	case !(m.Jitter < 1):
		return fmt.Errorf("%w: jitter %v must be < 1", ErrInvalidParams, m.Jitter)
	}
	opts := m.Selector
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: selector: %w", ErrInvalidParams, err)
	}
	return nil
}

// ServerCapacity is the server-only throughput bound of the cluster:
// Servers·Cores·CoreRate searches/s.
func (m *Model) ServerCapacity() float64 {
	return float64(m.Servers*m.Cores) * m.CoreRate
}

// ClientCapacity is the client-only throughput bound of the cluster:
// Servers·NICRate/M searches/s.
func (m *Model) ClientCapacity() float64 {
	return float64(m.Servers) * m.NICRate / float64(m.M)
}
