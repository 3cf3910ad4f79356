package wire

// CheckRequest (OpCheck) asks a server to verify the invariants of its
// tree of meganodes (server.Server.Check) and report what it finds.
//
//	[limit u32]
type CheckRequest struct {
	// Limit is the most violations to list; 0: as many as fit in a reply.
	Limit uint32
}

func (m *CheckRequest) AppendTo(b []byte) []byte { return appendU32(b, m.Limit) }

func (m *CheckRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("check request")
}

func (m *CheckRequest) decode(d *decoder) {
	m.Limit = d.u32("limit")
}

// CheckReply answers OpCheck: Count violations were found, and the first
// of them are listed, one human-readable line each (node addresses and
// keys included), as many as the request's limit and the frame size
// allow. An empty list with Count zero means the server's tree is sound.
//
//	[count u32][listed u32][listed × (violation bytes)]
//
// listed <= count. Decoding allocates its strings (checks are rare).
type CheckReply struct {
	Count      uint32
	Violations []string
}

// CheckViolationOverhead is the encoded size of a listed violation beyond
// its bytes; servers use it to keep replies under the frame limit.
const CheckViolationOverhead = 4

// CheckReplyOverhead is the encoded size of a CheckReply without its
// violations.
const CheckReplyOverhead = 8

func (m *CheckReply) AppendTo(b []byte) []byte {
	b = appendU32(b, m.Count)
	b = appendU32(b, uint32(len(m.Violations)))
	for _, v := range m.Violations {
		b = appendString(b, v)
	}
	return b
}

func (m *CheckReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("check reply")
}

func (m *CheckReply) decode(d *decoder) {
	vs := m.Violations[:0]
	m.Count = d.u32("violation count")
	n := d.count(CheckViolationOverhead, "listed violations")
	if d.err == nil && uint32(n) > m.Count {
		d.failf("check reply: %d violations listed of %d found", n, m.Count)
	}
	for i := 0; i < n && d.err == nil; i++ {
		vs = append(vs, d.string("violation"))
	}
	m.Violations = vs
}

// ReplicaHashRequest (OpReplicaHash) asks for the hash of the server's
// replica of Region.
//
//	[region u32]
type ReplicaHashRequest struct {
	Region uint32
}

func (m *ReplicaHashRequest) AppendTo(b []byte) []byte { return appendU32(b, m.Region) }

func (m *ReplicaHashRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("replica hash request")
}

func (m *ReplicaHashRequest) decode(d *decoder) { m.Region = d.u32("region") }

// ReplicaHashReply answers OpReplicaHash: the SHA-256 of the replica's
// region image (its layout and every page that is not all zero, the
// snapshot image's format) when it had applied the log up to Applied.
// Replicas of one region at one applied index must have equal hashes.
//
//	[region u32][applied u64][pages u64][hash 32 bytes]
type ReplicaHashReply struct {
	Region  uint32
	Applied uint64
	Pages   uint64
	Hash    [32]byte
}

func (m *ReplicaHashReply) AppendTo(b []byte) []byte {
	b = appendU32(b, m.Region)
	b = appendU64(b, m.Applied)
	b = appendU64(b, m.Pages)
	return append(b, m.Hash[:]...)
}

func (m *ReplicaHashReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("replica hash reply")
}

func (m *ReplicaHashReply) decode(d *decoder) {
	m.Region = d.u32("region")
	m.Applied = d.u64("applied index")
	m.Pages = d.u64("pages")
	copy(m.Hash[:], d.take(32, "hash"))
}
