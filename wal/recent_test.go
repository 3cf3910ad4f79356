package wal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/hashicorp/raft"
)

// The newest entries come from memory: an entry overwritten on disk behind
// the store's back still reads as stored, while one too large to keep, or
// one the log replaced or deleted since, is read from pebble.
func TestRecentServesNewest(t *testing.T) {
	db := mustOpen(t, vfs.NewMem(), "db")
	const r = 4
	ls := db.Log(r)
	big := genEntry(r, 6, 1)
	big.Data = bytes.Repeat([]byte{'b'}, recentMaxData+1)
	logs := append(genEntries(r, 1, 5, 1), big)
	if err := ls.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	// Spoil every record on disk (the store never does: this only tells
	// which reads reach pebble).
	spoil := func(lo, hi uint64) {
		t.Helper()
		b := db.pdb.NewBatch()
		defer b.Close()
		for i := lo; i <= hi; i++ {
			_ = b.Set(logKey(r, i), []byte("not a record"), nil)
		}
		if err := db.commit(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	spoil(1, 6)
	get := func(i uint64) (raft.Log, error) {
		var l raft.Log
		err := ls.GetLog(i, &l)
		return l, err
	}
	for i := uint64(1); i <= 5; i++ {
		l, err := get(i)
		if err != nil {
			t.Fatalf("GetLog(%d) of a kept entry: %v", i, err)
		}
		if d := sameLog(&l, logs[i-1]); d != "" {
			t.Fatalf("GetLog(%d): %s", i, d)
		}
		// The caller's copy: changing it changes nothing kept.
		for j := range l.Data {
			l.Data[j] = 'z'
		}
		if !bytes.Equal(logs[i-1].Data, genEntry(r, i, 1).Data) {
			t.Fatalf("GetLog(%d) handed out the stored entry's bytes", i)
		}
	}
	if _, err := get(6); !errors.Is(err, ErrCorruption) {
		t.Fatalf("GetLog(6) of an entry too large to keep: %v, want it read from disk (corruption)", err)
	}

	// A conflicting suffix replaced: the entries kept of the old suffix
	// must not be served, neither replaced ones nor ones past the end.
	if err := ls.StoreLogs(genEntries(r, 3, 4, 2)); err != nil {
		t.Fatal(err)
	}
	for i := uint64(3); i <= 4; i++ {
		l, err := get(i)
		if err != nil || l.Term != 2 {
			t.Fatalf("GetLog(%d) after the overwrite: term %d, %v; want term 2", i, l.Term, err)
		}
	}
	if _, err := get(5); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(5) past the replaced suffix: %v", err)
	}
	// Kept before the overwrite: the log's generation changed since, so
	// entry 1 is read from disk, which says corruption.
	if _, err := get(1); !errors.Is(err, ErrCorruption) {
		t.Fatalf("GetLog(1) kept before an overwrite: %v, want it read from disk", err)
	}

	// A prefix deleted (after a snapshot), then the region dropped and
	// written again at the same indexes.
	if err := ls.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := get(3); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(3) of a deleted entry: %v", err)
	}
	if err := db.DropRegion(r); err != nil {
		t.Fatal(err)
	}
	if _, err := get(4); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(4) after the drop: %v", err)
	}
	if err := ls.StoreLogs(genEntries(r, 1, 4, 7)); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 4; i++ {
		l, err := get(i)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameLog(&l, genEntry(r, i, 7)); d != "" {
			t.Fatalf("GetLog(%d) after the region came back: %s", i, d)
		}
	}
}

// A write that fails keeps nothing: the entries it carried are not served
// from memory, and neither are those of the suffix it was to replace.
func TestRecentKeepsOnlyAcknowledged(t *testing.T) {
	fault := &walFault{kinds: syncOps}
	db := mustOpen(t, errorfs.Wrap(vfs.NewCrashableMem(), fault), "db")
	const r = 2
	ls := db.Log(r)
	if err := ls.StoreLogs(genEntries(r, 1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	fault.armed.Store(true)
	if err := ls.StoreLogs(genEntries(r, 8, 12, 2)); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("StoreLogs with a failing sync: %v", err)
	}
	fault.armed.Store(false)
	var l raft.Log
	for i := uint64(8); i <= 12; i++ {
		if err := ls.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) after a failed overwrite: %v %+v, want not found", i, err, l)
		}
	}
	for i := uint64(1); i <= 7; i++ {
		if err := ls.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d), acknowledged before the failure: %v", i, err)
		}
		if d := sameLog(&l, genEntry(r, i, 1)); d != "" {
			t.Fatalf("GetLog(%d): %s", i, d)
		}
	}
}
