package server

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

func TestPing(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	f, err := c.Call(ctxT(t), wire.OpPing, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	if string(f.Body) != "hello" {
		t.Fatalf("ping body %q", f.Body)
	}
	if f.Header.QueueNanos != 0 {
		t.Fatalf("ping reports queueing %d ns: it does not go through the queue", f.Header.QueueNanos)
	}
}

func TestPutGetDelete(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	applied := s.reps.own.sm.Applied()
	if _, ok := get(t, c, "k1"); ok {
		t.Fatal("k1 found in an empty store")
	}
	put(t, c, "k1", "v1")
	put(t, c, "k2", "")
	if v, ok := get(t, c, "k1"); !ok || v != "v1" {
		t.Fatalf("Get(k1) = %q, %v", v, ok)
	}
	if v, ok := get(t, c, "k2"); !ok || v != "" {
		t.Fatalf("Get(k2) = %q, %v; want the empty value", v, ok)
	}
	put(t, c, "k1", "v1-bis")
	if v, _ := get(t, c, "k1"); v != "v1-bis" {
		t.Fatalf("Get(k1) after overwrite = %q", v)
	}
	var cr wire.ContainsReply
	if _, err := call(t, c, wire.OpContains, &wire.GetRequest{Key: []byte("k1")}, &cr); err != nil || !cr.Found {
		t.Fatalf("Contains(k1) = %v, %v", cr.Found, err)
	}
	h, err := call(t, c, wire.OpDelete, &wire.DeleteRequest{Key: []byte("k1"), ClientID: 7, Seq: 1}, nil)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if h.ServiceNanos == 0 {
		t.Fatal("a reply without service time")
	}
	if _, ok := get(t, c, "k1"); ok {
		t.Fatal("k1 found after Delete")
	}
	_, err = call(t, c, wire.OpDelete, &wire.DeleteRequest{Key: []byte("k1")}, nil)
	wantStatus(t, err, wire.StatusNotFound)
	if _, err := call(t, c, wire.OpContains, &wire.GetRequest{Key: []byte("k1")}, &cr); err != nil || cr.Found {
		t.Fatalf("Contains(k1) after delete = %v, %v", cr.Found, err)
	}
	if err := rootTree(t, s).CheckErr(); err != nil {
		t.Fatal(err)
	}
	if n := s.reps.own.sm.Applied() - applied; n != 5 {
		t.Fatalf("%d records applied, want 5 (3 puts, 1 delete that found its key, 1 that did not)", n)
	}
}

func TestSearch(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	for i := range 300 {
		put(t, c, fmt.Sprintf("key%04d", i), fmt.Sprintf("value%d", i))
	}
	var rep wire.SearchReply
	h, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Key: []byte("key0042"), WantValue: true}, &rep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kind != wire.SearchLeaf || !rep.Found || !rep.HasValue || string(rep.Value) != "value42" {
		t.Fatalf("search = %+v", rep)
	}
	m := rep.Meganode
	if m.Ptr != s.Root() || m.Level != 0 || m.Height < 2 || !m.Range.MinInf || !m.Range.MaxInf {
		t.Fatalf("meganode %+v: want the root leaf meganode over the whole key space, height >= 2 after 300 keys", m)
	}
	if h.ServiceNanos == 0 {
		t.Fatal("no service time in the reply")
	}
	// Without the value; an absent key; starting at the meganode's
	// header pointer and at its local root node.
	for _, tc := range []struct {
		ptr   blink.Ptr
		key   string
		found bool
	}{
		{0, "key0100", true},
		{s.Root(), "key0100", true},
		{rootTree(t, s).Root(), "key0299", true},
		{0, "key9999", false},
		{0, "a", false},
	} {
		if _, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Ptr: tc.ptr, Key: []byte(tc.key)}, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Kind != wire.SearchLeaf || rep.Found != tc.found || rep.HasValue {
			t.Fatalf("search %q from %v = %+v, want found=%v without value", tc.key, tc.ptr, rep, tc.found)
		}
	}
}

func TestMetadata(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.Cores = 3 })
	c := dial(t, s)
	put(t, c, "a", "1")
	var rep wire.MetadataReply
	if _, err := call(t, c, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Server != "test-1" || rep.NodeSize != 1024 || rep.MeganodeSize != 1<<20 || rep.Root != s.Root() || rep.Hints.Workers != 3 {
		t.Fatalf("metadata = %+v", rep)
	}
	if len(rep.Regions) != 1 {
		t.Fatalf("%d regions", len(rep.Regions))
	}
	r := rep.Regions[0]
	if r.ID != s.RegionID() || r.Epoch != 1 || r.Size != 32<<20 || r.RemoteKey == 0 || r.Host != "test-host" ||
		r.RPCAddr != s.Addr() || r.ReadAddr != s.ReadAddr() || r.Path == "" {
		t.Fatalf("region = %+v", r)
	}
	if len(rep.Meganodes) != 1 {
		t.Fatalf("%d meganodes", len(rep.Meganodes))
	}
	m := rep.Meganodes[0]
	if m.Ptr != s.Root() || m.Level != 0 || m.Height != 1 || m.UsedNodes != 2 || m.Capacity != 1024 || !m.Range.MinInf || !m.Range.MaxInf {
		t.Fatalf("meganode = %+v", m)
	}
	// Regions only; a region of ours; one we do not know.
	if _, err := call(t, c, wire.OpMetadata, &wire.MetadataRequest{OneRegion: true, Region: s.RegionID()}, &rep); err != nil || len(rep.Meganodes) != 0 || len(rep.Regions) != 1 {
		t.Fatalf("one-region metadata = %+v, %v", rep, err)
	}
	_, err := call(t, c, wire.OpMetadata, &wire.MetadataRequest{OneRegion: true, Region: 999}, &rep)
	wantStatus(t, err, wire.StatusUnknownRegion)
}

func TestNodeDump(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "a", "1")
	var rep wire.NodeDumpReply
	// The meganode header, decoded as a one-sided reader would.
	if _, err := call(t, c, wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: s.Root()}, &rep); err != nil {
		t.Fatal(err)
	}
	h, r := blink.DecodeHeader(rep.Data)
	if r != blink.OK || h.Level != 0 || h.Height != 1 {
		t.Fatalf("header %+v (%v)", h, r)
	}
	// The root node: a leaf holding "a".
	if _, err := call(t, c, wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: h.Root, Length: 1024}, &rep); err != nil {
		t.Fatal(err)
	}
	if r := blink.CheckCopy(rep.Data); r != blink.OK {
		t.Fatalf("root node copy: %v", r)
	}
	if v := blink.View(rep.Data); v.Count() != 1 || string(v.Key(0)) != "a" {
		t.Fatalf("root node: %v", v)
	}
	// Offset 0 of the region holds the root pointer (docs/design.md §4).
	if _, err := call(t, c, wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: blink.MakePtr(s.RegionID(), 0), Length: 8}, &rep); err != nil {
		t.Fatal(err)
	}
	if got := blink.Ptr(binary.LittleEndian.Uint64(rep.Data)); got != s.Root() {
		t.Fatalf("region offset 0 holds %v, root is %v", got, s.Root())
	}
	size := uint64(32 << 20)
	id := s.RegionID()
	for _, tc := range []struct {
		name string
		req  wire.NodeDumpRequest
		st   wire.Status
	}{
		{"nil", wire.NodeDumpRequest{}, wire.StatusOutOfBounds},
		{"past the end", wire.NodeDumpRequest{Ptr: blink.MakePtr(id, size)}, wire.StatusOutOfBounds},
		{"across the end", wire.NodeDumpRequest{Ptr: blink.MakePtr(id, size-512), Length: 1024}, wire.StatusOutOfBounds},
		{"unaligned offset", wire.NodeDumpRequest{Ptr: blink.MakePtr(id, 4100)}, wire.StatusOutOfBounds},
		{"unaligned length", wire.NodeDumpRequest{Ptr: blink.MakePtr(id, 4096), Length: 12}, wire.StatusOutOfBounds},
		{"over the frame", wire.NodeDumpRequest{Ptr: blink.MakePtr(id, 0), Length: 8 << 20}, wire.StatusOutOfBounds},
		{"huge offset", wire.NodeDumpRequest{Ptr: blink.MakePtr(id, blink.MaxOffset&^7), Length: 1 << 31}, wire.StatusOutOfBounds},
		{"other region", wire.NodeDumpRequest{Ptr: blink.MakePtr(id+1, 4096)}, wire.StatusUnknownRegion},
		{"stale epoch", wire.NodeDumpRequest{Ptr: blink.MakePtr(id, 4096), Epoch: 99}, wire.StatusStaleEpoch},
	} {
		_, err := call(t, c, wire.OpNodeDump, &tc.req, &rep)
		if got := wire.StatusOf(err); got != tc.st {
			t.Errorf("%s: status %v (%v), want %v", tc.name, got, err, tc.st)
		}
	}
	// The last node of the region is readable.
	if _, err := call(t, c, wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: blink.MakePtr(id, size-1024)}, &rep); err != nil || len(rep.Data) != 1024 {
		t.Fatalf("last node: %d bytes, %v", len(rep.Data), err)
	}
}
