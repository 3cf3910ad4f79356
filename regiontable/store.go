package regiontable

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellstore/cell/blink"
)

// Member is a live server (docs/design.md §8). The JSON form is stored under
// <prefix>/members/<ID>.
type Member struct {
	// ID is the server's ID: 1..128 bytes of [A-Za-z0-9._-].
	ID string
	// RPCAddr is where the server answers the wire protocol ("host:port").
	RPCAddr string
	// ReadAddr is the server's tcp one-sided read responder ("host:port").
	ReadAddr string
	// RaftAddr is the server's raft listener ("host:port"), shared by the
	// raft groups of all its regions: its address in their
	// configurations.
	RaftAddr string `json:",omitempty"`
	// HostID identifies the machine (rdma.HostID): a client with the same
	// host identity may read the server's regions over shared memory.
	HostID string
	// Version is the server's build version, for operators.
	Version string
	// Fabric lists the server's libfabric endpoints for one-sided reads
	// (cellserver --provider fabric), one per libfabric provider, as
	// FormatFabricEndpoints writes them (FabricEndpoints parses them);
	// empty without. A server publishes them again, with new addresses,
	// when it restarts; the fabric RemoteKeys of each region
	// (Region.ReadKey) carry the raw addresses and the memory keys
	// clients read with. A string, so that Members stay comparable.
	Fabric string `json:",omitempty"`
	// Features lists, space-separated, the formats the server's code
	// knows beyond the first release's: "versions" (docs/transactions.md
	// §2.6: a region's leader starts versions only once every replica's
	// server knows them). Empty for older servers.
	Features string `json:",omitempty"`
}

// FeatureVersions is the Features word of servers that apply version
// records.
const FeatureVersions = "versions"

// Has reports whether the member's Features list word f.
func (m Member) Has(f string) bool {
	for w := range strings.FieldsSeq(m.Features) {
		if w == f {
			return true
		}
	}
	return false
}

// FabricEndpoints returns the member's libfabric endpoints.
func (m *Member) FabricEndpoints() []FabricEndpoint {
	var eps []FabricEndpoint
	for _, f := range strings.Fields(m.Fabric) {
		p, a, _ := strings.Cut(f, "@")
		eps = append(eps, FabricEndpoint{Provider: p, Addr: a})
	}
	return eps
}

// FormatFabricEndpoints is the Member.Fabric of eps: PROVIDER@ADDRESS,
// separated by spaces ("tcp;ofi_rxm@fi_sockaddr_in://10.0.0.1:41234").
func FormatFabricEndpoints(eps []FabricEndpoint) string {
	parts := make([]string, len(eps))
	for i, e := range eps {
		parts[i] = e.Provider + "@" + e.Addr
	}
	return strings.Join(parts, " ")
}

// FabricEndpoint is one libfabric endpoint of a member.
type FabricEndpoint struct {
	// Provider is the libfabric provider ("verbs;ofi_rxm", "tcp;ofi_rxm").
	Provider string
	// Addr is the endpoint's address in libfabric's text form
	// ("fi_sockaddr_in://10.0.0.1:41234").
	Addr string
}

// Kind is what a region holds.
type Kind string

// Region kinds.
const (
	// KindData is a region of whole meganodes and the extent area their
	// leaves point to (docs/design.md §2: a leaf meganode and its data live
	// together).
	KindData Kind = "data"
)

// Region is one region's entry in the table, stored as JSON under
// <prefix>/regions/<%08d ID>.
type Region struct {
	// ID is the cluster-unique region ID, 1..blink.MaxRegionID.
	ID uint32
	// Kind is what the region holds.
	Kind Kind
	// Size is the region's size in bytes.
	Size uint64
	// Host is the ID of the member serving the region.
	Host string
	// Epoch grows with every new incarnation of the region (each start of
	// its host, later each leader change). Requests carrying an older
	// epoch are refused with wire.StatusStaleEpoch.
	Epoch uint64
	// Term is the raft term of the region's group in which Host leads it
	// (docs/design.md §9): a leader publishes itself with its term, and an entry
	// of a lower term, or of the same term and another host, is refused
	// (PutRegion). 0 in entries of hosts that publish no term.
	Term uint64 `json:",omitempty"`
	// Replicas are the members holding a replica of the region (the
	// voters of its group), Host among them, sorted.
	Replicas []string `json:",omitempty"`
	// Learners are members being added to the group: they receive its
	// log but do not vote until they caught up (raft nonvoters), sorted.
	Learners []string `json:",omitempty"`
	// Path is the region file on Host, for same-host shared-memory reads.
	Path string `json:",omitempty"`
	// ReadKey lists the region's one-sided read registrations, one per
	// provider: each element is the JSON form of an rdma.RemoteKey (whose
	// "provider" field names the provider), to be unmarshalled by the
	// reader. The table keeps them opaque so that it does not depend on
	// the rdma package.
	ReadKey []json.RawMessage `json:",omitempty"`
}

// ReadKeyFor returns the raw remote key of provider ("tcp", "shm") and
// whether the region has one.
func (r *Region) ReadKeyFor(provider string) (json.RawMessage, bool) {
	for _, k := range r.ReadKey {
		var p struct {
			Provider string `json:"provider"`
		}
		if json.Unmarshal(k, &p) == nil && p.Provider == provider {
			return k, true
		}
	}
	return nil, false
}

// State is a consistent snapshot of the table.
type State struct {
	Members []Member // sorted by ID
	Regions []Region // sorted by ID
	Root    blink.Ptr
	// Draining lists the servers marked draining (SetDraining), sorted:
	// live or not, they are to be left by every replica.
	Draining []string
	// Missing holds the missing marks (MarkMissing): how long each
	// server, absent from the members, had been missing when its mark
	// was last written.
	Missing map[string]time.Duration
	// Revision is the store's revision of the snapshot: Watch(Revision)
	// delivers every later change.
	Revision int64
}

// EventKind says what changed.
type EventKind uint8

// Event kinds.
const (
	// MemberUp: a member registered (or its entry changed).
	MemberUp EventKind = iota + 1
	// MemberDown: a member's key went (Close, or its lease expired).
	// Only Member.ID is set.
	MemberDown
	// RegionPut: a region entry was written.
	RegionPut
	// RegionDelete: a region entry was deleted. Only Region.ID is set.
	RegionDelete
	// RootSet: the root pointer changed.
	RootSet
	// DrainSet: a server was marked draining, or unmarked
	// (Event.Draining). Only Member.ID is set.
	DrainSet
	// MissingSet: a server's missing mark was written or cleared
	// (Event.Missing, Event.MissingFor). Only Member.ID is set.
	MissingSet
)

var eventKindNames = [...]string{"", "member-up", "member-down", "region-put", "region-delete", "root-set", "drain-set", "missing-set"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && k != 0 {
		return eventKindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change delivered by Watch. If Err is set the watch ended
// (the channel closes after this event); the other fields are then zero.
type Event struct {
	Kind     EventKind
	Revision int64
	Member   Member
	Region   Region
	Root     blink.Ptr
	// Draining is DrainSet's new mark.
	Draining bool
	// Missing is MissingSet's new state (false: cleared), MissingFor
	// the mark's duration.
	Missing    bool
	MissingFor time.Duration
	Err        error
}

// Registration keeps a member registered. Close it to deregister.
type Registration interface {
	// Done is closed when the registration ends: after Close, or when the
	// lease was lost (then Err wraps ErrLeaseLost).
	Done() <-chan struct{}
	// Err returns why Done was closed: nil after Close, an error wrapping
	// ErrLeaseLost otherwise.
	Err() error
	// Close revokes the member's lease: its key goes at once. It does so
	// also after the lease was lost (an etcd that restarts restores the
	// lease, and the key with it, for another TTL): a member registering
	// again after a loss closes its old registration first. Once Close
	// succeeded, closing again is a no-op; after an error it may be
	// retried.
	Close(ctx context.Context) error
}

// Leadership is a won coordinator election (Store.Campaign). It is held
// until Resign, or until the campaign's session is lost.
type Leadership interface {
	// Done is closed when the leadership ends: after Resign, when the
	// session's lease was lost (etcd unreachable for longer than the
	// lease TTL, or the lease revoked or expired; then Err wraps
	// ErrLeaseLost), or when the store was closed.
	Done() <-chan struct{}
	// Err returns why Done was closed: nil after Resign, an error
	// wrapping ErrLeaseLost otherwise.
	Err() error
	// Resign gives the leadership up: the next campaigner is elected.
	// After the leadership was lost it still withdraws the campaign's
	// key (an etcd that restarts restores it for another TTL): a server
	// campaigning again after a loss resigns first. Once Resign
	// succeeded, resigning again is a no-op; after an error it may be
	// retried.
	Resign(ctx context.Context) error
}

// Store is the region table. See the package documentation for the
// contract every implementation keeps.
type Store interface {
	// RegisterMember publishes m under a lease kept alive until the
	// registration is closed or lost. Errors: ErrInvalid, ErrMemberExists.
	RegisterMember(ctx context.Context, m Member) (Registration, error)
	// EvictMember deletes member m.ID's entry if it is exactly m (a
	// predecessor the caller knows to be dead, e.g. the process that held
	// the same RPC address on the same host before a crash), and reports
	// whether it did; the registration that made it then reports
	// ErrLeaseLost. An entry that differs from m is left alone.
	EvictMember(ctx context.Context, m Member) (bool, error)
	// Members returns the live members, sorted by ID.
	Members(ctx context.Context) ([]Member, error)
	// PutRegion writes r's entry unless it is older than the stored one
	// (ErrStaleEpoch; see Supersedes). Errors: ErrInvalid.
	PutRegion(ctx context.Context, r Region) error
	// Regions returns every region entry, sorted by ID.
	Regions(ctx context.Context) ([]Region, error)
	// Region returns region id's entry, or ErrNotFound.
	Region(ctx context.Context, id uint32) (Region, error)
	// Root returns the root meganode pointer, 0 when none is set.
	Root(ctx context.Context) (blink.Ptr, error)
	// SetRoot replaces the root pointer old (0: none) with new and returns
	// new. If the stored pointer is not old it changes nothing and returns
	// the stored pointer with ErrConflict.
	SetRoot(ctx context.Context, old, new blink.Ptr) (blink.Ptr, error)
	// AllocRegionID returns a region ID never returned before by any
	// Store over the same table. Errors: ErrExhausted.
	AllocRegionID(ctx context.Context) (uint32, error)
	// Load returns a consistent snapshot of members, regions and root.
	Load(ctx context.Context) (State, error)
	// Watch delivers the changes made after revision, in order, until ctx
	// ends (the channel then closes without an error event) or the watch
	// fails (an Event with Err, then the channel closes).
	Watch(ctx context.Context, revision int64) <-chan Event
	// SetDraining marks server id draining (on) or not: its replicas are
	// to be moved to other servers and it is given none, for a planned
	// stop (cellctl drain). The mark outlives the server's membership.
	// Errors: ErrInvalid (a bad server ID).
	SetDraining(ctx context.Context, id string, on bool) error
	// MarkMissing records that server id has been missing from the
	// members for d, as the coordinator counted it toward --dead-after,
	// so that a coordinator elected later goes on from there rather than
	// from its own start. It writes (or rewrites) the mark only if id is
	// not a member, and reports whether it did. RegisterMember clears
	// id's mark in the same step as it writes the member entry.
	// Errors: ErrInvalid (a bad server ID or d < 0).
	MarkMissing(ctx context.Context, id string, d time.Duration) (bool, error)
	// ClearMissing deletes server id's missing mark, if any (its
	// replicas were all replaced: it is no longer counted). Errors:
	// ErrInvalid (a bad server ID).
	ClearMissing(ctx context.Context, id string) error
	// Campaign joins the coordinator election as server id and blocks
	// until it is elected, returning the Leadership, or until ctx ends
	// (ctx's error, wrapped; the campaign is withdrawn). Campaigners are
	// elected one at a time in the order they joined. A campaign whose
	// session is lost while it waits fails with ErrLeaseLost. Errors:
	// ErrInvalid (a bad server ID), ErrClosed.
	Campaign(ctx context.Context, id string) (Leadership, error)
	// Coordinator returns the server ID of the elected coordinator, or
	// ErrNotFound when nobody campaigns.
	Coordinator(ctx context.Context) (string, error)
	// Close releases the store. Registrations and leaderships made
	// through it end, campaigns in progress fail.
	Close() error
}

// Key names, relative to the prefix.
const (
	membersDir  = "/members/"
	drainingDir = "/draining/"
	missingDir  = "/missing/"
	regionsDir  = "/regions/"
	rootKey     = "/root"
	idsKey      = "/ids/region"
	// coordinatorDir holds the election's keys (concurrency.Election):
	// one per campaigner, named by its session's lease, valued with its
	// server ID; the oldest one is the coordinator's.
	coordinatorDir = "/coordinator"
)

// MaxServerIDLen bounds a server ID.
const MaxServerIDLen = 128

// ValidServerID reports whether id is usable as a server ID (and so as an
// etcd key segment): 1..MaxServerIDLen bytes of [A-Za-z0-9._-], not "." or
// "..".
func ValidServerID(id string) error {
	if id == "" || len(id) > MaxServerIDLen || id == "." || id == ".." {
		return fmt.Errorf("regiontable: server ID %q must be 1..%d bytes: %w", id, MaxServerIDLen, ErrInvalid)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("regiontable: server ID %q: byte %q is not in [A-Za-z0-9._-]: %w", id, c, ErrInvalid)
		}
	}
	return nil
}

func validRegionID(id uint32) error {
	if id == 0 || id > blink.MaxRegionID {
		return fmt.Errorf("regiontable: region ID %d not in [1, %d]: %w", id, blink.MaxRegionID, ErrInvalid)
	}
	return nil
}

func validMember(m *Member) error {
	if err := ValidServerID(m.ID); err != nil {
		return err
	}
	if m.RPCAddr == "" {
		return fmt.Errorf("regiontable: member %s without an RPC address: %w", m.ID, ErrInvalid)
	}
	return nil
}

func validRegion(r *Region) error {
	if err := validRegionID(r.ID); err != nil {
		return err
	}
	if err := ValidServerID(r.Host); err != nil {
		return fmt.Errorf("regiontable: region %d host: %w", r.ID, err)
	}
	if r.Kind == "" {
		return fmt.Errorf("regiontable: region %d without a kind: %w", r.ID, ErrInvalid)
	}
	return nil
}

// Supersedes reports whether entry r may replace old, the rule PutRegion
// keeps (docs/design.md §8: "a leader publishes itself with a higher term, never
// over an equal one"): a higher term always does; the same term only for
// the same host (the leader publishing again) with an epoch at least
// old's; a lower term never. Entries without terms (both 0) compare by
// epoch alone.
func (r *Region) Supersedes(old *Region) bool {
	switch {
	case r.Term == 0 && old.Term == 0:
		return r.Epoch >= old.Epoch
	case r.Term != old.Term:
		return r.Term > old.Term
	}
	return r.Host == old.Host && r.Epoch >= old.Epoch
}

// cloneRegion copies r's ReadKey, Replicas and Learners so that callers and the
// store share no memory.
func cloneRegion(r Region) Region {
	r.Replicas = slices.Clone(r.Replicas)
	r.Learners = slices.Clone(r.Learners)
	if r.ReadKey != nil {
		keys := make([]json.RawMessage, len(r.ReadKey))
		for i, k := range r.ReadKey {
			keys[i] = slices.Clone(k)
		}
		r.ReadKey = keys
	}
	return r
}

func regionName(id uint32) string { return fmt.Sprintf("%08d", id) }

// parseRegionName parses the key segment of a region entry.
func parseRegionName(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || len(s) != 8 {
		return 0, fmt.Errorf("regiontable: region key %q: %w", s, ErrCorruption)
	}
	if err := validRegionID(uint32(v)); err != nil {
		return 0, fmt.Errorf("regiontable: region key %q: %w", s, ErrCorruption)
	}
	return uint32(v), nil
}

// FormatRoot is the stored form of a root pointer.
func FormatRoot(p blink.Ptr) string { return fmt.Sprintf("0x%016x", uint64(p)) }

// ParseRoot parses a stored root pointer: hex with 0x or decimal.
func ParseRoot(s string) (blink.Ptr, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("regiontable: root %q: %w", s, ErrCorruption)
	}
	return blink.Ptr(v), nil
}

// formatMissing is the stored form of a missing mark: its duration in
// nanoseconds, decimal.
func formatMissing(d time.Duration) string { return strconv.FormatInt(int64(d), 10) }

// decodeMissing parses the missing mark of server id stored under key.
// A bad server ID or a value that is not a decimal ≥ 0 is ErrCorruption.
func decodeMissing(key, id string, b []byte) (time.Duration, error) {
	if err := ValidServerID(id); err != nil {
		return 0, fmt.Errorf("regiontable: %s: %w: %w", key, err, ErrCorruption)
	}
	ns, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("regiontable: %s = %q: %w", key, b, ErrCorruption)
	}
	return time.Duration(ns), nil
}

// validMissing checks MarkMissing's arguments.
func validMissing(id string, d time.Duration) error {
	if err := ValidServerID(id); err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("regiontable: missing mark of %s: duration %v < 0: %w", id, d, ErrInvalid)
	}
	return nil
}

// decodeMember parses the member entry stored under key. An entry that
// does not parse, or names an invalid member, is ErrCorruption.
func decodeMember(key string, b []byte) (Member, error) {
	var m Member
	if err := json.Unmarshal(b, &m); err != nil {
		return Member{}, fmt.Errorf("regiontable: %s: %w: %w", key, err, ErrCorruption)
	}
	if err := validMember(&m); err != nil {
		return Member{}, fmt.Errorf("regiontable: %s: %w: %w", key, err, ErrCorruption)
	}
	return m, nil
}

// decodeRegion parses the region entry stored under key (whose last
// segment is the region's name). An entry that does not parse, names an
// invalid region ID, or another region than its key, is ErrCorruption.
func decodeRegion(key string, b []byte) (Region, error) {
	var r Region
	if err := json.Unmarshal(b, &r); err != nil {
		return Region{}, fmt.Errorf("regiontable: %s: %w: %w", key, err, ErrCorruption)
	}
	if err := validRegionID(r.ID); err != nil {
		return Region{}, fmt.Errorf("regiontable: %s: %w: %w", key, err, ErrCorruption)
	}
	name := key[strings.LastIndexByte(key, '/')+1:]
	if id, err := parseRegionName(name); err != nil || id != r.ID {
		return Region{}, fmt.Errorf("regiontable: %s holds region %d: %w", key, r.ID, ErrCorruption)
	}
	return r, nil
}
