package meganode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/testutil"
)

// imageOptions are options for an 8 MiB region (four meganodes of 256
// 1 KiB nodes, 64-byte atoms) backed by backing ("file", "shm" or
// "hugetlbfs"), in a test directory or with a name unique to the test.
func imageOptions(t *testing.T, backing string) Options {
	o := Options{
		ID:           0x51,
		Size:         8 << 20,
		MeganodeSize: 256 << 10,
		NodeSize:     1024,
		Meganodes:    4,
		AtomSize:     64,
		Hugepages:    HugepagesOff,
		Dir:          t.TempDir(),
		Name:         uniqueName(t),
		Logger:       testLogger(t),
	}
	switch backing {
	case "shm":
		// Auto with a hugetlbfs directory that is no hugetlbfs mount
		// falls back to ShmDir.
		o.Hugepages = HugepagesAuto
		o.HugetlbfsDir = t.TempDir()
	case "hugetlbfs":
		o.Hugepages = HugepagesOn
	}
	return o
}

// mustCreateBacking creates a region with opts and skips the test when the
// backing wanted is not available here. The test closes the region and
// removes its file.
func mustCreateBacking(t *testing.T, opts Options, backing string) *Region {
	t.Helper()
	r, err := Create(opts)
	switch {
	case errors.Is(err, ErrNoHugepages):
		t.Skipf("no hugetlbfs backing here: %v", err)
	case errors.Is(err, ErrUnsupported):
		t.Skipf("regions not supported on %s", runtime.GOOS)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Check(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("region check at cleanup: %v", err)
		}
		_ = r.Close()
		_ = r.Remove()
	})
	want := map[string]Backing{"file": BackingFile, "shm": BackingShm, "hugetlbfs": BackingHugetlbfs}[backing]
	if r.Backing() != want {
		t.Skipf("wanted a %s region, got %v (no usable %s)", backing, r, opts.ShmDir)
	}
	return r
}

// mustRestore restores a region from img; the test closes it and removes
// its file.
func mustRestore(t *testing.T, opts Options, img []byte) *Region {
	t.Helper()
	r, err := RestoreImage(opts, bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	cleanupRegion(t, r)
	return r
}

// mustImage returns the image of r.
func mustImage(t testing.TB, r *Region) ([]byte, ImageStats) {
	t.Helper()
	var b bytes.Buffer
	st, err := r.WriteImage(&b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != uint64(b.Len()) || st.RegionSize != r.Layout().Size {
		t.Fatalf("stats %+v for an image of %d bytes", st, b.Len())
	}
	return b.Bytes(), st
}

// mustSameBytes fails the test at the first page where the regions differ.
func mustSameBytes(t *testing.T, want, got *Region) {
	t.Helper()
	a, b := want.Bytes(), got.Bytes()
	if len(a) != len(b) {
		t.Fatalf("regions of %d and %d bytes", len(a), len(b))
	}
	for p := 0; p < len(a); p += imagePageSize {
		if !bytes.Equal(a[p:p+imagePageSize], b[p:p+imagePageSize]) {
			i := p
			for a[i] == b[i] {
				i++
			}
			t.Fatalf("regions differ at %#x (page %#x): %#02x, want %#02x", i, p, b[i], a[i])
		}
	}
}

// workloadModel is what a workload left in the trees: slot -> key -> value.
type workloadModel map[int]map[string][]byte

// runWorkload puts and deletes keys through three meganode trees, frees one
// meganode, allocates and frees extents directly and sets the root, all
// from rng.
func runWorkload(t *testing.T, r *Region, rng *rand.Rand) workloadModel {
	t.Helper()
	model := workloadModel{}
	var ms []*Meganode
	for range 3 {
		m, err := r.NewMeganode(0, blink.Full, blink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
		model[m.Slot()] = map[string][]byte{}
	}
	full := map[int]bool{}
	keys := map[int][]string{} // the model's keys in insertion order, for replayable deletes
	for i := range 3000 {
		m := ms[rng.IntN(len(ms))]
		kv := model[m.Slot()]
		if ks := keys[m.Slot()]; len(ks) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(ks))
			k := ks[j]
			if ok, err := m.Tree().Delete([]byte(k)); err != nil || !ok {
				t.Fatalf("delete %q: %v, %v", k, ok, err)
			}
			delete(kv, k)
			keys[m.Slot()] = slices.Delete(ks, j, j+1)
			continue
		}
		if full[m.Slot()] {
			continue
		}
		key := fmt.Appendf(nil, "key-%06d-%x", i, rng.Uint32())
		val := make([]byte, 1+rng.IntN(2000))
		for j := range val {
			val[j] = byte(rng.IntN(255) + 1)
		}
		err := m.Tree().Put(key, val)
		if errors.Is(err, blink.ErrNeedsSplit) || errors.Is(err, blink.ErrExtentsFull) {
			full[m.Slot()] = true
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		kv[string(key)] = val
		keys[m.Slot()] = append(keys[m.Slot()], string(key))
	}
	// A meganode with data, freed: its memory stays as it is.
	must(t, r.FreeMeganode(ms[1].Slot()))
	delete(model, ms[1].Slot())

	// Extents written and freed directly: freed blocks keep their bytes
	// and get free list links.
	type block struct {
		off uint64
		n   int
	}
	var blocks []block
	for range 200 {
		n := 1 + rng.IntN(20000)
		off, err := r.Extents().Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		fill := r.Bytes()[off : off+uint64(n)]
		for j := range fill {
			fill[j] = byte(rng.Uint32())
		}
		blocks = append(blocks, block{off, n})
	}
	rng.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	for _, b := range blocks[:len(blocks)/2] {
		must(t, r.Extents().FreeChecked(b.off, b.n))
	}
	r.SetRoot(ms[0].Ptr())
	for slot, kv := range model {
		t.Logf("workload: slot %d holds %d keys (full: %v)", slot, len(kv), full[slot])
	}
	mustCheck(t, r.Extents())
	for _, m := range []*Meganode{ms[0], ms[2]} {
		if err := m.Tree().CheckErr(); err != nil {
			t.Fatal(err)
		}
	}
	return model
}

// checkModel opens the meganodes of r and reads every key of the model.
func checkModel(t *testing.T, r *Region, model workloadModel) map[int]*Meganode {
	t.Helper()
	if got := r.Meganodes(); !slices.Equal(got, slices.Sorted(maps.Keys(model))) {
		t.Fatalf("meganodes %v, model has %d", got, len(model))
	}
	ms := map[int]*Meganode{}
	for slot, kv := range model {
		m, err := r.OpenMeganode(slot, blink.Options{})
		skipOnBlinkOpenBug(t, err)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Tree().CheckErr(); err != nil {
			t.Fatal(err)
		}
		for k, v := range kv {
			got, err := m.Tree().Get([]byte(k), nil)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("slot %d key %q: %d bytes, %v; want %d bytes", slot, k, len(got), err, len(v))
			}
		}
		ms[slot] = m
	}
	return ms
}

// TestImageRoundTrip: after a workload, the region restored from an image
// is the source region byte for byte, on every backing available here;
// both then evolve identically under the same operations (what raft's
// replay needs).
func TestImageRoundTrip(t *testing.T) {
	for _, backing := range []string{"file", "shm", "hugetlbfs", "file-sizeclasses"} {
		t.Run(backing, func(t *testing.T) {
			sizeClasses := strings.HasSuffix(backing, "-sizeclasses")
			backing := strings.TrimSuffix(backing, "-sizeclasses")
			opts := imageOptions(t, backing)
			opts.SizeClasses = sizeClasses
			src := mustCreateBacking(t, opts, backing)
			seed := rand.Uint64()
			t.Logf("seed %d, %v", seed, src)
			model := runWorkload(t, src, rand.New(rand.NewPCG(seed, 0)))

			img, st := mustImage(t, src)
			t.Logf("image: %d pages, %d bytes of a %d-byte region", st.Pages, st.Bytes, st.RegionSize)
			// Holes skipped with SEEK_DATA lose nothing: the image is the
			// one a scan of every page makes.
			var all bytes.Buffer
			if _, err := writeImage(&all, src.Bytes(), header{Layout: src.Layout(), ID: src.ID()}, scanAll); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(img, all.Bytes()) {
				t.Fatalf("image skipping holes (%d bytes) differs from the full scan's (%d bytes)", len(img), all.Len())
			}

			ropts := opts
			ropts.Name = opts.Name + "-restored"
			dst := mustRestore(t, ropts, img)
			if dst.ID() != src.ID() || dst.Layout() != src.Layout() || dst.Backing() != src.Backing() ||
				dst.Path() != filepath.Join(filepath.Dir(src.Path()), ropts.Name) || dst.Root() != src.Root() {
				t.Fatalf("restored %v layout %+v root %v, from %v", dst, dst.Layout(), dst.Root(), src)
			}
			mustSameBytes(t, src, dst)
			if dst.SizeClasses() != sizeClasses || src.Extents().SlabStats() != dst.Extents().SlabStats() {
				t.Fatalf("restored size classes %v, slab stats %+v, source's %+v", dst.SizeClasses(), dst.Extents().SlabStats(), src.Extents().SlabStats())
			}
			if got, want := dst.Extents().Stats(), src.Extents().Stats(); got != want {
				t.Fatalf("restored extent stats %+v, want %+v", got, want)
			}
			srcMs, dstMs := checkModel(t, src, model), checkModel(t, dst, model)

			// The same operations on both give the same offsets and bytes.
			rng := rand.New(rand.NewPCG(seed, 1))
			slots := slices.Sorted(maps.Keys(srcMs))
			for i := range 300 {
				slot := slots[i%len(slots)]
				key := fmt.Appendf(nil, "after-%04d", i)
				val := bytes.Repeat([]byte{byte(i)}, 1+rng.IntN(3000))
				errA, errB := srcMs[slot].Tree().Put(key, val), dstMs[slot].Tree().Put(key, val)
				if (errA == nil) != (errB == nil) {
					t.Fatalf("put %q: source %v, restored %v", key, errA, errB)
				}
				n := 1 + rng.IntN(5000)
				offA, errA := src.Extents().Alloc(n)
				offB, errB := dst.Extents().Alloc(n)
				if offA != offB || (errA == nil) != (errB == nil) {
					t.Fatalf("alloc %d: source %#x %v, restored %#x %v", n, offA, errA, offB, errB)
				}
			}
			mustSameBytes(t, src, dst)

			// An image of the restored region is the source's.
			img2, _ := mustImage(t, dst)
			img3, _ := mustImage(t, src)
			if !bytes.Equal(img2, img3) {
				t.Fatal("images of the source and restored regions differ after the same operations")
			}
		})
	}
}

// TestRestoreImageTruncated: an image cut anywhere fails with
// ErrCorruption (and io.ErrUnexpectedEOF) and leaves no file.
func TestRestoreImageTruncated(t *testing.T) {
	opts := smallOptions(t)
	src := mustCreate(t, opts)
	fillSome(t, src)
	img, _ := mustImage(t, src)

	// Every byte of the header and of each frame, the first and last
	// bytes of each run's data, and random cuts.
	cuts := map[int]bool{}
	frames := imageFrames(t, img)
	for i := range imageHeaderSize + 1 {
		cuts[i] = true
	}
	for _, f := range frames {
		for i := range runFrameSize + 2 {
			cuts[f.at+i] = true
		}
		cuts[f.at+runFrameSize+f.length-1] = true
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		cuts[rng.IntN(len(img))] = true
	}
	cuts[len(img)-1] = true
	t.Logf("%d runs, %d cut points", len(frames)-1, len(cuts))

	ropts := opts
	ropts.Name = restoredName(t)
	path := filepath.Join(opts.Dir, ropts.Name)
	for cut := range cuts {
		r, err := RestoreImage(ropts, bytes.NewReader(img[:cut]))
		if err == nil {
			_ = r.Close()
			_ = r.Remove()
			t.Fatalf("image cut at %d of %d restored", cut, len(img))
		}
		if !errors.Is(err, ErrCorruption) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("image cut at %d of %d: %v, want ErrCorruption and io.ErrUnexpectedEOF", cut, len(img), err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("image cut at %d left a file: %v", cut, err)
		}
	}
	// The whole image restores, and nothing after it is read.
	rest := []byte("next image")
	rd := bytes.NewReader(append(slices.Clone(img), rest...))
	r, err := RestoreImage(ropts, rd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(); _ = r.Remove() })
	mustSameBytes(t, src, r)
	if rd.Len() != len(rest) {
		t.Fatalf("RestoreImage left %d bytes after the image, want %d", rd.Len(), len(rest))
	}
}

// fillSome puts a meganode with a few keys and some extents in r.
func fillSome(t *testing.T, r *Region) {
	t.Helper()
	m, err := r.NewMeganode(0, blink.Full, blink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		must(t, m.Tree().Put(fmt.Appendf(nil, "k%03d", i), bytes.Repeat([]byte{byte(i + 1)}, 100+50*i)))
	}
	off, err := r.Extents().Alloc(20000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		r.Bytes()[off+uint64(i)] = byte(i%251 + 1)
	}
}

// imageFrame is a run frame found in an image.
type imageFrame struct {
	at          int // image offset of the frame
	off         uint64
	length, crc int
}

// imageFrames walks the frames of a valid image, the end run last.
func imageFrames(t testing.TB, img []byte) []imageFrame {
	t.Helper()
	le := binary.LittleEndian
	var fs []imageFrame
	for at := imageHeaderSize; ; {
		if at+runFrameSize > len(img) {
			t.Fatalf("image ends inside a frame at %d", at)
		}
		f := imageFrame{at: at, off: le.Uint64(img[at:]), length: int(le.Uint32(img[at+8:])), crc: int(le.Uint32(img[at+12:]))}
		fs = append(fs, f)
		at += runFrameSize + f.length
		if f.off == endRunOffset {
			return fs
		}
	}
}

// TestRestoreImageCorrupt: a changed byte anywhere in the framing or the
// data fails with ErrCorruption and leaves no file; so do images whose
// CRCs are right but whose runs or region break the rules.
func TestRestoreImageCorrupt(t *testing.T) {
	opts := smallOptions(t)
	src := mustCreate(t, opts)
	fillSome(t, src)
	img, _ := mustImage(t, src)
	frames := imageFrames(t, img)
	data := frames[len(frames)/2]
	end := frames[len(frames)-1]
	le := binary.LittleEndian

	for _, tc := range []struct {
		name string
		at   int // byte flipped
		want string
	}{
		{"magic", imgOffMagic, "magic"},
		{"version", imgOffVersion, "version"},
		{"header field", imgOffRegionSize + 2, "header CRC"},
		{"header crc", imgOffCRC, "header CRC"},
		{"run offset", data.at + runOffOffset + 1, ""},
		{"run length", data.at + runOffLength + 1, ""},
		{"run crc", data.at + runOffCRC, "CRC"},
		{"run data", data.at + runFrameSize + data.length/2, "CRC"},
		{"first run data", frames[0].at + runFrameSize + 9, "CRC"},
		{"end offset", end.at + runOffOffset, ""},
		{"end length", end.at + runOffLength, ""},
		{"end crc", end.at + runOffCRC + 3, "trailer CRC"},
		{"trailer runs", end.at + runFrameSize + trailerOffRuns, "trailer CRC"},
		{"trailer bytes", end.at + runFrameSize + trailerOffBytes + 1, "trailer CRC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := slices.Clone(img)
			bad[tc.at] ^= 0x10
			ropts := opts
			ropts.Name = restoredName(t)
			mustNotRestore(t, ropts, bad, ErrCorruption, tc.want)
		})
	}

	// CRCs right, rules broken.
	h := header{Layout: src.Layout(), ID: src.ID()}
	pages := func(off uint64, n int) []byte { return src.Bytes()[off : off+uint64(n)*imagePageSize] }
	for _, tc := range []struct {
		name string
		id   uint32 // the region ID asked for, when not h.ID
		img  []byte
		want string
	}{
		{"runs out of order", 0, buildImage(h, []testRun{{0x2000, pages(0x2000, 1)}, {0, pages(0, 1)}}), "before the end"},
		{"runs overlap", 0, buildImage(h, []testRun{{0, pages(0, 2)}, {0x1000, pages(0x1000, 1)}}), "before the end"},
		{"run repeated", 0, buildImage(h, []testRun{{0, pages(0, 1)}, {0, pages(0, 1)}}), "before the end"},
		{"run past the end", 0, buildImage(h, []testRun{{h.Size - imagePageSize, make([]byte, 2*imagePageSize)}}), "past the region"},
		{"run misaligned", 0, buildImage(h, []testRun{{0x800, pages(0, 1)}}), "not page aligned"},
		{"run not whole pages", 0, buildImage(h, []testRun{{0, pages(0, 1)[:100]}}), "whole pages"},
		{"run too long", 0, buildImage(h, []testRun{{0, make([]byte, maxRunLength+imagePageSize)}}), "whole pages"},
		{"no region header", 0, buildImage(h, nil), "bad region magic"},
		{"region header of another region", h.ID + 1, func() []byte {
			other := h
			other.ID++
			return buildImage(other, []testRun{{0, pages(0, 1)}})
		}(), "region header of region"},
		{"control byte", 0, func() []byte {
			ctrl := slices.Clone(pages(h.ExtentOff, 1))
			ctrl[1] = ctrlHead // an atom inside a block marked as a head
			return buildImage(h, []testRun{{0, pages(0, 1)}, {h.ExtentOff, ctrl}})
		}(), "extent atom"},
		{"trailer run count", 0, func() []byte {
			b := buildImage(h, []testRun{{0, pages(0, 1)}})
			tr := b[len(b)-trailerSize:]
			le.PutUint64(tr[trailerOffRuns:], 2)
			refreshFrameCRC(b[len(b)-trailerSize-runFrameSize:])
			return b
		}(), "trailer says 2 runs"},
		{"end run length", 0, func() []byte {
			b := buildImage(h, nil)
			fr := b[len(b)-trailerSize-runFrameSize:]
			le.PutUint32(fr[runOffLength:], 8)
			return b
		}(), "end run of 8 bytes"},
		{"image header layout", 0, func() []byte {
			b := slices.Clone(img)
			le.PutUint32(b[imgOffSlots:], 1<<20)
			le.PutUint32(b[imgOffCRC:], crc32.Checksum(b[:imgOffCRC], castagnoli))
			return b
		}(), "slots"},
		{"page size", 0, func() []byte {
			b := slices.Clone(img)
			le.PutUint32(b[imgOffPageSize:], 8192)
			le.PutUint32(b[imgOffCRC:], crc32.Checksum(b[:imgOffCRC], castagnoli))
			return b
		}(), "page size 8192"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ropts := opts
			ropts.Name = restoredName(t)
			if tc.id != 0 {
				ropts.ID = tc.id
			}
			mustNotRestore(t, ropts, tc.img, ErrCorruption, tc.want)
		})
	}
}

// restoredName names the file of a region the test restores.
func restoredName(t *testing.T) string { return uniqueName(t) + "-restored" }

// mustNotRestore checks that img does not restore, with an error wrapping
// want and containing msg, and leaves no file behind.
func mustNotRestore(t *testing.T, opts Options, img []byte, want error, msg string) {
	t.Helper()
	r, err := RestoreImage(opts, bytes.NewReader(img))
	if err == nil {
		_ = r.Close()
		_ = r.Remove()
		t.Fatalf("restored")
	}
	if !errors.Is(err, want) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("RestoreImage = %v, want %v containing %q", err, want, msg)
	}
	t.Logf("as expected: %v", err)
	if _, err := os.Stat(filepath.Join(opts.Dir, opts.Name)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("failed restore left a file: %v", err)
	}
}

type testRun struct {
	off  uint64
	data []byte
}

// buildImage encodes an image of region h with the given runs, whatever
// they hold, with correct CRCs and trailer.
func buildImage(h header, runs []testRun) []byte {
	b := make([]byte, imageHeaderSize)
	encodeImageHeader(b, h)
	for _, r := range runs {
		fr := make([]byte, runFrameSize+len(r.data))
		copy(fr[runFrameSize:], r.data)
		putFrame(fr, r.off, uint64(len(r.data)))
		b = append(b, fr...)
	}
	end := make([]byte, runFrameSize+trailerSize)
	binary.LittleEndian.PutUint64(end[runFrameSize+trailerOffRuns:], uint64(len(runs)))
	binary.LittleEndian.PutUint64(end[runFrameSize+trailerOffBytes:], uint64(len(b)+len(end)))
	putFrame(end, endRunOffset, trailerSize)
	return append(b, end...)
}

// refreshFrameCRC recomputes the CRC of the frame at the start of b after
// a test changed what follows it.
func refreshFrameCRC(b []byte) {
	n := binary.LittleEndian.Uint32(b[runOffLength:])
	putFrame(b, binary.LittleEndian.Uint64(b[runOffOffset:]), uint64(n))
}

// TestRestoreImageMismatch: an image of another region or layout than the
// options ask for is refused before any file is made; options that leave
// the sizes zero take them from the image.
func TestRestoreImageMismatch(t *testing.T) {
	opts := smallOptions(t)
	src := mustCreate(t, opts)
	fillSome(t, src)
	img, _ := mustImage(t, src)
	for _, tc := range []struct {
		name   string
		mutate func(o *Options)
		want   error
		msg    string
	}{
		{"region id", func(o *Options) { o.ID++ }, ErrImageMismatch, "options ask for region 67"},
		{"region 0 by default", func(o *Options) { o.ID = 0 }, ErrImageMismatch, "region 0"},
		{"size", func(o *Options) { o.Size = 2 << 20 }, ErrImageMismatch, "size 2097152"},
		{"meganode size", func(o *Options) { o.MeganodeSize = 32 * 512 }, ErrImageMismatch, "meganode size 16384"},
		{"node size", func(o *Options) { o.NodeSize = 1024; o.MeganodeSize = 16 * 1024 }, ErrImageMismatch, "node size 1024"},
		{"slots", func(o *Options) { o.Meganodes = 3 }, ErrImageMismatch, "3 slots"},
		{"node fraction", func(o *Options) { o.Meganodes = 0; o.NodeFraction = 0.5 }, ErrImageMismatch, "64 slots"},
		{"atom size", func(o *Options) { o.AtomSize = 64 }, ErrImageMismatch, "atom size 64"},
		{"invalid name", func(o *Options) { o.Name = "a/b" }, ErrInvalidOptions, "file name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			o.Name = restoredName(t)
			tc.mutate(&o)
			mustNotRestore(t, o, img, tc.want, tc.msg)
		})
	}
	for _, tc := range []struct {
		name   string
		mutate func(o *Options)
	}{
		{"every size set", func(o *Options) {}},
		{"no size set", func(o *Options) { o.Size, o.MeganodeSize, o.NodeSize, o.Meganodes, o.AtomSize = 0, 0, 0, 0, 0 }},
		{"size not page aligned", func(o *Options) { o.Size = 1<<20 - 100 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			o.Name = restoredName(t)
			tc.mutate(&o)
			r := mustRestore(t, o, img)
			mustSameBytes(t, src, r)
		})
	}
}

// TestWriteImageConcurrentReaders: WriteImage runs beside lock-free
// readers of the region's trees (over heap memory, which the race detector
// watches, unlike a mapping): readers only load, so its plain reads do not
// race with them.
func TestWriteImageConcurrentReaders(t *testing.T) {
	l := mustLayout(t, 1<<20, 16*512, 512, 16, 4)
	r := newMemRegion(t, l, 5)
	m, err := r.NewMeganode(0, blink.Full, blink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		must(t, m.Tree().Put(fmt.Appendf(nil, "k%03d", i), bytes.Repeat([]byte{byte(i)}, 200)))
	}
	want, _ := mustImage(t, r)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Appendf(nil, "k%03d", (i+g)%50)
				if v, err := m.Tree().Get(k, nil); err != nil || len(v) != 200 {
					t.Errorf("get %q: %d bytes, %v", k, len(v), err)
					return
				}
			}
		})
	}
	for range 5 {
		if got, _ := mustImage(t, r); !bytes.Equal(got, want) {
			t.Error("image changed while only readers ran")
		}
	}
	close(stop)
	wg.Wait()
}

// TestWriteImageClosed: a closed region has no image.
func TestWriteImageClosed(t *testing.T) {
	r := mustCreate(t, smallOptions(t))
	must(t, r.Close())
	if _, err := r.WriteImage(io.Discard); !errors.Is(err, ErrClosed) {
		t.Fatalf("WriteImage = %v, want ErrClosed", err)
	}
}

// TestWriteImageWriterError: the writer's error is returned, wrapped.
func TestWriteImageWriterError(t *testing.T) {
	r := mustCreate(t, smallOptions(t))
	fillSome(t, r)
	full, _ := mustImage(t, r)
	boom := errors.New("disk full")
	for _, n := range []int{0, imageHeaderSize, imageHeaderSize + 100, len(full) - 1} {
		w := &failingWriter{left: n, err: boom}
		st, err := r.WriteImage(w)
		if !errors.Is(err, boom) || st.Bytes > uint64(n) {
			t.Fatalf("writer failing after %d bytes: %+v, %v", n, st, err)
		}
	}
}

// failingWriter accepts left bytes, then fails with err.
type failingWriter struct {
	left int
	err  error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) <= w.left {
		w.left -= len(p)
		return len(p), nil
	}
	n := w.left
	w.left = 0
	return n, w.err
}

// TestRestoreImageReadError: an error reading the image is returned
// wrapped, not as corruption, and leaves no file.
func TestRestoreImageReadError(t *testing.T) {
	opts := smallOptions(t)
	src := mustCreate(t, opts)
	img, _ := mustImage(t, src)
	boom := errors.New("connection reset")
	for _, n := range []int{0, imageHeaderSize + 5, len(img) - 3} {
		rd := io.MultiReader(bytes.NewReader(img[:n]), &failingReader{boom})
		o := opts
		o.Name = restoredName(t)
		_, err := RestoreImage(o, rd)
		if !errors.Is(err, boom) || errors.Is(err, ErrCorruption) {
			t.Fatalf("reader failing after %d bytes: %v", n, err)
		}
		if _, err := os.Stat(filepath.Join(o.Dir, o.Name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("failed restore left a file: %v", err)
		}
	}
}

type failingReader struct{ err error }

func (r *failingReader) Read([]byte) (int, error) { return 0, r.err }

// TestRestoreImageExistingFile: RestoreImage never overwrites a file.
func TestRestoreImageExistingFile(t *testing.T) {
	opts := smallOptions(t)
	src := mustCreate(t, opts)
	img, _ := mustImage(t, src)
	_, err := RestoreImage(opts, bytes.NewReader(img))
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("RestoreImage over the source's file = %v, want fs.ErrExist", err)
	}
	if err := src.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestIsZero(t *testing.T) {
	page := atomicmem.Alloc(imagePageSize)
	if !isZero(page) {
		t.Fatal("zero page reported non-zero")
	}
	for _, i := range []int{0, 7, 8, 63, 64, 1000, imagePageSize - 1} {
		page[i] = 1
		if isZero(page) {
			t.Fatalf("byte %d set, page reported zero", i)
		}
		page[i] = 0
	}
	if !isZero(nil) || isZero([]byte{0, 0, 3}) || !isZero(make([]byte, 70)) {
		t.Fatal("short buffers")
	}
}

// TestGoldenImageStream pins the image format: a small region's image
// with every field of the header, frames and trailer annotated. Run with
// -update to accept a deliberate format change.
func TestGoldenImageStream(t *testing.T) {
	l := mustLayout(t, 64<<10, 4096, 512, 16, 2)
	r := newMemRegion(t, l, 42)
	r.SetRoot(blink.MakePtr(42, 0x1000))
	r.mu.Lock()
	r.setSlotLocked(1, true)
	r.mu.Unlock()
	e := r.Extents()
	var offs []uint64
	sizes := []int{16, 5000, 100, 16}
	for _, n := range sizes {
		off, err := e.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	copy(r.Bytes()[offs[1]:], "a 5000-byte extent spanning two pages")
	copy(r.Bytes()[offs[1]+4500:], "its end")
	copy(r.Bytes()[offs[2]:], "a 100-byte extent")
	e.Free(offs[0], sizes[0])
	mustCheck(t, e)
	img, st := mustImage(t, r)

	var b strings.Builder
	b.WriteString("# Image of a region: 64 KiB, ID 42, 512-byte nodes, 2 meganodes of 4 KiB, 16-byte atoms.\n")
	b.WriteString("# Root 42:0x1000, slot 1 in use; extents of 16, 5000, 100, 16 bytes allocated, the first freed.\n")
	fmt.Fprintf(&b, "# %+v\n", st)
	annotateImage(t, &b, img)
	testutil.Golden(t, "region_image_stream.golden", b.String(), "region image format")
}

// annotateImage writes the image's bytes with every field named: the
// header, then per run its frame and data (by region offset), then the end
// run and trailer. It decodes with the offsets of image.go on its own, so
// the golden file shows what the bytes mean, not what the decoder thinks.
func annotateImage(t *testing.T, w io.Writer, img []byte) {
	le := binary.LittleEndian
	field := func(at int, name string, v uint64) { fmt.Fprintf(w, "%6d  %-14s %#x (%d)\n", at, name, v, v) }
	fmt.Fprintf(w, "\n# header, image bytes [0, %d)\n", imageHeaderSize)
	hexDump(w, img[:imageHeaderSize], 0)
	field(imgOffMagic, "magic", uint64(le.Uint32(img[imgOffMagic:])))
	field(imgOffVersion, "version", uint64(le.Uint32(img[imgOffVersion:])))
	field(imgOffPageSize, "page size", uint64(le.Uint32(img[imgOffPageSize:])))
	field(imgOffRegionID, "region id", uint64(le.Uint32(img[imgOffRegionID:])))
	field(imgOffRegionSize, "region size", le.Uint64(img[imgOffRegionSize:]))
	field(imgOffMeganodeSize, "meganode size", le.Uint64(img[imgOffMeganodeSize:]))
	field(imgOffNodeSize, "node size", uint64(le.Uint32(img[imgOffNodeSize:])))
	field(imgOffSlots, "slots", uint64(le.Uint32(img[imgOffSlots:])))
	field(imgOffAtomSize, "atom size", uint64(le.Uint32(img[imgOffAtomSize:])))
	field(imgOffCRC, "header crc", uint64(le.Uint32(img[imgOffCRC:])))
	for i, f := range imageFrames(t, img) {
		fr := img[f.at : f.at+runFrameSize]
		if f.off == endRunOffset {
			fmt.Fprintf(w, "\n# end run and trailer, image bytes [%d, %d)\n", f.at, f.at+runFrameSize+f.length)
			hexDump(w, img[f.at:f.at+runFrameSize+f.length], uint64(f.at))
		} else {
			fmt.Fprintf(w, "\n# run %d, image bytes [%d, %d): region [%#x, %#x), %d KiB\n", i, f.at, f.at+runFrameSize+f.length, f.off, f.off+uint64(f.length), f.length>>10)
			hexDump(w, fr, uint64(f.at))
		}
		field(f.at+runOffOffset, "offset", le.Uint64(fr[runOffOffset:]))
		field(f.at+runOffLength, "length", uint64(le.Uint32(fr[runOffLength:])))
		field(f.at+runOffCRC, "crc", uint64(le.Uint32(fr[runOffCRC:])))
		data := img[f.at+runFrameSize : f.at+runFrameSize+f.length]
		if f.off == endRunOffset {
			field(f.at+runFrameSize+trailerOffRuns, "runs", le.Uint64(data[trailerOffRuns:]))
			field(f.at+runFrameSize+trailerOffBytes, "image bytes", le.Uint64(data[trailerOffBytes:]))
			continue
		}
		fmt.Fprintf(w, "# data at region offsets\n")
		hexDump(w, data, f.off)
	}
}

// FuzzRestoreImage feeds arbitrary images to the decoder (into heap memory,
// for regions up to 1 MiB): it must never panic, reject with ErrCorruption,
// and what it accepts must re-encode to an image that decodes to the same
// region and re-encodes to itself.
func FuzzRestoreImage(f *testing.F) {
	for i, p := range [][5]uint64{
		{64 << 10, 4096, 512, 16, 2},
		{256 << 10, 16 * 512, 512, 64, 4},
	} {
		l := mustLayout(f, p[0], p[1], p[2], p[3], p[4])
		mem, ext := newImage(f, l, uint32(i+1))
		for n := range 10 * (i + 1) {
			if off, err := ext.Alloc(100 * (n + 1)); err == nil {
				mem[off+20] = byte(n + 1)
			}
		}
		var b bytes.Buffer
		if _, err := writeImage(&b, mem, header{Layout: l, ID: uint32(i + 1)}, scanAll); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
		f.Add(b.Bytes()[:b.Len()/2])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, img []byte) {
		h, mem, err := decodeImageForTest(img)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v does not wrap ErrCorruption", err)
			}
			return
		}
		var again bytes.Buffer
		if _, err := writeImage(&again, mem, h, scanAll); err != nil {
			t.Fatal(err)
		}
		h2, mem2, err := decodeImageForTest(again.Bytes())
		if err != nil {
			t.Fatalf("re-encoded image rejected: %v", err)
		}
		if h2 != h || !bytes.Equal(mem, mem2) {
			t.Fatal("re-encoded image decodes to another region")
		}
		var third bytes.Buffer
		if _, err := writeImage(&third, mem2, h2, scanAll); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), third.Bytes()) {
			t.Fatal("re-encoding is not stable")
		}
	})
}

// decodeImageForTest is RestoreImage's decoding into heap memory: header,
// runs, then the checks of the restored region.
func decodeImageForTest(img []byte) (header, []byte, error) {
	rd := bytes.NewReader(img)
	h, err := readImageHeader(rd)
	if err != nil {
		return header{}, nil, err
	}
	if h.Size > 1<<20 {
		return header{}, nil, fmt.Errorf("test: region of %d bytes too large to fuzz: %w", h.Size, ErrCorruption)
	}
	mem := atomicmem.Alloc(int(h.Size))
	if _, err := readImageRuns(rd, mem, h.Size); err != nil {
		return header{}, nil, err
	}
	if _, err := openRestored(mem, h); err != nil {
		return header{}, nil, err
	}
	return h, mem, nil
}

// BenchmarkWriteImage: the image of a 1 GiB region (in /dev/shm when
// usable, else a plain file) holding 64 MiB of data, written to
// io.Discard. "contiguous": the data in 1 MiB extents; "scattered": every
// other 4 KiB page of 128 MiB of extents, one run per page; "empty": no
// data, the cost of finding the holes (and the zeroed control bytes).
func BenchmarkWriteImage(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("regions need Linux")
	}
	for _, layout := range []string{"contiguous", "scattered", "empty"} {
		b.Run(layout, func(b *testing.B) {
			opts := Options{ID: 7, Hugepages: HugepagesAuto, HugetlbfsDir: b.TempDir(), Dir: b.TempDir(),
				Name: fmt.Sprintf("cell-bench-%d-%x", os.Getpid(), rand.Uint32()), Logger: testLogger(b)}
			r, err := Create(opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Close(); _ = r.Remove() })
			rng := rand.New(rand.NewPCG(1, 1))
			fill := func(p []byte) {
				for i := 0; i+8 <= len(p); i += 8 {
					binary.LittleEndian.PutUint64(p[i:], rng.Uint64()|1)
				}
			}
			const data = 64 << 20
			switch layout {
			case "contiguous":
				for range data >> 20 {
					off, err := r.Extents().Alloc(1 << 20)
					if err != nil {
						b.Fatal(err)
					}
					fill(r.Bytes()[off : off+1<<20])
				}
			case "scattered":
				for range 2 * data >> 20 {
					off, err := r.Extents().Alloc(1 << 20)
					if err != nil {
						b.Fatal(err)
					}
					for p := off; p < off+1<<20; p += 2 * imagePageSize {
						fill(r.Bytes()[p : p+imagePageSize])
					}
				}
			}
			st, err := r.WriteImage(io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%v: image of %d pages, %d bytes", r, st.Pages, st.Bytes)
			b.SetBytes(int64(st.Pages * imagePageSize))
			b.ResetTimer()
			for b.Loop() {
				if _, err := r.WriteImage(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The applied index is part of the region (docs/design.md §9: "same records,
// byte-identical region images (node and extent allocation, slot choice,
// root word, applied index)"): an image carries it, and a region restored
// from it has it back.
func TestAppliedIndexInImage(t *testing.T) {
	r := mustCreateBacking(t, imageOptions(t, "shm"), "shm")
	if got := r.Applied(); got != 0 {
		t.Fatalf("a new region's applied index is %d, want 0", got)
	}
	r.SetApplied(1<<40 + 7)
	img, _ := mustImage(t, r)
	got := mustRestore(t, imageOptions(t, "shm"), img)
	if a := got.Applied(); a != 1<<40+7 {
		t.Fatalf("restored applied index %d, want %d", a, uint64(1<<40+7))
	}
	mustSameBytes(t, r, got)
}

// A version 1 image (before the applied index) restores, its applied
// index 0, and the region is rewritten as this version: byte for byte the
// region a server of this version would have made.
func TestRestoreVersion1Image(t *testing.T) {
	r := mustCreateBacking(t, imageOptions(t, "shm"), "shm")
	if _, err := r.Extents().Alloc(100); err != nil {
		t.Fatal(err)
	}
	img, _ := mustImage(t, r)
	// The same region as a version 1 server wrote it: only the version
	// and the header's CRC differ.
	old := atomicmem.Alloc(headerSize)
	atomicmem.Load(old, r.Bytes()[:headerSize])
	binary.LittleEndian.PutUint32(old[offVersion:], formatVersion1)
	refreshCRC(old)
	v1 := bytes.Clone(img)
	at := bytes.Index(v1, r.Bytes()[:staticEnd])
	if at < 0 {
		t.Fatal("the region header is not in its image")
	}
	copy(v1[at:], old[:staticEnd])
	fixRunCRC(t, v1, at)

	got := mustRestore(t, imageOptions(t, "shm"), v1)
	if v := binary.LittleEndian.Uint32(got.Bytes()[offVersion:]); v != formatVersion {
		t.Fatalf("restored region of version %d, want %d", v, formatVersion)
	}
	if a := got.Applied(); a != 0 {
		t.Fatalf("applied index %d from a version 1 image", a)
	}
	mustSameBytes(t, r, got)
	if err := got.Check(); err != nil {
		t.Fatal(err)
	}
}

// fixRunCRC recomputes the CRC of the image's first run, whose data
// starts at at, after a test changed its bytes.
func fixRunCRC(t *testing.T, img []byte, at int) {
	t.Helper()
	frame := img[imageHeaderSize : imageHeaderSize+runFrameSize]
	if at != imageHeaderSize+runFrameSize {
		t.Fatalf("the region header at image byte %d, not in the first run", at)
	}
	n := int(binary.LittleEndian.Uint32(frame[8:]))
	binary.LittleEndian.PutUint32(frame[12:], frameCRC(frame[:12], img[at:at+n]))
}

// The header words a writer stores without a lock (the root, the applied
// index) are not stored into a closed region's unmapped pages: a replica
// left holding a closed region (a failed restore whose empty region could
// not be made again) may still apply a record, and that must not fault.
func TestHeaderWordsOfAClosedRegion(t *testing.T) {
	r := mustCreateBacking(t, imageOptions(t, "shm"), "shm")
	r.SetApplied(9)
	r.SetRoot(blink.MakePtr(r.ID(), r.Layout().NodeOff))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r.SetApplied(10)
	r.SetRoot(0)
	if a, p := r.Applied(), r.Root(); a != 0 || p != 0 {
		t.Fatalf("a closed region reads applied index %d, root %v; want 0, 0", a, p)
	}
}
