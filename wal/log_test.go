package wal

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// mustState fails t unless region holds want.
func mustState(t *testing.T, db *DB, region uint32, want regionState) {
	t.Helper()
	got, err := readState(db, region)
	if err != nil {
		t.Fatalf("region %d: %v", region, err)
	}
	want = want.clone()
	if !got.equal(want) {
		t.Fatalf("region %d:\n got %v\nwant %v", region, got, want)
	}
}

func TestLogStore(t *testing.T) {
	fs := vfs.NewMem()
	db := mustOpen(t, fs, "db")
	const r = 5
	ls := db.Log(r)
	if db.Log(r) != ls {
		t.Fatal("Log returns a new store for the same region")
	}
	var model regionState
	mustState(t, db, r, model)
	var l raft.Log
	if err := ls.GetLog(1, &l); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog on an empty log: %v, want raft.ErrLogNotFound itself", err)
	}

	// step checks that a write succeeded and left the region as the model
	// says (mutate applies the write to the model).
	step := func(what string, err error, mutate func()) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		mutate()
		mustState(t, db, r, model)
	}
	step("StoreLogs 1..10", ls.StoreLogs(genEntries(r, 1, 10, 1)), func() { model.storeLogs(1, 10, 1) })
	mustState(t, db, r, model)
	step("StoreLog 11", ls.StoreLog(genEntry(r, 11, 1)), func() { model.storeLogs(11, 11, 1) })
	for _, i := range []uint64{0, 12, math.MaxUint64} {
		if err := ls.GetLog(i, &l); err != raft.ErrLogNotFound {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
	}
	step("prefix delete", ls.DeleteRange(0, 3), func() { model.deleteRange(0, 3) })
	step("suffix delete", ls.DeleteRange(10, 100), func() { model.deleteRange(10, 100) })
	step("no-op delete", ls.DeleteRange(50, 60), func() {})
	step("empty range", ls.DeleteRange(7, 6), func() {})
	if err := ls.DeleteRange(6, 7); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("hole in the middle: %v", err)
	}
	mustState(t, db, r, model)
	for _, bad := range [][]*raft.Log{
		{genEntry(r, 10, 1), genEntry(r, 12, 1)},
		{genEntry(r, 11, 1), genEntry(r, 10, 1)},
		{{Index: 0, Term: 1}},
	} {
		if err := ls.StoreLogs(bad); !errors.Is(err, ErrOutOfOrder) {
			t.Fatalf("StoreLogs out of order: %v", err)
		}
	}
	mustState(t, db, r, model)
	step("overwrite a suffix with a new term", ls.StoreLogs(genEntries(r, 7, 8, 2)), func() { model.storeLogs(7, 8, 2) })
	step("overwrite from first", ls.StoreLogs(genEntries(r, 4, 12, 3)), func() { model.storeLogs(4, 12, 3) })
	step("gap: restart the log", ls.StoreLogs(genEntries(r, 20, 22, 3)), func() { model.storeLogs(20, 22, 3) })
	step("below first: restart the log", ls.StoreLogs(genEntries(r, 15, 16, 4)), func() { model.storeLogs(15, 16, 4) })
	step("delete all", ls.DeleteRange(0, math.MaxUint64), func() { model.deleteRange(0, math.MaxUint64) })
	step("start anywhere", ls.StoreLogs(genEntries(r, 100, 130, 5)), func() { model.storeLogs(100, 130, 5) })

	// A reopened store reads the same (bounds loaded from pebble).
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Log(r).FirstIndex(); !errors.Is(err, ErrClosed) {
		t.Fatalf("FirstIndex after Close: %v", err)
	}
	if err := db.Log(r).StoreLog(genEntry(r, 131, 5)); !errors.Is(err, ErrClosed) {
		t.Fatalf("StoreLog after Close: %v", err)
	}
	db = mustOpen(t, fs, "db")
	mustState(t, db, r, model)
	if !db.Log(r).IsMonotonic() {
		t.Fatal("not monotonic")
	}
}

// TestRegionsIsolated interleaves several regions, including the extreme
// IDs, and checks each sees only its own keys.
func TestRegionsIsolated(t *testing.T) {
	fs := vfs.NewMem()
	db := mustOpen(t, fs, "db")
	regions := []uint32{0, 1, 2, 0xffffff, math.MaxUint32}
	models := map[uint32]*regionState{}
	for _, r := range regions {
		models[r] = &regionState{}
	}
	for round := uint64(0); round < 4; round++ {
		for k, r := range regions {
			lo := round*10 + 1
			hi := lo + uint64(k) + 2
			if err := db.Log(r).StoreLogs(genEntries(r, lo, hi, 1)); err != nil {
				t.Fatal(err)
			}
			models[r].storeLogs(lo, hi, 1) // each round after the first restarts the log
		}
	}
	for _, r := range regions {
		if err := db.Stable(r).SetUint64([]byte("CurrentTerm"), uint64(r)); err != nil {
			t.Fatal(err)
		}
		models[r].stable = map[string]string{"CurrentTerm": string(putUint64(uint64(r)))}
	}
	// Delete all of region 1's log: its neighbours keep theirs.
	if err := db.Log(1).DeleteRange(0, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	models[1].deleteRange(0, math.MaxUint64)
	for _, r := range regions {
		mustState(t, db, r, *models[r])
	}
	got, err := db.Regions()
	if err != nil || !slices.Equal(got, regions) {
		t.Fatalf("Regions: %v %v, want %v", got, err, regions)
	}
	if err := db.DropRegion(2); err != nil {
		t.Fatal(err)
	}
	models[2] = &regionState{}
	if err := db.DropRegion(77); err != nil { // a region with nothing
		t.Fatal(err)
	}
	for _, r := range regions {
		mustState(t, db, r, *models[r])
	}
	want := []uint32{0, 1, 0xffffff, math.MaxUint32}
	if got, err := db.Regions(); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Regions after drop: %v %v, want %v", got, err, want)
	}
	// A dropped region can come back.
	if err := db.Log(2).StoreLogs(genEntries(2, 3, 4, 9)); err != nil {
		t.Fatal(err)
	}
	models[2].storeLogs(3, 4, 9)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, fs, "db")
	for _, r := range regions {
		mustState(t, db, r, *models[r])
	}
}

func TestStableStore(t *testing.T) {
	fs := vfs.NewMem()
	db := mustOpen(t, fs, "db")
	ss := db.Stable(3)
	// What raft needs from a fresh store (see ErrNotFound).
	if _, err := ss.Get([]byte("LastVoteCand")); err == nil || err.Error() != "not found" || err != ErrNotFound {
		t.Fatalf("Get of a missing key: %v, want exactly ErrNotFound", err)
	}
	if v, err := ss.GetUint64([]byte("CurrentTerm")); v != 0 || err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 of a missing key: %d %v", v, err)
	}
	snaps, err := OpenSnapshots(SnapshotOptions{FS: fs, Dir: "snaps", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if has, err := raft.HasExistingState(db.Log(3), ss, snaps.Region(3)); has || err != nil {
		t.Fatalf("HasExistingState on a fresh store: %v %v", has, err)
	}
	if err := ss.SetUint64([]byte("CurrentTerm"), 42); err != nil {
		t.Fatal(err)
	}
	if has, err := raft.HasExistingState(db.Log(3), ss, snaps.Region(3)); !has || err != nil {
		t.Fatalf("HasExistingState after SetUint64: %v %v", has, err)
	}
	val := []byte("node-7")
	if err := ss.Set([]byte("LastVoteCand"), val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'X' // the store kept its own copy
	if err := ss.Set([]byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if err := ss.Set([]byte("odd"), []byte("abc")); err != nil {
		t.Fatal(err)
	}
	check := func(db *DB) {
		t.Helper()
		ss := db.Stable(3)
		if v, err := ss.GetUint64([]byte("CurrentTerm")); v != 42 || err != nil {
			t.Fatalf("GetUint64: %d %v", v, err)
		}
		v, err := ss.Get([]byte("LastVoteCand"))
		if string(v) != "node-7" || err != nil {
			t.Fatalf("Get: %q %v", v, err)
		}
		v[0] = 'Y' // the caller owns the copy it got
		if v, _ := ss.Get([]byte("LastVoteCand")); string(v) != "node-7" {
			t.Fatalf("Get returned the store's own slice: %q", v)
		}
		if v, err := ss.Get([]byte("empty")); v == nil || len(v) != 0 || err != nil {
			t.Fatalf("Get of an empty value: %v %v", v, err)
		}
		if _, err := ss.GetUint64([]byte("odd")); !errors.Is(err, ErrCorruption) {
			t.Fatalf("GetUint64 of a 3-byte value: %v", err)
		}
		if _, err := db.Stable(4).Get([]byte("LastVoteCand")); err != ErrNotFound {
			t.Fatalf("another region sees region 3's value: %v", err)
		}
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	check(mustOpen(t, fs, "db"))
}

// TestCheckFindsCorruption writes bad keys behind the store's back. GetLog
// reads pebble only here: the newest entries in memory are what was stored,
// whatever the disk says since (TestRecentServesNewest).
func TestCheckFindsCorruption(t *testing.T) {
	db := mustOpen(t, vfs.NewMem(), "db")
	const r = 9
	ls := db.Log(r)
	ls.recentOff = true
	if err := ls.StoreLogs(genEntries(r, 1, 5, 1)); err != nil {
		t.Fatal(err)
	}
	if err := ls.Check(); err != nil {
		t.Fatal(err)
	}
	put := func(k, v []byte) {
		b := db.pdb.NewBatch()
		defer b.Close()
		_ = b.Set(k, v, nil)
		if err := db.commit(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := appendLog(nil, genEntry(r, 2, 1))
	put(logKey(r, 3), rec) // index 3 holds index 2's record
	put(logKey(r, 4), rec[:10])
	err := ls.Check()
	mustErrIs(t, err, ErrCorruption)
	t.Log(err)
	var l raft.Log
	mustErrIs(t, ls.GetLog(3, &l), ErrCorruption)
	mustErrIs(t, ls.GetLog(4, &l), ErrCorruption)
	if err := ls.GetLog(2, &l); err != nil {
		t.Fatal(err)
	}
	// A hole and a stray key, and bounds that no longer match.
	b := db.pdb.NewBatch()
	_ = b.Delete(logKey(r, 2), nil)
	_ = b.Set(append(regionPrefix(kindLog, r), 1, 2), []byte("x"), nil)
	if err := db.commit(b, 0); err != nil {
		t.Fatal(err)
	}
	b.Close()
	err = ls.Check()
	mustErrIs(t, err, ErrCorruption)
	t.Log(err)
	mustErrIs(t, ls.GetLog(2, &l), ErrCorruption)
}

// TestCommitIndex: a staged commit index becomes durable with the next
// StoreLogs, and only then (raft.CommitTrackingLogStore).
func TestCommitIndex(t *testing.T) {
	fs := vfs.NewMem()
	db := mustOpen(t, fs, "db")
	ls := db.Log(4)
	if c, err := ls.GetCommitIndex(); c != 0 || err != nil {
		t.Fatalf("fresh: %d %v", c, err)
	}
	if err := ls.StoreLogs(genEntries(4, 1, 5, 1)); err != nil {
		t.Fatal(err)
	}
	if err := ls.StageCommitIndex(3); err != nil {
		t.Fatal(err)
	}
	if c, _ := ls.GetCommitIndex(); c != 0 {
		t.Fatalf("staged index visible before a StoreLogs: %d", c)
	}
	if err := ls.StoreLogs(genEntries(4, 6, 7, 1)); err != nil {
		t.Fatal(err)
	}
	if c, _ := ls.GetCommitIndex(); c != 3 {
		t.Fatalf("after StoreLogs: %d, want 3", c)
	}
	_ = ls.StageCommitIndex(50) // above what the next batch holds: capped at its last index
	if err := ls.StoreLog(genEntry(4, 8, 1)); err != nil {
		t.Fatal(err)
	}
	_ = ls.StageCommitIndex(8) // never followed by a StoreLogs
	reopen := func() *LogStore {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = mustOpen(t, fs, "db")
		return db.Log(4)
	}
	ls = reopen()
	if c, _ := ls.GetCommitIndex(); c != 8 {
		t.Fatalf("after reopen: %d, want 8", c)
	}
	if err := ls.DeleteRange(6, 8); err != nil {
		t.Fatal(err)
	}
	if c, _ := ls.GetCommitIndex(); c != 5 {
		t.Fatalf("after truncating the log to 5: %d, want 5", c)
	}
	if regions, _ := db.Regions(); !slices.Equal(regions, []uint32{4}) {
		t.Fatalf("Regions %v", regions)
	}
	if err := db.DropRegion(4); err != nil {
		t.Fatal(err)
	}
	if regions, _ := db.Regions(); len(regions) != 0 {
		t.Fatalf("Regions after DropRegion %v", regions)
	}
	if c, _ := reopen().GetCommitIndex(); c != 0 {
		t.Fatalf("after DropRegion: %d", c)
	}
}
