package wire

import (
	"bytes"
	"fmt"

	"github.com/cellstore/cell/blink"
)

// Message is a request or reply body. The layouts below are part of the
// wire format (see codec.go for the building blocks; "bytes" is a u32
// length and the bytes).
//
// AppendTo appends the encoding to dst and returns the extended slice; it
// does not allocate when dst has room. Decode replaces the receiver's
// contents with the decoding of body, without allocating except where a
// type says so: byte slices alias body (so they are only valid while body
// is, see Frame), and list fields reuse the receiver's capacity. Decode
// errors wrap ErrMalformed.
type Message interface {
	AppendTo(dst []byte) []byte
	Decode(body []byte) error
}

var (
	_ Message = (*SearchRequest)(nil)
	_ Message = (*SearchReply)(nil)
	_ Message = (*GetRequest)(nil)
	_ Message = (*GetReply)(nil)
	_ Message = (*ContainsReply)(nil)
	_ Message = (*PutRequest)(nil)
	_ Message = (*DeleteRequest)(nil)
	_ Message = (*RangeRequest)(nil)
	_ Message = (*RangeReply)(nil)
	_ Message = (*NodeDumpRequest)(nil)
	_ Message = (*NodeDumpReply)(nil)
	_ Message = (*MetadataRequest)(nil)
	_ Message = (*MetadataReply)(nil)
	_ Message = (*CheckRequest)(nil)
	_ Message = (*CheckReply)(nil)
	_ Message = (*ErrorReply)(nil)
	_ Message = (*WriteReply)(nil)
	_ Message = (*CondRequest)(nil)
	_ Message = (*CondReply)(nil)
	_ Message = (*TxnRequest)(nil)
	_ Message = (*TxnReply)(nil)
)

// KeyRange is a meganode's key range [Min, Max). MinInf and MaxInf stand
// for -inf and +inf; Min or Max is then empty.
//
//	[flags u8: bit0 min -inf, bit1 max +inf][min bytes][max bytes]
type KeyRange struct {
	Min, Max       []byte
	MinInf, MaxInf bool
}

const (
	rangeMinInf = 1 << 0
	rangeMaxInf = 1 << 1
)

// Contains reports whether Min <= key < Max.
func (r *KeyRange) Contains(key []byte) bool {
	return (r.MinInf || bytes.Compare(r.Min, key) <= 0) && (r.MaxInf || bytes.Compare(key, r.Max) < 0)
}

// String formats the range as [min, max) with -inf/+inf.
func (r KeyRange) String() string {
	lo, hi := "-inf", "+inf"
	if !r.MinInf {
		lo = fmt.Sprintf("%q", r.Min)
	}
	if !r.MaxInf {
		hi = fmt.Sprintf("%q", r.Max)
	}
	return "[" + lo + ", " + hi + ")"
}

func (r *KeyRange) appendTo(b []byte) []byte {
	b = appendU8(b, bit(r.MinInf, rangeMinInf)|bit(r.MaxInf, rangeMaxInf))
	b = appendBytes(b, infKey(r.Min, r.MinInf))
	return appendBytes(b, infKey(r.Max, r.MaxInf))
}

func infKey(k []byte, inf bool) []byte {
	if inf {
		return nil
	}
	return k
}

func (r *KeyRange) decode(d *decoder) {
	f := d.flags(rangeMinInf|rangeMaxInf, "key range flags")
	r.MinInf, r.MaxInf = f&rangeMinInf != 0, f&rangeMaxInf != 0
	r.Min = d.bytes("range min")
	r.Max = d.bytes("range max")
	if (r.MinInf && r.Min != nil) || (r.MaxInf && r.Max != nil) {
		d.failf("key range: key stored beside an infinity flag")
	}
}

// Meganode describes one meganode as its header node says: where it is,
// its global level (0 = leaf meganode), its local tree height in nodes
// and its key range. The client's path cache keeps these.
//
//	[ptr u64][level u16][height u16][key range]
type Meganode struct {
	Ptr    blink.Ptr
	Level  uint16
	Height uint16
	Range  KeyRange
}

func (m *Meganode) appendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU16(b, m.Level)
	b = appendU16(b, m.Height)
	return m.Range.appendTo(b)
}

func (m *Meganode) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("meganode ptr"))
	m.Level = d.u16("meganode level")
	m.Height = d.u16("meganode height")
	m.Range.decode(d)
}

// Every key request starts with a target: the meganode to start at (0:
// the root, or wherever the server finds the key) and the epoch of its
// region as the client knows it (0: do not check; otherwise a mismatch is
// answered with StatusStaleEpoch).
//
//	[ptr u64][epoch u64]

// SearchRequest (OpSearch) asks for one meganode hop of a server-side
// search for Key, starting at meganode Ptr.
//
//	[ptr u64][epoch u64][flags u8: bit0 want value, bit1 want version][key bytes]
type SearchRequest struct {
	Ptr       blink.Ptr
	Epoch     uint64
	WantValue bool // in a leaf meganode, return the value too
	// WantVersion: in a leaf meganode, return the key's version too (a
	// server that has none for it, a region not yet versioned, answers
	// without: SearchReply.HasVersion false).
	WantVersion bool
	Key         []byte
}

const (
	searchWantValue   = 1 << 0
	searchWantVersion = 1 << 1
)

func (m *SearchRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	b = appendU8(b, bit(m.WantValue, searchWantValue)|bit(m.WantVersion, searchWantVersion))
	return appendBytes(b, m.Key)
}

func (m *SearchRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("search request")
}

func (m *SearchRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	f := d.flags(searchWantValue|searchWantVersion, "search flags")
	m.WantValue, m.WantVersion = f&searchWantValue != 0, f&searchWantVersion != 0
	m.Key = d.bytes("key")
}

// SearchKind says how a server-side search hop ended.
type SearchKind uint8

const (
	// SearchLeaf: the meganode is a leaf meganode; the reply holds the
	// result for the key.
	SearchLeaf SearchKind = 1
	// SearchNext: continue at SearchReply.Next.
	SearchNext SearchKind = 2
)

func (k SearchKind) String() string {
	switch k {
	case SearchLeaf:
		return "leaf"
	case SearchNext:
		return "next"
	}
	return fmt.Sprintf("SearchKind(%d)", uint8(k))
}

// SearchReply answers OpSearch. Meganode describes the meganode the search
// ended in, read from its header: the one at the request's Ptr, or one to
// its right if the server followed meganode right links.
//
//	[kind u8][meganode]
//	kind leaf: [flags u8: bit0 found, bit1 has value, bit2 has version]
//	           [value bytes, if has value][version u64, if has version]
//	kind next: [next ptr u64]
//
// A version is sent only when the request asked for it (an older client
// never sees bit2).
type SearchReply struct {
	Kind     SearchKind
	Meganode Meganode
	// Next (SearchNext) is the meganode to search next: a child one level
	// down, or a right sibling on the same level. It may be on another
	// server.
	Next blink.Ptr
	// Found (SearchLeaf) reports whether the key is present; HasValue
	// whether Value was returned (requested and found).
	Found    bool
	HasValue bool
	Value    []byte
	// HasVersion: Version is the found key's version
	// (docs/transactions.md §2), requested and known.
	HasVersion bool
	Version    uint64
}

const (
	searchFound      = 1 << 0
	searchHasValue   = 1 << 1
	searchHasVersion = 1 << 2
)

func (m *SearchReply) AppendTo(b []byte) []byte {
	b = appendU8(b, uint8(m.Kind))
	b = m.Meganode.appendTo(b)
	switch m.Kind {
	case SearchLeaf:
		b = appendU8(b, bit(m.Found, searchFound)|bit(m.HasValue, searchHasValue)|bit(m.HasVersion, searchHasVersion))
		if m.HasValue {
			b = appendBytes(b, m.Value)
		}
		if m.HasVersion {
			b = appendU64(b, m.Version)
		}
	case SearchNext:
		b = appendU64(b, uint64(m.Next))
	}
	return b
}

func (m *SearchReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("search reply")
}

func (m *SearchReply) decode(d *decoder) {
	*m = SearchReply{Kind: SearchKind(d.u8("search kind"))}
	m.Meganode.decode(d)
	switch m.Kind {
	case SearchLeaf:
		f := d.flags(searchFound|searchHasValue|searchHasVersion, "search result flags")
		m.Found, m.HasValue, m.HasVersion = f&searchFound != 0, f&searchHasValue != 0, f&searchHasVersion != 0
		if (m.HasValue || m.HasVersion) && !m.Found {
			d.failf("search reply: value or version without found")
		}
		if m.HasValue {
			m.Value = d.bytes("value")
		}
		if m.HasVersion {
			m.Version = d.u64("version")
		}
	case SearchNext:
		m.Next = blink.Ptr(d.u64("next ptr"))
	default:
		d.failf("search reply: kind %d", uint8(m.Kind))
	}
}

// GetRequest is the body of OpGet and OpContains.
//
//	[ptr u64][epoch u64][key bytes]
type GetRequest struct {
	Ptr   blink.Ptr
	Epoch uint64
	Key   []byte
}

func (m *GetRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	return appendBytes(b, m.Key)
}

func (m *GetRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("get request")
}

func (m *GetRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	m.Key = d.bytes("key")
}

// GetReply answers OpGet; a missing key is StatusNotFound, not a reply.
//
//	[value bytes]
type GetReply struct {
	Value []byte
}

func (m *GetReply) AppendTo(b []byte) []byte { return appendBytes(b, m.Value) }

func (m *GetReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("get reply")
}

func (m *GetReply) decode(d *decoder) {
	m.Value = d.bytes("value")
}

// ContainsReply answers OpContains.
//
//	[found u8]
type ContainsReply struct {
	Found bool
}

func (m *ContainsReply) AppendTo(b []byte) []byte { return appendBool(b, m.Found) }

func (m *ContainsReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("contains reply")
}

func (m *ContainsReply) decode(d *decoder) {
	m.Found = d.bool("found")
}

// Writes carry the client's id and a per-client sequence number so that a
// region applies each write at most once (docs/design.md §9); zero ClientID means
// no deduplication. The reply to a write is a WriteReply (an empty body
// from a server that predates versions).

// WriteReply answers OpPut and OpDelete: the version the put gave its key
// (docs/transactions.md §2.2), 0 for a delete and in a region whose keys
// have no versions yet.
//
//	[version u64]
type WriteReply struct {
	Version uint64
}

func (m *WriteReply) AppendTo(b []byte) []byte { return appendU64(b, m.Version) }

// Decode accepts an empty body as version 0 (a server before versions).
func (m *WriteReply) Decode(body []byte) error {
	*m = WriteReply{}
	if len(body) == 0 {
		return nil
	}
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("write reply")
}

func (m *WriteReply) decode(d *decoder) {
	m.Version = d.u64("version")
}

// PutRequest (OpPut) inserts or replaces Key.
//
//	[ptr u64][epoch u64][client id u64][seq u64][key bytes][value bytes]
type PutRequest struct {
	Ptr      blink.Ptr
	Epoch    uint64
	ClientID uint64
	Seq      uint64
	Key      []byte
	Value    []byte
}

func (m *PutRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	b = appendU64(b, m.ClientID)
	b = appendU64(b, m.Seq)
	b = appendBytes(b, m.Key)
	return appendBytes(b, m.Value)
}

func (m *PutRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("put request")
}

func (m *PutRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	m.ClientID = d.u64("client id")
	m.Seq = d.u64("seq")
	m.Key = d.bytes("key")
	m.Value = d.bytes("value")
}

// DeleteRequest (OpDelete) removes Key; a missing key is StatusNotFound.
//
//	[ptr u64][epoch u64][client id u64][seq u64][key bytes]
type DeleteRequest struct {
	Ptr      blink.Ptr
	Epoch    uint64
	ClientID uint64
	Seq      uint64
	Key      []byte
}

func (m *DeleteRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	b = appendU64(b, m.ClientID)
	b = appendU64(b, m.Seq)
	return appendBytes(b, m.Key)
}

func (m *DeleteRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("delete request")
}

func (m *DeleteRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	m.ClientID = d.u64("client id")
	m.Seq = d.u64("seq")
	m.Key = d.bytes("key")
}

// RangeRequest (OpRange) scans the keys k with Start <= k < End, in
// ascending order, or descending if Reverse, starting in meganode Ptr.
//
//	[ptr u64][epoch u64]
//	[flags u8: bit0 start unbounded, bit1 end unbounded, bit2 reverse, bit3 keys only,
//	           bit4 with versions]
//	[limit u32][start bytes][end bytes]
type RangeRequest struct {
	Ptr   blink.Ptr
	Epoch uint64
	// Start (inclusive) and End (exclusive); an unbounded side is empty.
	Start, End                   []byte
	StartUnbounded, EndUnbounded bool
	Reverse                      bool
	KeysOnly                     bool   // reply values are empty
	Limit                        uint32 // most pairs to return; 0: server's choice
	// WithVersions asks for each pair's version (RangeReply.Versions).
	WithVersions bool
}

const (
	rangeStartUnbounded = 1 << 0
	rangeEndUnbounded   = 1 << 1
	rangeReverse        = 1 << 2
	rangeKeysOnly       = 1 << 3
	rangeWithVersions   = 1 << 4
	rangeKnownFlags     = rangeStartUnbounded | rangeEndUnbounded | rangeReverse | rangeKeysOnly | rangeWithVersions
)

func (m *RangeRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	b = appendU8(b, bit(m.StartUnbounded, rangeStartUnbounded)|bit(m.EndUnbounded, rangeEndUnbounded)|
		bit(m.Reverse, rangeReverse)|bit(m.KeysOnly, rangeKeysOnly)|bit(m.WithVersions, rangeWithVersions))
	b = appendU32(b, m.Limit)
	b = appendBytes(b, infKey(m.Start, m.StartUnbounded))
	return appendBytes(b, infKey(m.End, m.EndUnbounded))
}

func (m *RangeRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("range request")
}

func (m *RangeRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	f := d.flags(rangeKnownFlags, "range flags")
	m.StartUnbounded, m.EndUnbounded = f&rangeStartUnbounded != 0, f&rangeEndUnbounded != 0
	m.Reverse, m.KeysOnly = f&rangeReverse != 0, f&rangeKeysOnly != 0
	m.WithVersions = f&rangeWithVersions != 0
	m.Limit = d.u32("limit")
	m.Start = d.bytes("start")
	m.End = d.bytes("end")
	if (m.StartUnbounded && m.Start != nil) || (m.EndUnbounded && m.End != nil) {
		d.failf("range request: key stored beside an unbounded flag")
	}
}

// KV is a key and its value, and its version when the reply has them.
type KV struct {
	Key, Value []byte
	Version    uint64
}

// RangePairOverhead is the encoded size of a RangeReply pair beyond its
// key and value bytes; servers use it to keep replies under the frame
// limit.
const RangePairOverhead = 8

// RangeReply answers OpRange: the pairs found, in the requested order, and
// whether more may follow. If More, continue with the same request but
// Start = Resume (forward) or End = Resume (reverse), at meganode Next
// when it is not nil. A server stops early at a meganode boundary, at the
// request's limit, or to keep the reply under the maximum frame size.
//
//	[count u32][count × ([key bytes][value bytes])]
//	[flags u8: bit0 more, bit1 versions][resume bytes][next ptr u64]
//	[count × version u64, if versions]
//
// Versions are sent only when the request asked for them
// (RangeRequest.WithVersions) and the region has them.
//
// Both Resume and Next are empty unless More. An empty Resume with More
// (and Next set) means the scan found nothing yet from an unbounded side:
// continue at Next with that side still unbounded.
type RangeReply struct {
	Pairs  []KV
	More   bool
	Resume []byte
	Next   blink.Ptr
	// Versions: every pair's Version is its key's version.
	Versions bool
}

const (
	rangeMore     = 1 << 0
	rangeVersions = 1 << 1
)

// RangeVersionOverhead is what a pair's version adds to a RangeReply.
const RangeVersionOverhead = 8

func (m *RangeReply) AppendTo(b []byte) []byte {
	b = appendU32(b, uint32(len(m.Pairs)))
	for i := range m.Pairs {
		b = appendBytes(b, m.Pairs[i].Key)
		b = appendBytes(b, m.Pairs[i].Value)
	}
	b = appendU8(b, bit(m.More, rangeMore)|bit(m.Versions, rangeVersions))
	b = appendBytes(b, m.Resume)
	b = appendU64(b, uint64(m.Next))
	if m.Versions {
		for i := range m.Pairs {
			b = appendU64(b, m.Pairs[i].Version)
		}
	}
	return b
}

// Decode reuses the capacity of m.Pairs; it allocates only when the reply
// has more pairs than that.
func (m *RangeReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("range reply")
}

func (m *RangeReply) decode(d *decoder) {
	n := d.count(RangePairOverhead, "pair count")
	pairs := m.Pairs[:0]
	if cap(pairs) < n {
		pairs = make([]KV, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		pairs = append(pairs, KV{Key: d.bytes("pair key"), Value: d.bytes("pair value")})
	}
	*m = RangeReply{Pairs: pairs}
	f := d.flags(rangeMore|rangeVersions, "range reply flags")
	m.More, m.Versions = f&rangeMore != 0, f&rangeVersions != 0
	m.Resume = d.bytes("resume key")
	m.Next = blink.Ptr(d.u64("next ptr"))
	if m.Versions {
		for i := 0; i < len(m.Pairs) && d.err == nil; i++ {
			m.Pairs[i].Version = d.u64("pair version")
		}
	}
	if !m.More && (m.Resume != nil || m.Next != 0) {
		d.failf("range reply: resume point without more")
	}
}

// NodeDumpRequest (OpNodeDump) asks for Length bytes at Ptr (0: one node
// of the region's node size).
//
//	[ptr u64][epoch u64][length u32]
type NodeDumpRequest struct {
	Ptr    blink.Ptr
	Epoch  uint64
	Length uint32
}

func (m *NodeDumpRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	return appendU32(b, m.Length)
}

func (m *NodeDumpRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("node dump request")
}

func (m *NodeDumpRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	m.Length = d.u32("length")
}

// NodeDumpReply answers OpNodeDump with the raw bytes (copied by the
// server with the one-sided read protocol, so they may be torn: check
// them with blink.CheckCopy).
//
//	[data bytes]
type NodeDumpReply struct {
	Data []byte
}

func (m *NodeDumpReply) AppendTo(b []byte) []byte { return appendBytes(b, m.Data) }

func (m *NodeDumpReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("node dump reply")
}

func (m *NodeDumpReply) decode(d *decoder) {
	m.Data = d.bytes("data")
}

// ErrorReply is the optional body of a reply with a non-OK status. An
// empty body means no detail.
//
//	[region u32][epoch u64][message bytes][leader bytes]
type ErrorReply struct {
	Region  uint32 // the region concerned, or 0
	Epoch   uint64 // the region's current epoch (StaleEpoch), or 0
	Message []byte // human-readable detail
	Leader  []byte // address to redirect to (WrongServer), "host:port"
}

func (m *ErrorReply) AppendTo(b []byte) []byte {
	b = appendU32(b, m.Region)
	b = appendU64(b, m.Epoch)
	b = appendBytes(b, m.Message)
	return appendBytes(b, m.Leader)
}

func (m *ErrorReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("error reply")
}

func (m *ErrorReply) decode(d *decoder) {
	m.Region = d.u32("region")
	m.Epoch = d.u64("epoch")
	m.Message = d.bytes("message")
	m.Leader = d.bytes("leader")
}

// CondOp is what a conditional write does when its condition holds.
type CondOp uint8

const (
	CondPut    CondOp = 1
	CondDelete CondOp = 2
)

// CondTarget is what a condition looks at.
type CondTarget uint8

const (
	CondVersion CondTarget = 1 // the key's version (0: absent)
	CondValue   CondTarget = 2 // the key's value (an absent key fails)
	CondPresent CondTarget = 3 // the key is present
	CondAbsent  CondTarget = 4 // the key is absent
)

// CondCompare is how a version or value is compared with the expected
// one: the key's against the request's.
type CondCompare uint8

const (
	CmpEqual    CondCompare = 1
	CmpNotEqual CondCompare = 2
	CmpLess     CondCompare = 3
	CmpGreater  CondCompare = 4
)

// CondRequest (OpCondWrite) puts Value under Key (Op CondPut) or deletes
// Key (CondDelete) if the condition holds: Target compared by Compare
// with ExpectedVersion or ExpectedValue (docs/transactions.md §3). Writes
// carry a client id and sequence as PutRequest does.
//
//	[ptr u64][epoch u64][client id u64][seq u64]
//	[op u8][target u8][compare u8][reserved u8 (0)][expected version u64]
//	[key bytes][expected value bytes][value bytes]
//
// Compare is 0 for targets present and absent, and ExpectedValue empty
// but for target value; a delete has an empty Value.
type CondRequest struct {
	Ptr             blink.Ptr
	Epoch           uint64
	ClientID        uint64
	Seq             uint64
	Op              CondOp
	Target          CondTarget
	Compare         CondCompare
	ExpectedVersion uint64
	Key             []byte
	ExpectedValue   []byte
	Value           []byte
}

func (m *CondRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	b = appendU64(b, m.ClientID)
	b = appendU64(b, m.Seq)
	b = append(b, byte(m.Op), byte(m.Target), byte(m.Compare), 0)
	b = appendU64(b, m.ExpectedVersion)
	b = appendBytes(b, m.Key)
	b = appendBytes(b, m.ExpectedValue)
	return appendBytes(b, m.Value)
}

func (m *CondRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("cond request")
}

func (m *CondRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	m.ClientID = d.u64("client id")
	m.Seq = d.u64("seq")
	m.Op = CondOp(d.u8("cond op"))
	m.Target = CondTarget(d.u8("cond target"))
	m.Compare = CondCompare(d.u8("cond compare"))
	if d.u8("cond reserved") != 0 {
		d.failf("cond request: reserved byte")
	}
	m.ExpectedVersion = d.u64("expected version")
	m.Key = d.bytes("key")
	m.ExpectedValue = d.bytes("expected value")
	m.Value = d.bytes("value")
	if d.err == nil {
		if err := m.Check(); err != nil {
			d.failf("%v", err)
		}
	}
}

// Check reports a condition that is not well formed: an unknown op,
// target or compare, a compare on presence, an expected value or version
// beside a target that has none, a delete with a value.
func (m *CondRequest) Check() error {
	switch {
	case m.Op != CondPut && m.Op != CondDelete:
		return fmt.Errorf("cond op %d", m.Op)
	case m.Target < CondVersion || m.Target > CondAbsent:
		return fmt.Errorf("cond target %d", m.Target)
	case (m.Target == CondVersion || m.Target == CondValue) && (m.Compare < CmpEqual || m.Compare > CmpGreater):
		return fmt.Errorf("cond compare %d", m.Compare)
	case (m.Target == CondPresent || m.Target == CondAbsent) && m.Compare != 0:
		return fmt.Errorf("a compare on presence")
	case m.Target != CondVersion && m.ExpectedVersion != 0:
		return fmt.Errorf("an expected version beside target %d", m.Target)
	case m.Target != CondValue && len(m.ExpectedValue) > 0:
		return fmt.Errorf("an expected value beside target %d", m.Target)
	case m.Op == CondDelete && len(m.Value) > 0:
		return fmt.Errorf("a conditional delete with a value")
	}
	return nil
}

// CondReply answers OpCondWrite: whether the condition held (and the
// write applied), and the key's version: the new one (a put's; 0 after a
// delete) when it held, the current one (0: absent) when it did not. A
// condition that did not hold is a definite answer, not an error.
//
//	[succeeded u8][version u64]
type CondReply struct {
	Succeeded bool
	Version   uint64
}

func (m *CondReply) AppendTo(b []byte) []byte {
	return appendU64(appendBool(b, m.Succeeded), m.Version)
}

func (m *CondReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("cond reply")
}

func (m *CondReply) decode(d *decoder) {
	m.Succeeded = d.bool("succeeded")
	m.Version = d.u64("version")
}
