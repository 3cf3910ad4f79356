package wire

import (
	"fmt"

	"github.com/cellstore/cell/blink"
)

// MetadataRequest (OpMetadata) asks a server to describe itself.
//
//	[flags u8: bit0 want meganodes, bit1 one region][region u32]
//
// Region is 0 unless OneRegion.
type MetadataRequest struct {
	WantMeganodes bool   // list the meganodes, not only the regions
	OneRegion     bool   // describe only region Region
	Region        uint32 // with OneRegion
}

const (
	metaWantMeganodes = 1 << 0
	metaOneRegion     = 1 << 1
)

func (m *MetadataRequest) AppendTo(b []byte) []byte {
	b = appendU8(b, bit(m.WantMeganodes, metaWantMeganodes)|bit(m.OneRegion, metaOneRegion))
	return appendU32(b, m.Region)
}

func (m *MetadataRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("metadata request")
}

func (m *MetadataRequest) decode(d *decoder) {
	f := d.flags(metaWantMeganodes|metaOneRegion, "metadata flags")
	m.WantMeganodes, m.OneRegion = f&metaWantMeganodes != 0, f&metaOneRegion != 0
	m.Region = d.u32("region")
	if !m.OneRegion && m.Region != 0 {
		d.failf("metadata request: region without one-region flag")
	}
}

// MetadataReply answers OpMetadata.
//
//	[server bytes][node size u32][meganode size u64][root ptr u64]
//	[hints: workers u16, queued u32, queue ns u32, service ns u32]
//	[region count u32][regions][meganode count u32][meganodes]
//
// Decoding allocates its strings (metadata is rare); key bytes alias the
// body and the lists reuse the receiver's capacity.
type MetadataReply struct {
	Server       string    // the server's node name
	NodeSize     uint32    // bytes per node (blink.MaxKeySize(NodeSize) bounds keys)
	MeganodeSize uint64    // bytes per meganode
	Root         blink.Ptr // the root meganode as this server knows it, or nil
	Hints        SelectorHints
	Regions      []RegionInfo
	Meganodes    []MeganodeStats
}

// SelectorHints help the client's selector (locality) before it has
// measured anything, and let it compare its estimates with the server's.
//
//	[workers u16][queued u32][queue ns u32][service ns u32]
type SelectorHints struct {
	Workers      uint16 // worker goroutines running tree work (--cores)
	Queued       uint32 // requests waiting for a worker now
	QueueNanos   uint32 // recent mean queueing time
	ServiceNanos uint32 // recent mean service time of a search hop
}

// RegionInfo describes a region the server hosts.
//
//	[id u32][epoch u64][size u64][remote key u64]
//	[host bytes][rpc addr bytes][read addr bytes][path bytes]
//	[raft role u8][term u64][last index u64][commit index u64][applied index u64]
type RegionInfo struct {
	ID    uint32
	Epoch uint64
	Size  uint64 // bytes
	// RemoteKey is the key returned by the one-sided read provider's
	// Register, to present with every one-sided read.
	RemoteKey uint64
	// Host identifies the machine, so a client can tell it may map Path.
	Host string
	// RPCAddr is where this protocol is served ("host:port").
	RPCAddr string
	// ReadAddr is the one-sided read endpoint, in the provider's syntax.
	ReadAddr string
	// Path is the region file, for the same-host shared-memory provider.
	Path string
	// Raft is the server's view of the region's raft group.
	Raft RaftInfo
}

// RaftInfo is a server's view of a region's raft group (docs/design.md §9): its
// role in it, its current term, and its log positions: the last entry in
// its log, the last known committed and the last applied.
type RaftInfo struct {
	Role                       RaftRole
	Term                       uint64
	LastIndex, Commit, Applied uint64
}

// RaftRole is a replica's role in its raft group.
type RaftRole uint8

// Raft roles.
const (
	RoleNone RaftRole = iota // no group (a server without one)
	RoleFollower
	RoleCandidate
	RoleLeader
	RoleShutdown
)

var raftRoleNames = [...]string{"none", "follower", "candidate", "leader", "shutdown"}

// MarshalText names the role (JSON output shows "leader", not 3).
func (r RaftRole) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses a role's name.
func (r *RaftRole) UnmarshalText(b []byte) error {
	for i, n := range raftRoleNames {
		if n == string(b) {
			*r = RaftRole(i)
			return nil
		}
	}
	return fmt.Errorf("wire: raft role %q", b)
}

func (r RaftRole) String() string {
	if int(r) < len(raftRoleNames) {
		return raftRoleNames[r]
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// regionInfoMin is the smallest encoded RegionInfo.
const regionInfoMin = 4 + 8 + 8 + 8 + 4*4 + 1 + 4*8

func (r *RegionInfo) appendTo(b []byte) []byte {
	b = appendU32(b, r.ID)
	b = appendU64(b, r.Epoch)
	b = appendU64(b, r.Size)
	b = appendU64(b, r.RemoteKey)
	b = appendString(b, r.Host)
	b = appendString(b, r.RPCAddr)
	b = appendString(b, r.ReadAddr)
	b = appendString(b, r.Path)
	b = appendU8(b, uint8(r.Raft.Role))
	b = appendU64(b, r.Raft.Term)
	b = appendU64(b, r.Raft.LastIndex)
	b = appendU64(b, r.Raft.Commit)
	return appendU64(b, r.Raft.Applied)
}

func (r *RegionInfo) decode(d *decoder) {
	r.ID = d.u32("region id")
	r.Epoch = d.u64("region epoch")
	r.Size = d.u64("region size")
	r.RemoteKey = d.u64("remote key")
	r.Host = d.string("host")
	r.RPCAddr = d.string("rpc addr")
	r.ReadAddr = d.string("read addr")
	r.Path = d.string("path")
	r.Raft.Role = RaftRole(d.u8("raft role"))
	r.Raft.Term = d.u64("raft term")
	r.Raft.LastIndex = d.u64("raft last index")
	r.Raft.Commit = d.u64("raft commit index")
	r.Raft.Applied = d.u64("raft applied index")
	if r.Raft.Role > RoleShutdown {
		d.failf("raft role %d", r.Raft.Role)
	}
}

// MeganodeStats is a Meganode with its fill (nodes in use out of its
// capacity, header node included), its right link and its part in a
// meganode split in progress.
//
//	[meganode][used u32][capacity u32][right ptr u64]
//	[flags u8: bit0 split source, bit1 split target, bit2 split linked]
//
// Right is the meganode's right link at its global level (blink.Tree.Right:
// a node of the next meganode of the level, not necessarily its header),
// nil at the right end of the key space. A split source is the meganode
// being split (its keys from the split key up are frozen); SplitLinked says
// its boundary already links to the new meganode, so its max is already
// the split key. A split target is the new meganode being filled; it is
// not reachable from its parent yet. At most one of source and target is
// set, and linked only with source.
type MeganodeStats struct {
	Meganode
	UsedNodes   uint32
	Capacity    uint32
	Right       blink.Ptr
	SplitSource bool
	SplitTarget bool
	SplitLinked bool
}

const (
	megaSplitSource = 1 << 0
	megaSplitTarget = 1 << 1
	megaSplitLinked = 1 << 2
	megaKnownFlags  = megaSplitSource | megaSplitTarget | megaSplitLinked
)

// meganodeStatsMin is the smallest encoded MeganodeStats.
const meganodeStatsMin = 8 + 2 + 2 + 1 + 4 + 4 + 4 + 4 + 8 + 1

// MeganodeStatsSize is the encoded size of a MeganodeStats whose range
// bounds have minLen and maxLen bytes; servers use it to keep metadata
// replies under the frame limit.
func MeganodeStatsSize(minLen, maxLen int) int { return meganodeStatsMin + minLen + maxLen }

func (m *MeganodeStats) appendTo(b []byte) []byte {
	b = m.Meganode.appendTo(b)
	b = appendU32(b, m.UsedNodes)
	b = appendU32(b, m.Capacity)
	b = appendU64(b, uint64(m.Right))
	return appendU8(b, bit(m.SplitSource, megaSplitSource)|bit(m.SplitTarget, megaSplitTarget)|bit(m.SplitLinked, megaSplitLinked))
}

func (m *MeganodeStats) decode(d *decoder) {
	m.Meganode.decode(d)
	m.UsedNodes = d.u32("used nodes")
	m.Capacity = d.u32("capacity")
	m.Right = blink.Ptr(d.u64("right ptr"))
	f := d.flags(megaKnownFlags, "meganode split flags")
	m.SplitSource, m.SplitTarget, m.SplitLinked = f&megaSplitSource != 0, f&megaSplitTarget != 0, f&megaSplitLinked != 0
	if m.SplitSource && m.SplitTarget || m.SplitLinked && !m.SplitSource {
		d.failf("meganode split flags %#02x: source and target, or linked without source", f)
	}
}

func (m *MetadataReply) AppendTo(b []byte) []byte {
	b = appendString(b, m.Server)
	b = appendU32(b, m.NodeSize)
	b = appendU64(b, m.MeganodeSize)
	b = appendU64(b, uint64(m.Root))
	b = appendU16(b, m.Hints.Workers)
	b = appendU32(b, m.Hints.Queued)
	b = appendU32(b, m.Hints.QueueNanos)
	b = appendU32(b, m.Hints.ServiceNanos)
	b = appendU32(b, uint32(len(m.Regions)))
	for i := range m.Regions {
		b = m.Regions[i].appendTo(b)
	}
	b = appendU32(b, uint32(len(m.Meganodes)))
	for i := range m.Meganodes {
		b = m.Meganodes[i].appendTo(b)
	}
	return b
}

func (m *MetadataReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("metadata reply")
}

func (m *MetadataReply) decode(d *decoder) {
	regions, megas := m.Regions[:0], m.Meganodes[:0]
	*m = MetadataReply{}
	m.Server = d.string("server")
	m.NodeSize = d.u32("node size")
	m.MeganodeSize = d.u64("meganode size")
	m.Root = blink.Ptr(d.u64("root"))
	m.Hints.Workers = d.u16("workers")
	m.Hints.Queued = d.u32("queued")
	m.Hints.QueueNanos = d.u32("queue ns")
	m.Hints.ServiceNanos = d.u32("service ns")
	n := d.count(regionInfoMin, "region count")
	for i := 0; i < n && d.err == nil; i++ {
		regions = append(regions, RegionInfo{})
		regions[i].decode(d)
	}
	n = d.count(meganodeStatsMin, "meganode count")
	for i := 0; i < n && d.err == nil; i++ {
		megas = append(megas, MeganodeStats{})
		megas[i].decode(d)
	}
	m.Regions, m.Meganodes = regions, megas
}
