package server

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cellstore/cell/regiontable"
)

// Options.SnapshotDir: the data directory's snapshots/ becomes a link to
// the data directory's own part of it; later starts with the same
// directory or none follow the link; another directory, or a link whose
// directory is missing (an unmounted disk), is refused; a snapshots/ that
// already holds snapshots is not moved behind the operator's back.
func TestLinkSnapshots(t *testing.T) {
	data, snap, other := t.TempDir(), t.TempDir(), t.TempDir()
	d, err := openDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := d.linkSnapshots(snap); err != nil {
		t.Fatal(err)
	}
	want, _ := snapshotTarget(snap, d.dir)
	if got, err := os.Readlink(d.path(snapshotsDir)); err != nil || got != want {
		t.Fatalf("snapshots/ links to %q (%v), want %q", got, err, want)
	}
	if st, err := os.Stat(want); err != nil || !st.IsDir() {
		t.Fatalf("the snapshot directory %s: %v", want, err)
	}
	for _, again := range []string{snap, ""} {
		if err := d.linkSnapshots(again); err != nil {
			t.Fatalf("again with %q: %v", again, err)
		}
	}
	if err := d.linkSnapshots(other); !errors.Is(err, ErrSnapshotDir) {
		t.Fatalf("with another snapshot directory: %v, want ErrSnapshotDir", err)
	}
	if err := os.Remove(want); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{snap, ""} {
		if err := d.linkSnapshots(dir); !errors.Is(err, ErrSnapshotDir) {
			t.Fatalf("with the linked directory missing (%q): %v, want ErrSnapshotDir", dir, err)
		}
	}

	// A snapshots/ directory of its own: moved behind a link while empty,
	// refused once it holds something.
	data2 := t.TempDir()
	d2, err := openDataDir(data2)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.close()
	if err := os.Mkdir(d2.path(snapshotsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d2.path(snapshotsDir), "00000001"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d2.linkSnapshots(snap); !errors.Is(err, ErrSnapshotDir) {
		t.Fatalf("over a snapshots/ holding snapshots: %v, want ErrSnapshotDir", err)
	}
	if err := os.Remove(filepath.Join(d2.path(snapshotsDir), "00000001")); err != nil {
		t.Fatal(err)
	}
	if err := d2.linkSnapshots(snap); err != nil {
		t.Fatalf("over an empty snapshots/: %v", err)
	}
	// A snapshot directory inside the data directory is a mistake.
	d3, err := openDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d3.close()
	for _, inside := range []string{d3.dir, d3.path(snapshotsDir), d3.path("x")} {
		if err := d3.linkSnapshots(inside); !errors.Is(err, ErrSnapshotDir) {
			t.Errorf("a snapshot directory %s inside the data directory: %v, want ErrSnapshotDir", inside, err)
		}
	}
	// Two data directories share the snapshot directory without mixing.
	want2, _ := snapshotTarget(snap, d2.dir)
	if want2 == want {
		t.Fatalf("two data directories map to one snapshot directory %s", want)
	}
}

// "Writing a snapshot shares the disk with the log" unless the snapshots
// have a directory of their own: a server with Options.SnapshotDir writes
// its snapshots there, starts again from them with the option or without
// it, and Wipe removes them with the data directory.
func TestSnapshotDirRestart(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.SnapshotDir = t.TempDir()
	s1 := startUnclosed(t, opts)
	c := dial(t, s1)
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		put(t, c, k, "v-"+k)
	}
	if err := s1.Close(); err != nil { // snapshots the region
		t.Fatal(err)
	}
	target, _ := snapshotTarget(opts.SnapshotDir, s1.dir.dir)
	ents, err := os.ReadDir(target)
	if err != nil || len(ents) == 0 {
		t.Fatalf("the snapshot directory %s after a clean stop: %v, %v", target, ents, err)
	}

	for i, dir := range []string{"", opts.SnapshotDir} {
		o := opts
		o.SnapshotDir = dir
		o.Registry, o.Logger = nil, testLogger(t)
		s := startUnclosed(t, o)
		c := dial(t, s)
		for _, k := range keys {
			if v, ok := get(t, c, k); !ok || v != "v-"+k {
				t.Fatalf("restart %d (snapshot dir %q): %s = %q, %v", i, dir, k, v, ok)
			}
		}
		put(t, c, "d", "v-d")
		keys = append(keys, "d")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// Another snapshot directory is refused.
	o := opts
	o.SnapshotDir = t.TempDir()
	o.Registry, o.Logger = nil, testLogger(t)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctxT(t)); !errors.Is(err, ErrSnapshotDir) {
		t.Fatalf("start with another snapshot directory: %v, want ErrSnapshotDir", err)
	}
	_ = s.Close()

	removed, err := Wipe(opts.DataDir, opts.ShmDir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, target) {
		t.Errorf("Wipe removed %v, not the snapshot directory %s", removed, target)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the snapshot directory after Wipe: %v", err)
	}
}
