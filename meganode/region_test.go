package meganode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cellstore/cell/blink"
)

// smallOptions are options for a 1 MiB file-backed region in a test
// directory, with four meganodes of sixteen 512-byte nodes.
func smallOptions(t *testing.T) Options {
	return Options{
		ID:           0x42,
		Size:         1 << 20,
		MeganodeSize: 16 * 512,
		NodeSize:     512,
		Meganodes:    4,
		AtomSize:     16,
		Hugepages:    HugepagesOff,
		Dir:          t.TempDir(),
		Name:         uniqueName(t),
		Logger:       testLogger(t),
	}
}

// uniqueName names region files of this test run; /dev/shm is shared with
// other processes.
func uniqueName(t *testing.T) string {
	clean := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, t.Name())
	return fmt.Sprintf("cell-test-%d-%s-%x", os.Getpid(), clean, rand.Uint32())
}

// mustCreate creates a region; the test closes it and removes its file.
func mustCreate(t *testing.T, opts Options) *Region {
	t.Helper()
	r, err := Create(opts)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("regions not supported on %s", runtime.GOOS)
	}
	if err != nil {
		t.Fatal(err)
	}
	cleanupRegion(t, r)
	return r
}

// cleanupRegion checks, closes and removes r when the test ends.
func cleanupRegion(t *testing.T, r *Region) {
	t.Cleanup(func() {
		if err := r.Check(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("region %s check at cleanup: %v", r.Path(), err)
		}
		_ = r.Close()
		_ = r.Remove()
	})
}

func mustOpen(t *testing.T, path string) *Region {
	t.Helper()
	r, err := Open(path, OpenOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func TestOptionsDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := o.layout()
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != 1<<30 || o.MeganodeSize != 64<<20 || o.NodeSize != 1024 || o.AtomSize != 64 ||
		o.Name != "cell-region-000000" || o.ShmDir != "/dev/shm" || o.Dir == "" || o.Logger == nil || l.Slots != 4 {
		t.Fatalf("defaults %+v, %d slots", o, l.Slots)
	}
	o = Options{ID: 0x2a, Size: 1<<20 + 1, MeganodeSize: 64 << 10}
	o.EnsureDefaults()
	if o.Size != 1<<20+4096 || o.Name != "cell-region-00002a" {
		t.Fatalf("size %d name %q", o.Size, o.Name)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(o *Options)
		want   string
	}{
		{"region id", func(o *Options) { o.ID = 1 << 24 }, "region ID"},
		{"mode", func(o *Options) { o.Hugepages = 7 }, "HugepageMode(7)"},
		{"negative slots", func(o *Options) { o.Meganodes = -1 }, "slots"},
		{"fraction", func(o *Options) { o.NodeFraction = 1.5 }, "node fraction"},
		{"name with slash", func(o *Options) { o.Name = "a/b" }, "file name"},
		{"dot name", func(o *Options) { o.Name = ".." }, "file name"},
		{"slots do not fit", func(o *Options) { o.Meganodes = 200 }, "do not fit"},
		{"node size", func(o *Options) { o.NodeSize = 1000 }, "node size"},
		{"atom", func(o *Options) { o.AtomSize = 8 }, "atom size"},
		{"too large", func(o *Options) { o.Size = 2 << 40 }, "region size"},
		{"file group", func(o *Options) { o.FileGroup = -1 }, "file group"},
		{"fraction leaves no slot room", func(o *Options) { o.Meganodes = 0; o.MeganodeSize = 1 << 20 }, "do not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := smallOptions(t)
			tc.mutate(&o)
			o.EnsureDefaults()
			err := o.Validate()
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalidOptions containing %q", err, tc.want)
			}
			if _, err := Create(o); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Create = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestCreateCloseReopen(t *testing.T) {
	opts := smallOptions(t)
	r := mustCreate(t, opts)
	if r.Backing() != BackingFile || r.Path() != filepath.Join(opts.Dir, opts.Name) || r.ID() != 0x42 {
		t.Fatalf("created %v", r)
	}
	if uint64(len(r.Bytes())) != opts.Size || r.Layout().Slots != 4 || r.HugePageSize() != 0 {
		t.Fatalf("%d bytes, layout %+v", len(r.Bytes()), r.Layout())
	}
	root := blink.MakePtr(0x42, r.Layout().SlotBase(2))
	r.SetRoot(root)
	off, err := r.Extents().Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	copy(r.Bytes()[off:], "extent bytes survive a reopen")
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	stats := r.Extents().Stats()

	// The file is locked while open, and never overwritten.
	if _, err := Open(r.Path(), OpenOptions{Logger: testLogger(t)}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	if _, err := Create(opts); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file = %v, want fs.ErrExist", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	r2 := mustOpen(t, r.Path())
	if r2.ID() != r.ID() || r2.Layout() != r.Layout() || r2.Backing() != BackingFile || r2.Root() != root {
		t.Fatalf("reopened %v layout %+v root %v", r2, r2.Layout(), r2.Root())
	}
	if got := r2.Extents().Stats(); got != stats {
		t.Fatalf("reopened extent stats %+v, want %+v", got, stats)
	}
	if !bytes.HasPrefix(r2.Bytes()[off:], []byte("extent bytes survive a reopen")) {
		t.Fatal("extent contents lost")
	}
	if err := r2.Check(); err != nil {
		t.Fatal(err)
	}
	r2.Extents().Free(off, 1000)
	if s := r2.Extents().Stats(); s.InUse != 0 || s.BadFrees != 0 {
		t.Fatalf("free after reopen: %+v", s)
	}
	var b strings.Builder
	if err := r2.Dump(&b); err != nil || !strings.Contains(b.String(), "region id        0x42") {
		t.Fatalf("dump: %v\n%s", err, b.String())
	}
}

func TestClosedRegion(t *testing.T) {
	r := mustCreate(t, smallOptions(t))
	ext := r.Extents()
	off, _ := ext.Alloc(10)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewMeganode(0, blink.Full, blink.Options{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewMeganode = %v", err)
	}
	if _, err := r.OpenMeganode(0, blink.Options{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("OpenMeganode = %v", err)
	}
	if err := r.FreeMeganode(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("FreeMeganode = %v", err)
	}
	if _, err := ext.Alloc(10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc = %v", err)
	}
	if err := ext.FreeChecked(off, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("FreeChecked = %v", err)
	}
	ext.Free(off, 10) // no fault
	for name, err := range map[string]error{"Sync": r.Sync(), "Check": r.Check(), "Extents.Check": ext.Check(), "Dump": r.Dump(&strings.Builder{})} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s = %v, want ErrClosed", name, err)
		}
	}
	if s := r.Meganodes(); s != nil {
		t.Fatalf("Meganodes = %v", s)
	}
	if err := r.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	if err := r.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

// TestOpenCorrupt: reopening a damaged region file fails with ErrCorruption
// and leaves the file unlocked.
func TestOpenCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, f *os.File, l Layout)
		want   string
	}{
		{"magic", func(t *testing.T, f *os.File, l Layout) { writeAt(t, f, offMagic, []byte("XXXX")) }, "magic"},
		{"header field", func(t *testing.T, f *os.File, l Layout) { writeAt(t, f, offAtomSize, []byte{32}) }, "CRC"},
		{"slot bitmap", func(t *testing.T, f *os.File, l Layout) { writeAt(t, f, offSlotBitmap, []byte{0x10}) }, "slot 4 of 4"},
		{"control byte", func(t *testing.T, f *os.File, l Layout) { writeAt(t, f, int64(l.ExtentOff)+1, []byte{ctrlHead}) }, "extent atom"},
		{"truncated header", func(t *testing.T, f *os.File, l Layout) { must(t, f.Truncate(100)) }, "not a region file"},
		{"truncated region", func(t *testing.T, f *os.File, l Layout) { must(t, f.Truncate(int64(l.Size/2))) }, "-byte image"},
		{"zeroed", func(t *testing.T, f *os.File, l Layout) { writeAt(t, f, 0, make([]byte, headerSize)) }, "magic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustCreate(t, smallOptions(t))
			l := r.Layout()
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(r.Path(), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, f, l)
			must(t, f.Close())
			_, err = Open(r.Path(), OpenOptions{Logger: testLogger(t)})
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want ErrCorruption containing %q", err, tc.want)
			}
			// A failed Open releases the file: recreate it cleanly.
			must(t, os.Remove(r.Path()))
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing"), OpenOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing file = %v", err)
	}
}

func writeAt(t *testing.T, f *os.File, off int64, b []byte) {
	t.Helper()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hugepagesAvailable reads /proc/meminfo and /proc/mounts directly (not
// through the package's parsers) and reports whether a hugetlbfs mount
// exists and the default huge page size has n free, unreserved pages.
func hugepagesAvailable(t *testing.T, n uint64) bool {
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil || !bytes.Contains(mounts, []byte(" hugetlbfs ")) {
		return false
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return false
	}
	defer f.Close()
	vals := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 {
			v, _ := strconv.ParseUint(fs[1], 10, 64)
			vals[strings.TrimSuffix(fs[0], ":")] = v
		}
	}
	t.Logf("HugePages_Total %d Free %d Rsvd %d", vals["HugePages_Total"], vals["HugePages_Free"], vals["HugePages_Rsvd"])
	return vals["HugePages_Free"] >= vals["HugePages_Rsvd"]+n
}

// TestHugepagesOn: mode on either gets hugetlbfs or fails with
// ErrNoHugepages, according to what the machine has reserved.
func TestHugepagesOn(t *testing.T) {
	opts := smallOptions(t)
	opts.Hugepages = HugepagesOn
	opts.Size = 2 << 20
	r, err := Create(opts)
	if err == nil {
		t.Cleanup(func() {
			_ = r.Close()
			_ = r.Remove()
		})
	}
	if !hugepagesAvailable(t, 1) {
		if !errors.Is(err, ErrNoHugepages) {
			t.Fatalf("Create with hugepages on and none reserved = %v, want ErrNoHugepages", err)
		}
		t.Logf("as expected: %v", err)
		entries, _ := os.ReadDir(opts.Dir)
		if len(entries) != 0 {
			t.Fatalf("failed Create left files: %v", entries)
		}
		return
	}
	if err != nil {
		// Pages are reserved, but the mount may not be writable by us.
		if !errors.Is(err, ErrNoHugepages) {
			t.Fatalf("Create = %v", err)
		}
		t.Skipf("huge pages reserved but unusable here: %v", err)
	}
	if r.Backing() != BackingHugetlbfs || r.HugePageSize() == 0 {
		t.Fatalf("backing %v, huge page size %d", r.Backing(), r.HugePageSize())
	}
}

// TestAutoBacking: auto takes hugetlbfs when pages are reserved, else
// /dev/shm, else a plain file.
func TestAutoBacking(t *testing.T) {
	opts := smallOptions(t)
	opts.Hugepages = HugepagesAuto
	r := mustCreate(t, opts)
	switch {
	case hugepagesAvailable(t, 1):
		if r.Backing() != BackingHugetlbfs {
			t.Logf("huge pages reserved but %v chosen (mount not usable?)", r.Backing())
		}
	case usableDirForTest(DefaultShmDir):
		if r.Backing() != BackingShm || filepath.Dir(r.Path()) != DefaultShmDir {
			t.Fatalf("auto chose %v at %s, want shm in %s", r.Backing(), r.Path(), DefaultShmDir)
		}
	default:
		if r.Backing() != BackingFile {
			t.Fatalf("auto chose %v", r.Backing())
		}
	}
	t.Logf("auto: %v", r)
	backing, path := r.Backing(), r.Path()
	must(t, r.Close())
	r2 := mustOpen(t, path)
	if r2.Backing() != backing {
		t.Fatalf("reopened as %v, created as %v", r2.Backing(), backing)
	}
	must(t, r2.Close())
	must(t, r.Remove())
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("region file not removed: %v", err)
	}
}

// TestAutoFallsBackToFile: with neither huge pages nor a shm directory,
// auto uses a plain file in Dir.
func TestAutoFallsBackToFile(t *testing.T) {
	if hugepagesAvailable(t, 1) {
		t.Skip("huge pages are reserved: auto would use them")
	}
	opts := smallOptions(t)
	opts.Hugepages = HugepagesAuto
	opts.ShmDir = filepath.Join(t.TempDir(), "no-such-dir")
	r := mustCreate(t, opts)
	if r.Backing() != BackingFile || filepath.Dir(r.Path()) != opts.Dir {
		t.Fatalf("auto fell back to %v at %s", r.Backing(), r.Path())
	}
}

func usableDirForTest(dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	f, err := os.CreateTemp(dir, "cell-probe-*")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}
