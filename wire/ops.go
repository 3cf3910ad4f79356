package wire

import "strconv"

// Op is the operation code of a frame (header byte 6). A reply carries the
// op of its request. The values are part of the wire format.
type Op uint8

// Operations of protocol version 1. The body of each request and reply is
// described on its message type in messages.go and metadata.go.
const (
	// OpPing echoes its body; used for health checks and RTT probes.
	OpPing Op = 0x01
	// OpMetadata describes the server: regions, meganodes, node size and
	// selector hints (MetadataRequest, MetadataReply).
	OpMetadata Op = 0x02

	// OpSearch is one meganode hop of a server-side search (SearchRequest,
	// SearchReply).
	OpSearch Op = 0x10
	// OpGet reads a key's value (GetRequest, GetReply).
	OpGet Op = 0x11
	// OpContains reports whether a key is present (GetRequest, ContainsReply).
	OpContains Op = 0x12
	// OpRange scans keys in order (RangeRequest, RangeReply).
	OpRange Op = 0x13
	// OpNodeDump returns the raw bytes of a node (NodeDumpRequest,
	// NodeDumpReply); for cellctl and tests.
	OpNodeDump Op = 0x14
	// OpCheck verifies the invariants of the server's tree of meganodes
	// and lists the violations (CheckRequest, CheckReply); for cellctl
	// check. It may take long: servers run it beside their tree workers.
	OpCheck Op = 0x15
	// OpReplicaHash hashes the server's replica of a region at its applied
	// index (ReplicaHashRequest, ReplicaHashReply), so that cellctl check
	// can compare the replicas of a region. Servers run it beside their
	// tree workers, holding the region's apply lock while they hash.
	OpReplicaHash Op = 0x16

	// OpPut inserts or replaces a key (PutRequest, WriteReply).
	OpPut Op = 0x20
	// OpDelete removes a key (DeleteRequest, WriteReply).
	OpDelete Op = 0x21
	// OpCondWrite puts or deletes a key if a condition on its version or
	// value holds, atomically in the region's apply (CondRequest,
	// CondReply; docs/transactions.md §3).
	OpCondWrite Op = 0x22
	// OpTxn commits a single-region transaction: its reads validated and
	// its writes applied in one record of the region's log (TxnRequest,
	// TxnReply; docs/transactions.md §4.9).
	OpTxn Op = 0x23
)

// Reserved op ranges. An op in a reserved range that this version does not
// define is unknown (ErrUnknownOp).
const (
	// OpSplitFirst..OpSplitLast: meganode split and migration (server to
	// server).
	OpSplitFirst Op = 0x30
	OpSplitLast  Op = 0x3f
	// OpRaftFirst..OpRaftLast: raft transport between replicas.
	OpRaftFirst Op = 0x40
	OpRaftLast  Op = 0x5f
	// OpReadFirst..OpReadLast: one-sided reads, should the software rdma
	// provider adopt this framing instead of its own.
	OpReadFirst Op = 0x60
	OpReadLast  Op = 0x6f
	// OpExtensionFirst..0xff: extension ops, accepted by the frame layer
	// without being known to it, so that a package can run a private
	// protocol over this framing before its ops are assigned here.
	OpExtensionFirst Op = 0xc0
)

var opNames = [...]string{
	OpPing:           "Ping",
	OpMetadata:       "Metadata",
	OpSearch:         "Search",
	OpGet:            "Get",
	OpContains:       "Contains",
	OpRange:          "Range",
	OpNodeDump:       "NodeDump",
	OpCheck:          "Check",
	OpPut:            "Put",
	OpReplicaHash:    "ReplicaHash",
	OpMoveReplica:    "MoveReplica",
	OpTransferLeader: "TransferLeader",
	OpDelete:         "Delete",
	OpCondWrite:      "CondWrite",
	OpTxn:            "Txn",

	OpSplitBegin:  "SplitBegin",
	OpSplitAppend: "SplitAppend",
	OpSplitEnd:    "SplitEnd",
	OpInsertChild: "InsertChild",
	OpMeganode:    "Meganode",
}

// Known reports whether o is an op defined by this protocol version.
func (o Op) Known() bool { return int(o) < len(opNames) && opNames[o] != "" }

// IsExtension reports whether o is in the extension range (0xc0..0xff).
func (o Op) IsExtension() bool { return o >= OpExtensionFirst }

// Valid reports whether the frame layer accepts o: a known op or an
// extension op.
func (o Op) Valid() bool { return o.Known() || o.IsExtension() }

// IsWrite reports whether o changes the store. A write whose outcome is
// unknown (ErrOutcomeUnknown, or ConnError with Sent set) must not be
// blindly retried unless it carries a client id and sequence number.
func (o Op) IsWrite() bool {
	switch o {
	case OpPut, OpDelete, OpCondWrite, OpTxn, OpSplitBegin, OpSplitAppend, OpSplitEnd, OpInsertChild:
		return true
	}
	return false
}

// String returns the op's name, or "Op(0xNN)".
func (o Op) String() string {
	if o.Known() {
		return opNames[o]
	}
	return "Op(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}
