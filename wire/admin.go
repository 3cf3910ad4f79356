package wire

// Operator requests (cellctl move-replica, transfer-leader, drain; the
// coordinator's self-repair). They are answered by the host of the region
// they name, at once: the work they start (adding a replica, which
// installs a snapshot, then removing one; a leadership transfer) goes on
// in the background, and the asker learns that it finished from the
// region table. Asking again is harmless: a move already under way is
// continued, a replica already moved is not moved twice.
const (
	// OpMoveReplica asks the host of a region to move one of its replicas
	// to another server (MoveReplicaRequest, empty reply).
	OpMoveReplica Op = 0x17
	// OpTransferLeader asks the host of a region to hand its group's
	// leadership, and so the region, to another of its replicas
	// (TransferLeaderRequest, empty reply).
	OpTransferLeader Op = 0x18
)

// MoveReplicaRequest (OpMoveReplica) asks Region's host to add a replica
// on server To (a raft nonvoter that catches up, then a voter) and then
// remove the replica on server From. From may be the host itself: it
// hands the leadership to another replica before it is removed, and the
// asker asks the new host again.
//
//	[region u32][from string][to string]
type MoveReplicaRequest struct {
	Region uint32
	From   string
	To     string
}

func (m *MoveReplicaRequest) AppendTo(b []byte) []byte {
	b = appendU32(b, m.Region)
	b = appendString(b, m.From)
	return appendString(b, m.To)
}

func (m *MoveReplicaRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("move replica request")
}

func (m *MoveReplicaRequest) decode(d *decoder) {
	m.Region = d.u32("region")
	m.From = d.string("from")
	m.To = d.string("to")
}

// TransferLeaderRequest (OpTransferLeader) asks Region's host to hand the
// leadership of the region's group to the replica on server To, or, if To
// is empty, to the most up-to-date other replica. The host stops serving
// the region (its read lease dropped) before it hands over; the new leader
// takes the region over. The reply comes when the transfer is done or
// failed; after a failure the old host serves the region again.
//
//	[region u32][to string]
type TransferLeaderRequest struct {
	Region uint32
	To     string
}

func (m *TransferLeaderRequest) AppendTo(b []byte) []byte {
	b = appendU32(b, m.Region)
	return appendString(b, m.To)
}

func (m *TransferLeaderRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("transfer leader request")
}

func (m *TransferLeaderRequest) decode(d *decoder) {
	m.Region = d.u32("region")
	m.To = d.string("to")
}

// EmptyMessage is the body of replies that carry nothing.
type EmptyMessage struct{}

func (*EmptyMessage) AppendTo(b []byte) []byte { return b }

func (*EmptyMessage) Decode(body []byte) error {
	d := decoder{b: body}
	return d.finish("empty message")
}
