package wire

import (
	"github.com/cellstore/cell/blink"
)

// sample is a representative value of one message type, used by the
// golden, round-trip and fuzz tests.
type sample struct {
	name string
	op   Op
	// reply marks a reply body.
	reply bool
	msg   Message
	// fresh returns an empty value of the same type to decode into.
	fresh func() Message
}

var (
	ptrA = blink.MakePtr(3, 0x4000)
	ptrB = blink.MakePtr(7, 0x10000)
)

func samples() []sample {
	return []sample{
		{"search request", OpSearch, false,
			&SearchRequest{Ptr: ptrA, Epoch: 7, WantValue: true, Key: []byte("apple")},
			func() Message { return new(SearchRequest) }},
		{"search reply next", OpSearch, true,
			&SearchReply{Kind: SearchNext, Next: ptrB, Meganode: Meganode{
				Ptr: ptrA, Level: 1, Height: 3,
				Range: KeyRange{MinInf: true, Max: []byte("m")}}},
			func() Message { return new(SearchReply) }},
		{"search reply leaf", OpSearch, true,
			&SearchReply{Kind: SearchLeaf, Found: true, HasValue: true, Value: []byte("red"),
				Meganode: Meganode{Ptr: ptrB, Level: 0, Height: 2,
					Range: KeyRange{Min: []byte("a"), MaxInf: true}}},
			func() Message { return new(SearchReply) }},
		{"search reply leaf absent", OpSearch, true,
			&SearchReply{Kind: SearchLeaf, Meganode: Meganode{Ptr: ptrB,
				Range: KeyRange{Min: []byte("a"), Max: []byte("b")}}},
			func() Message { return new(SearchReply) }},
		{"get request", OpGet, false,
			&GetRequest{Ptr: ptrA, Epoch: 2, Key: []byte("k1")},
			func() Message { return new(GetRequest) }},
		{"get reply", OpGet, true,
			&GetReply{Value: []byte("v1")},
			func() Message { return new(GetReply) }},
		{"contains reply", OpContains, true,
			&ContainsReply{Found: true},
			func() Message { return new(ContainsReply) }},
		{"put request", OpPut, false,
			&PutRequest{Ptr: ptrA, Epoch: 2, ClientID: 0xc11e, Seq: 42, Key: []byte("k"), Value: []byte("value")},
			func() Message { return new(PutRequest) }},
		{"delete request", OpDelete, false,
			&DeleteRequest{Ptr: ptrA, Epoch: 2, ClientID: 0xc11e, Seq: 43, Key: []byte("k")},
			func() Message { return new(DeleteRequest) }},
		{"range request", OpRange, false,
			&RangeRequest{Ptr: ptrA, Epoch: 1, Start: []byte("a"), EndUnbounded: true, Reverse: true, Limit: 100},
			func() Message { return new(RangeRequest) }},
		{"range request keys only", OpRange, false,
			&RangeRequest{StartUnbounded: true, End: []byte("z"), KeysOnly: true},
			func() Message { return new(RangeRequest) }},
		{"range reply", OpRange, true,
			&RangeReply{Pairs: []KV{{[]byte("a"), []byte("1")}, {[]byte("b"), nil}},
				More: true, Resume: []byte("b\x00"), Next: ptrB},
			func() Message { return new(RangeReply) }},
		{"range reply done", OpRange, true,
			&RangeReply{},
			func() Message { return new(RangeReply) }},
		{"node dump request", OpNodeDump, false,
			&NodeDumpRequest{Ptr: ptrA, Epoch: 1, Length: 1024},
			func() Message { return new(NodeDumpRequest) }},
		{"node dump reply", OpNodeDump, true,
			&NodeDumpReply{Data: []byte{0, 1, 2, 3, 4, 5, 6, 7}},
			func() Message { return new(NodeDumpReply) }},
		{"metadata request", OpMetadata, false,
			&MetadataRequest{WantMeganodes: true, OneRegion: true, Region: 3},
			func() Message { return new(MetadataRequest) }},
		{"metadata reply", OpMetadata, true,
			&MetadataReply{
				Server: "n1", NodeSize: 1024, MeganodeSize: 64 << 20, Root: ptrA,
				Hints: SelectorHints{Workers: 2, Queued: 5, QueueNanos: 1500, ServiceNanos: 3000},
				Regions: []RegionInfo{{ID: 3, Epoch: 9, Size: 1 << 30, RemoteKey: 0xabc,
					Host: "h1", RPCAddr: "10.0.0.1:7000", ReadAddr: "10.0.0.1:7001", Path: "/dev/shm/cell-3",
					Raft: RaftInfo{Role: RoleLeader, Term: 5, LastIndex: 120, Commit: 119, Applied: 118}}},
				Meganodes: []MeganodeStats{
					{Meganode: Meganode{Ptr: ptrA, Level: 1, Height: 4,
						Range: KeyRange{MinInf: true, MaxInf: true}}, UsedNodes: 100, Capacity: 65536},
					{Meganode: Meganode{Ptr: ptrB, Level: 0, Height: 2,
						Range: KeyRange{MinInf: true, Max: []byte("m")}}, UsedNodes: 7, Capacity: 64,
						Right: ptrA + 0x400, SplitSource: true, SplitLinked: true},
				},
			},
			func() Message { return new(MetadataReply) }},
		{"check request", OpCheck, false,
			&CheckRequest{Limit: 100},
			func() Message { return new(CheckRequest) }},
		{"check reply", OpCheck, true,
			&CheckReply{Count: 3, Violations: []string{"meganode 3:0x4000: bad", "meganode 7:0x10000: worse"}},
			func() Message { return new(CheckReply) }},
		{"check reply sound", OpCheck, true,
			&CheckReply{},
			func() Message { return new(CheckReply) }},
		{"replica hash request", OpReplicaHash, false,
			&ReplicaHashRequest{Region: 3},
			func() Message { return new(ReplicaHashRequest) }},
		{"replica hash reply", OpReplicaHash, true,
			&ReplicaHashReply{Region: 3, Applied: 12345, Pages: 77, Hash: [32]byte{1, 2, 3, 30: 0xfe, 31: 0xff}},
			func() Message { return new(ReplicaHashReply) }},
		{"move replica request", OpMoveReplica, false,
			&MoveReplicaRequest{Region: 3, From: "cell-2", To: "cell-5"},
			func() Message { return new(MoveReplicaRequest) }},
		{"transfer leader request", OpTransferLeader, false,
			&TransferLeaderRequest{Region: 3, To: "cell-4"},
			func() Message { return new(TransferLeaderRequest) }},
		{"error reply", OpGet, true,
			&ErrorReply{Region: 3, Epoch: 10, Message: []byte("moved"), Leader: []byte("10.0.0.2:7000")},
			func() Message { return new(ErrorReply) }},
		{"split begin request", OpSplitBegin, false,
			&SplitBeginRequest{Source: ptrA, Epoch: 4, Level: 1, Right: ptrB, Range: KeyRange{Min: []byte("m"), MaxInf: true}},
			func() Message { return new(SplitBeginRequest) }},
		{"split begin reply", OpSplitBegin, true,
			&SplitBeginReply{Meganode: ptrB},
			func() Message { return new(SplitBeginReply) }},
		{"split append request leaf", OpSplitAppend, false,
			&SplitAppendRequest{Meganode: ptrB, Entries: []SplitEntry{{Key: []byte("m1"), Value: []byte("v1")}, {Key: []byte("m2")}}},
			func() Message { return new(SplitAppendRequest) }},
		{"split append request inner", OpSplitAppend, false,
			&SplitAppendRequest{Meganode: ptrB, Inner: true, Entries: []SplitEntry{{Key: []byte("n"), Child: ptrA}}},
			func() Message { return new(SplitAppendRequest) }},
		{"split append reply", OpSplitAppend, true,
			&SplitAppendReply{Root: ptrB + 1024},
			func() Message { return new(SplitAppendReply) }},
		{"split end request", OpSplitEnd, false,
			&SplitEndRequest{Meganode: ptrB, Commit: true, Sessions: []byte{1, 2, 3}},
			func() Message { return new(SplitEndRequest) }},
		{"insert child request", OpInsertChild, false,
			&InsertChildRequest{Level: 1, Child: ptrB, Key: []byte("m")},
			func() Message { return new(InsertChildRequest) }},
		{"insert child reply", OpInsertChild, true,
			&InsertChildReply{Next: ptrA},
			func() Message { return new(InsertChildReply) }},
		{"meganode request", OpMeganode, false,
			&MeganodeRequest{Ptr: ptrB + 2048},
			func() Message { return new(MeganodeRequest) }},
		{"meganode reply", OpMeganode, true,
			&MeganodeReply{Meganode: Meganode{Ptr: ptrB, Level: 1, Height: 2, Range: KeyRange{Min: []byte("m"), MaxInf: true}}, Right: ptrA, SplitNew: ptrB + 0x400},
			func() Message { return new(MeganodeReply) }},
	}
}
