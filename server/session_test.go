package server

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// DESIGN §9: "Writes carry a client id and a sequence number, and a region
// applies each at most once (a session table in its state machine), so a
// retry never applies a put twice around another client's write." A put
// retried after another client's write of the same key, and a delete
// retried after the key was written again, change nothing and answer as
// the first try did; the table survives a restart (snapshot and log).
func TestAtMostOnce(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	putAs := func(c *wire.Conn, client, seq uint64, k, v string) {
		t.Helper()
		if _, err := call(t, c, wire.OpPut, &wire.PutRequest{ClientID: client, Seq: seq, Key: []byte(k), Value: []byte(v)}, nil); err != nil {
			t.Fatalf("put %s as (%d, %d): %v", k, client, seq, err)
		}
	}
	delAs := func(c *wire.Conn, client, seq uint64, k string) error {
		_, err := call(t, c, wire.OpDelete, &wire.DeleteRequest{ClientID: client, Seq: seq, Key: []byte(k)}, nil)
		return err
	}
	putAs(c, 1, 1, "k", "first")
	putAs(c, 2, 1, "k", "second")
	putAs(c, 1, 1, "k", "first") // the retry
	if v, _ := get(t, c, "k"); v != "second" {
		t.Fatalf("after a retried put k = %q, want the other client's later write", v)
	}
	putAs(c, 3, 1, "d", "x")
	if err := delAs(c, 3, 2, "d"); err != nil {
		t.Fatal(err)
	}
	putAs(c, 4, 1, "d", "again")
	if err := delAs(c, 3, 2, "d"); err != nil { // the retry: answers "found", as the first try did
		t.Fatalf("retried delete: %v", err)
	}
	if v, ok := get(t, c, "d"); !ok || v != "again" {
		t.Fatalf("after a retried delete d = %q, %v", v, ok)
	}
	// Writes without a client id are never deduplicated.
	putAs(c, 0, 0, "n", "1")
	putAs(c, 0, 0, "n", "2")
	if v, _ := get(t, c, "n"); v != "2" {
		t.Fatalf("n = %q", v)
	}
	if err := s1.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	putAs(c, 5, 7, "k", "after-snapshot")
	s1.crashForTest(t)

	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	c2 := dial(t, s2)
	putAs(c2, 2, 1, "k", "second-retried-after-restart") // in the snapshot
	putAs(c2, 5, 7, "k", "replayed-retry")               // in the log after it
	if v, _ := get(t, c2, "k"); v != "after-snapshot" {
		t.Fatalf("after restart and retries k = %q", v)
	}
}

// The table keeps a client's last sessionWindow sequences and at most
// maxSessions clients, forgetting by log order alone; its snapshot
// encoding round-trips.
func TestSessionsBounds(t *testing.T) {
	var tab sessions
	for seq := uint64(1); seq <= sessionWindow+10; seq++ {
		tab.record(7, seq, seq%2 == 0, seq)
	}
	if _, dup := tab.lookup(7, 10); dup {
		t.Fatal("sequence 10 remembered past the window")
	}
	if found, dup := tab.lookup(7, sessionWindow+10); !dup || !found {
		t.Fatalf("latest sequence: found %v dup %v", found, dup)
	}
	for id := uint64(100); id < 100+maxSessions; id++ {
		tab.record(id, 1, false, 1000+id)
	}
	if _, dup := tab.lookup(7, sessionWindow+10); dup {
		t.Fatal("the client with the oldest write was not the one forgotten")
	}
	if len(tab.clients) != maxSessions {
		t.Fatalf("%d clients", len(tab.clients))
	}
	b := tab.appendTo(nil)
	got, err := readSessions(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tab) {
		t.Fatal("the session table does not round-trip")
	}
	for _, cut := range []int{0, 3, 4, 20, len(b) - 1} {
		if _, err := readSessions(bytes.NewReader(b[:cut])); err == nil {
			t.Fatalf("a table cut at %d bytes decoded", cut)
		}
	}
}
