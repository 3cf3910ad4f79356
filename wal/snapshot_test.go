package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/testutil"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/hashicorp/raft"
)

var testConfig = raft.Configuration{Servers: []raft.Server{
	{Suffrage: raft.Voter, ID: "n1", Address: "10.0.0.1:7000"},
	{Suffrage: raft.Nonvoter, ID: "n2", Address: "10.0.0.2:7000"},
}}

func mustOpenSnapshots(t testing.TB, fs vfs.FS, opts SnapshotOptions) *Snapshots {
	t.Helper()
	opts.FS, opts.Logger = fs, testLogger(t)
	if opts.Dir == "" {
		opts.Dir = "snaps"
	}
	s, err := OpenSnapshots(opts)
	if err != nil {
		t.Fatalf("OpenSnapshots: %v", err)
	}
	return s
}

// image returns n bytes of a region image, different for each seed.
func image(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// mustWriteSnapshot writes data as a snapshot of st in writes of random
// sizes, and closes the sink.
func mustWriteSnapshot(t testing.TB, st *SnapshotStore, index, term uint64, data []byte) string {
	t.Helper()
	sink, err := st.Create(1, index, term, testConfig, index-1, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(index, term))
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(3000))
		if w, err := sink.Write(rest[:n]); w != n || err != nil {
			t.Fatalf("Write: %d %v", w, err)
		}
		rest = rest[n:]
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sink.Close(); err != nil { // raft closes twice
		t.Fatalf("second Close: %v", err)
	}
	if _, err := sink.Write([]byte("x")); !errors.Is(err, ErrSinkClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	return sink.ID()
}

// readSnapshot opens id and reads its whole stream.
func readSnapshot(st *SnapshotStore, id string) (*raft.SnapshotMeta, []byte, error) {
	meta, rc, err := st.Open(id)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return meta, b, err
}

func listIDs(t testing.TB, st *SnapshotStore) []string {
	t.Helper()
	metas, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range metas {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestGoldenSnapshot pins the data and meta file formats (snapformat.go).
func TestGoldenSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: 8, TestingKnobs: SnapshotTestingKnobs{
		Now: func() time.Time { return time.Unix(1_700_000_000, 0) },
	}})
	st := s.Region(0xabc)
	id := mustWriteSnapshot(t, st, 12, 3, []byte("hello, snapshot!!"))
	if id != "3-12-1700000000000000000" {
		t.Fatalf("id %q", id)
	}
	data, err := readFile(fs, "snaps/00000abc/"+id+"/data")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := readFile(fs, "snaps/00000abc/"+id+"/meta")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, "snapshot.golden",
		"# data\n"+AnnotatedSnapshotData(data)+"# meta\n"+AnnotatedSnapshotMeta(meta), "on-disk snapshot format")
}

func TestSnapshotRoundTrip(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: 4096})
	st := s.Region(7)
	if ids := listIDs(t, st); len(ids) != 0 {
		t.Fatalf("List of a new region: %v", ids)
	}
	for _, size := range []int{0, 1, 4095, 4096, 4097, 100_000} {
		data := image(uint64(size), size)
		id := mustWriteSnapshot(t, st, uint64(size)+10, 2, data)
		meta, got, err := readSnapshot(st, id)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("size %d: read back %d different bytes", size, len(got))
		}
		want := raft.SnapshotMeta{Version: 1, ID: id, Index: uint64(size) + 10, Term: 2,
			Configuration: testConfig, ConfigurationIndex: uint64(size) + 9, Size: int64(size)}
		if fmt.Sprint(*meta) != fmt.Sprint(want) {
			t.Fatalf("meta\n got %+v\nwant %+v", *meta, want)
		}
	}
	// The sink wrote about one chunk at a time, not the whole image.
	if ids := listIDs(t, st); len(ids) != DefaultRetain {
		t.Fatalf("retained %v", ids)
	}
	// A new Snapshots on the same directory sees the same.
	s2 := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: 100})
	ids := listIDs(t, s2.Region(7))
	_, got, err := readSnapshot(s2.Region(7), ids[0])
	if err != nil || !bytes.Equal(got, image(100_000, 100_000)) {
		t.Fatalf("reopened: %v", err)
	}
	if _, _, err := s2.Region(7).Open("no-such-id"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("Open of an unknown id: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "../00000007/" + ids[0], ids[0] + ".tmp"} {
		if _, _, err := s2.Region(7).Open(bad); !errors.Is(err, ErrSnapshotNotFound) {
			t.Fatalf("Open(%q): %v", bad, err)
		}
	}
}

// TestSnapshotTorn damages a complete snapshot in each way a crash or a
// bad disk can, and checks it is either left out of List (and Open fails)
// or, where its damage can only be seen by reading every chunk, that its
// reader fails with ErrCorruption before io.EOF.
func TestSnapshotTorn(t *testing.T) {
	const chunk = 1000
	data := image(1, 10*chunk+7)
	for _, tc := range []struct {
		name   string
		damage func(fs vfs.FS, dir string) error
		listed bool // the damage cannot be seen without reading all chunks
	}{
		{"truncated data", func(fs vfs.FS, dir string) error { return truncate(fs, dir+"/data", -1) }, false},
		{"data cut after a chunk", func(fs vfs.FS, dir string) error { return truncate(fs, dir+"/data", -trailerLen) }, false},
		{"data with extra bytes", func(fs vfs.FS, dir string) error { return appendTo(fs, dir+"/data", []byte{0}) }, false},
		{"data missing", func(fs vfs.FS, dir string) error { return fs.Remove(dir + "/data") }, false},
		{"meta missing", func(fs vfs.FS, dir string) error { return fs.Remove(dir + "/meta") }, false},
		{"meta truncated", func(fs vfs.FS, dir string) error { return truncate(fs, dir+"/meta", -1) }, false},
		{"meta byte flipped", func(fs vfs.FS, dir string) error { return flip(fs, dir+"/meta", -5) }, false},
		{"trailer byte flipped", func(fs vfs.FS, dir string) error { return flip(fs, dir+"/data", -3) }, true},
		{"header byte flipped", func(fs vfs.FS, dir string) error { return flip(fs, dir+"/data", 2) }, true},
		{"chunk payload byte flipped", func(fs vfs.FS, dir string) error {
			return flip(fs, dir+"/data", snapHeaderLen+3*(chunkHeaderLen+chunk)+chunkHeaderLen+17)
		}, true},
		{"chunk length flipped", func(fs vfs.FS, dir string) error {
			return flip(fs, dir+"/data", snapHeaderLen+5*(chunkHeaderLen+chunk))
		}, true},
		{"last chunk crc flipped", func(fs vfs.FS, dir string) error {
			return flip(fs, dir+"/data", snapHeaderLen+10*(chunkHeaderLen+chunk)+4)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: chunk, Retain: 3})
			st := s.Region(1)
			old := mustWriteSnapshot(t, st, 5, 1, image(2, 3000))
			id := mustWriteSnapshot(t, st, 9, 1, data)
			if ids := listIDs(t, st); !slices.Equal(ids, []string{id, old}) {
				t.Fatalf("List %v", ids)
			}
			if err := tc.damage(fs, "snaps/00000001/"+id); err != nil {
				t.Fatal(err)
			}
			ids := listIDs(t, st)
			if !tc.listed {
				if !slices.Equal(ids, []string{old}) {
					t.Fatalf("List after damage: %v, want only %s", ids, old)
				}
			}
			_, got, err := readSnapshot(st, id)
			if err == nil {
				t.Fatalf("read %d bytes of a damaged snapshot without error", len(got))
			}
			if tc.listed {
				mustErrIs(t, err, ErrCorruption)
			}
			t.Log(err)
			// The older snapshot is unharmed: raft falls back to it.
			if _, got, err := readSnapshot(st, old); err != nil || !bytes.Equal(got, image(2, 3000)) {
				t.Fatalf("older snapshot: %v", err)
			}
		})
	}
}

// truncate cuts n bytes (n < 0) off the end of path.
func truncate(fs vfs.FS, path string, n int) error {
	b, err := readFileAll(fs, path)
	if err != nil {
		return err
	}
	return rewrite(fs, path, b[:len(b)+n])
}

func appendTo(fs vfs.FS, path string, extra []byte) error {
	b, err := readFileAll(fs, path)
	if err != nil {
		return err
	}
	return rewrite(fs, path, append(b, extra...))
}

// flip flips the bits of the byte at off (from the end if negative).
func flip(fs vfs.FS, path string, off int) error {
	b, err := readFileAll(fs, path)
	if err != nil {
		return err
	}
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 0xff
	return rewrite(fs, path, b)
}

func readFileAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func rewrite(fs vfs.FS, path string, b []byte) error {
	if err := fs.Remove(path); err != nil {
		return err
	}
	return writeFileSynced(fs, path, b)
}

func TestSnapshotRetainAndCancel(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: 64, Retain: 3})
	st := s.Region(2)
	var ids []string
	for i := uint64(1); i <= 6; i++ {
		ids = append(ids, mustWriteSnapshot(t, st, 10*i, 1+i/4, image(i, 500)))
	}
	want := []string{ids[5], ids[4], ids[3]}
	if got := listIDs(t, st); !slices.Equal(got, want) {
		t.Fatalf("List %v, want %v", got, want)
	}
	names, _ := fs.List("snaps/00000002")
	if len(names) != 3 {
		t.Fatalf("region dir holds %v", names)
	}

	sink, err := st.Create(1, 100, 9, testConfig, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(image(9, 1000)); err != nil {
		t.Fatal(err)
	}
	if names, _ := fs.List("snaps/00000002"); len(names) != 4 {
		t.Fatalf("no temporary dir while writing: %v", names)
	}
	if got := listIDs(t, st); !slices.Equal(got, want) {
		t.Fatalf("List shows a snapshot being written: %v", got)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	if names, _ := fs.List("snaps/00000002"); len(names) != 3 {
		t.Fatalf("Cancel left %v", names)
	}
	if _, err := sink.Write([]byte("x")); !errors.Is(err, ErrSinkClosed) {
		t.Fatalf("Write after Cancel: %v", err)
	}
	if err := sink.Close(); !errors.Is(err, ErrSinkClosed) {
		t.Fatalf("Close after Cancel: %v", err)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatalf("second Cancel: %v", err)
	}
	if _, err := st.Create(2, 1, 1, testConfig, 1, nil); err == nil {
		t.Fatal("Create of snapshot version 2 succeeded")
	}

	if err := s.DropRegion(2); err != nil {
		t.Fatal(err)
	}
	if got := listIDs(t, st); len(got) != 0 {
		t.Fatalf("List after DropRegion: %v", got)
	}
	if _, err := fs.Stat("snaps/00000002"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("region dir after DropRegion: %v", err)
	}
}

// TestSnapshotConcurrent writes snapshots of many regions, and two at once
// of one region, concurrently.
func TestSnapshotConcurrent(t *testing.T) {
	fs := vfs.NewMem()
	fixed := time.Unix(1_800_000_000, 0)
	s := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: 512, Retain: 10,
		TestingKnobs: SnapshotTestingKnobs{Now: func() time.Time { return fixed }}})
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	var ids sync.Map
	for r := uint32(1); r <= 8; r++ {
		for k := 0; k < 2; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint64(1); i <= 3; i++ {
					seed := uint64(r)*100 + uint64(k)*10 + i
					// Same term and index for both writers of a region: the
					// IDs must still differ.
					sink, err := s.Region(r).Create(1, i, 1, testConfig, 1, nil)
					if err != nil {
						errc <- err
						return
					}
					if _, loaded := ids.LoadOrStore(sink.ID(), true); loaded {
						errc <- fmt.Errorf("duplicate snapshot id %s", sink.ID())
					}
					if _, err := sink.Write(image(seed, 5000)); err != nil {
						errc <- err
						return
					}
					if err := sink.Close(); err != nil {
						errc <- err
						return
					}
					_, got, err := readSnapshot(s.Region(r), sink.ID())
					if err != nil || !bytes.Equal(got, image(seed, 5000)) {
						errc <- fmt.Errorf("region %d snapshot %s: %v", r, sink.ID(), err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for r := uint32(1); r <= 8; r++ {
		metas, err := s.Region(r).List()
		if err != nil || len(metas) != 6 {
			t.Fatalf("region %d: %d snapshots, %v", r, len(metas), err)
		}
		for i := 1; i < len(metas); i++ {
			a, b := metas[i-1], metas[i]
			if a.Index < b.Index || (a.Index == b.Index && a.ID <= b.ID) {
				t.Fatalf("region %d: List not newest first: %s before %s", r, a.ID, b.ID)
			}
		}
	}
}

// TestSnapshotCrash crashes (clones the filesystem) before every file
// operation of a snapshot's Close, and while it is being written, and
// checks what OpenSnapshots finds in the clone: the temporary directory is
// gone, the previous snapshot is listed and whole, and the new one is
// listed only if it reads back whole (and always once Close returned nil).
func TestSnapshotCrash(t *testing.T) {
	data := image(3, 20_000)
	for point := 1; ; point++ {
		mem := vfs.NewCrashableMem()
		var ops atomic.Int64
		ops.Store(-1) // not counting
		var clone *vfs.MemFS
		rng := rand.New(rand.NewPCG(uint64(point), 5))
		hook := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && ops.Load() >= 0 && ops.Add(1) == int64(point) {
				clone = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(3) * 50, RNG: rng})
			}
			return nil
		})
		fs := errorfs.Wrap(mem, hook)
		s := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: 4096})
		old := mustWriteSnapshot(t, s.Region(1), 5, 1, image(4, 9000))
		sink, err := s.Region(1).Create(1, 9, 2, testConfig, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		half := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rng})
		if _, err := sink.Write(data); err != nil {
			t.Fatal(err)
		}
		ops.Store(0)
		closeErr := sink.Close()
		ops.Store(-1)
		if closeErr != nil {
			t.Fatal(closeErr)
		}
		if clone == nil {
			// point is past Close's last operation: crash after it.
			clone = mem.CrashClone(vfs.CrashCloneCfg{})
			checkCrashedSnapshots(t, clone, old, sink.ID(), data, true)
			checkCrashedSnapshots(t, half, old, sink.ID(), data, false)
			t.Logf("crashed before each of Close's %d file operations", point-1)
			return
		}
		checkCrashedSnapshots(t, clone, old, sink.ID(), data, false)
	}
}

func checkCrashedSnapshots(t *testing.T, fs *vfs.MemFS, old, id string, data []byte, mustHaveNew bool) {
	t.Helper()
	s := mustOpenSnapshots(t, fs, SnapshotOptions{})
	names, err := fs.List("snaps/00000001")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, snapTmpExt) {
			t.Fatalf("OpenSnapshots left %s", n)
		}
	}
	ids := listIDs(t, s.Region(1))
	switch {
	case slices.Equal(ids, []string{old}) && !mustHaveNew:
	case slices.Equal(ids, []string{id, old}):
		if _, got, err := readSnapshot(s.Region(1), id); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("new snapshot listed after a crash but does not read back: %v", err)
		}
	default:
		t.Fatalf("after a crash List is %v (old %s, new %s, new required %v)", ids, old, id, mustHaveNew)
	}
	if _, got, err := readSnapshot(s.Region(1), old); err != nil || !bytes.Equal(got, image(4, 9000)) {
		t.Fatalf("old snapshot after a crash: %v", err)
	}
}

// TestSnapshotCloseFails: a failing file operation during Close returns
// the error and leaves no snapshot and no temporary directory.
func TestSnapshotCloseFails(t *testing.T) {
	for point := 1; ; point++ {
		var ops atomic.Int64
		ops.Store(-1)
		hook := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpRemoveAll && op.Kind != errorfs.OpRemove &&
				ops.Load() >= 0 && ops.Add(1) == int64(point) {
				return errorfs.ErrInjected
			}
			return nil
		})
		fs := errorfs.Wrap(vfs.NewMem(), hook)
		s := mustOpenSnapshots(t, fs, SnapshotOptions{ChunkSize: 4096})
		sink, err := s.Region(1).Create(1, 9, 2, testConfig, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write(image(5, 10_000)); err != nil {
			t.Fatal(err)
		}
		ops.Store(0)
		err = sink.Close()
		ops.Store(-1)
		if err == nil {
			if point < 5 {
				t.Fatalf("Close never failed (point %d)", point)
			}
			return
		}
		mustErrIs(t, err, errorfs.ErrInjected)
		names, _ := fs.List("snaps/00000001")
		if ids := listIDs(t, s.Region(1)); len(ids) != 0 || len(names) != 0 {
			t.Fatalf("point %d: Close failed (%v) but left %v (listed %v)", point, err, names, ids)
		}
	}
}

// TestSnapshotWritesBack: on a real file system the data file's dirty
// pages are handed to the disk every BytesPerSync bytes while the image is
// written (sync_file_range: pebble's SyncTo), not all at Close, where the
// log's syncs would wait behind them; off, nothing is synced before Close.
// Either way the snapshot reads back whole.
func TestSnapshotWritesBack(t *testing.T) {
	data := image(7, 8<<20)
	for _, tc := range []struct {
		bytesPerSync int
		wantSyncs    bool
	}{{0, true}, {-1, false}} {
		var syncs atomic.Int64
		var writing atomic.Bool
		hook := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if writing.Load() && strings.HasSuffix(op.Path, "/"+snapDataName) &&
				(op.Kind == errorfs.OpFileSyncTo || op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) {
				syncs.Add(1)
			}
			return nil
		})
		fs := errorfs.Wrap(vfs.Default, hook)
		s := mustOpenSnapshots(t, fs, SnapshotOptions{Dir: t.TempDir(), BytesPerSync: tc.bytesPerSync})
		sink, err := s.Region(1).Create(1, 9, 2, testConfig, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		writing.Store(true)
		for b := data; len(b) > 0; b = b[min(len(b), 64<<10):] {
			if _, err := sink.Write(b[:min(len(b), 64<<10)]); err != nil {
				t.Fatal(err)
			}
		}
		writing.Store(false)
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		if n := syncs.Load(); (n > 0) != tc.wantSyncs {
			t.Errorf("BytesPerSync %d: %d syncs of the data file while 8 MiB were written", tc.bytesPerSync, n)
		} else {
			t.Logf("BytesPerSync %d: %d syncs while writing", tc.bytesPerSync, n)
		}
		if _, got, err := readSnapshot(s.Region(1), sink.ID()); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("snapshot does not read back: %v", err)
		}
	}
}
