package meganode

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSeekData: how lseek's answers turn into data ranges, including the
// file systems that cannot tell (hugetlbfs's default_llseek calls the
// whole file data) or do not support SEEK_DATA at all.
func TestSeekData(t *testing.T) {
	const size = 1 << 20
	// file is a sparse file with data in [0x3000, 0x5000) and
	// [0x80000, 0x81000), and size 0x100000 (or fileSize).
	file := func(fileSize int64) func(off int64, whence int) (int64, error) {
		data := [][2]int64{{0x3000, 0x5000}, {0x80000, 0x81000}}
		return func(off int64, whence int) (int64, error) {
			if off >= fileSize {
				return 0, unix.ENXIO
			}
			for _, d := range data {
				switch {
				case whence == unix.SEEK_DATA && off < d[1]:
					return max(off, d[0]), nil
				case whence == unix.SEEK_HOLE && off < d[0]:
					return off, nil
				case whence == unix.SEEK_HOLE && off < d[1]:
					return d[1], nil
				}
			}
			if whence == unix.SEEK_DATA {
				return 0, unix.ENXIO
			}
			return fileSize, nil
		}
	}
	defaultLlseek := func(off int64, whence int) (int64, error) {
		if off >= size {
			return 0, unix.ENXIO
		}
		if whence == unix.SEEK_HOLE {
			return size + 1<<20, nil // the file is rounded up to a huge page
		}
		return off, nil
	}
	fail := func(err error) func(int64, int) (int64, error) {
		return func(int64, int) (int64, error) { return 0, err }
	}
	for _, tc := range []struct {
		name string
		seek func(off int64, whence int) (int64, error)
		want [][2]uint64
	}{
		{"sparse file", file(size), [][2]uint64{{0x3000, 0x5000}, {0x80000, 0x81000}}},
		{"file longer than the region", file(size + 1<<21), [][2]uint64{{0x3000, 0x5000}, {0x80000, 0x81000}}},
		{"hugetlbfs", defaultLlseek, [][2]uint64{{0, size}}},
		{"no SEEK_DATA", fail(unix.EINVAL), [][2]uint64{{0, size}}},
		{"other error", fail(unix.EIO), [][2]uint64{{0, size}}},
		{"all hole", fail(unix.ENXIO), nil},
		{"data past the region only", func(off int64, whence int) (int64, error) { return size + 4096, nil }, nil},
		{"backwards answer", func(off int64, whence int) (int64, error) { return off - 1, nil }, [][2]uint64{{0, size}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]uint64
			for off := uint64(0); ; {
				start, end, ok := seekData(tc.seek, off, size)
				if !ok {
					break
				}
				if start < off || end <= start || end > size {
					t.Fatalf("seekData(%#x) = [%#x, %#x)", off, start, end)
				}
				got = append(got, [2]uint64{start, end})
				off = end
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("ranges %x, want %x", got, tc.want)
			}
		})
	}
}

// TestWriteImageSkipsHoles: the image of a 1 GiB region holding little
// data is small, and writing it faults in no hole (a scan of every page
// would map all 1 GiB): on tmpfs the region mapping's resident set stays
// put, for a plain file the file's pages in the page cache (mincore) do,
// and the file's allocated blocks do on both. Likewise restoring it.
func TestWriteImageSkipsHoles(t *testing.T) {
	if testing.Short() {
		t.Skip("maps 1 GiB regions")
	}
	const slack = 32 << 20 // far below the 1 GiB a full scan would touch
	for _, backing := range []string{"file", "shm"} {
		t.Run(backing, func(t *testing.T) {
			// What a fault on a hole costs: a mapped (and allocated)
			// page on tmpfs, a cached page (and read-ahead around it)
			// for a plain file.
			resident := mappingRss
			if backing == "file" {
				resident = cachedBytes
			}
			opts := imageOptions(t, backing)
			opts.Size, opts.MeganodeSize, opts.Meganodes = 1<<30, 64<<20, 0
			src := mustCreateBacking(t, opts, backing)
			fillSome(t, src)
			off, err := src.Extents().Alloc(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			for i := off; i < off+1<<20; i += 512 {
				src.Bytes()[i] = 1
			}
			res0, blocks0 := resident(t, src), fileBlocks(t, src)
			var img bytes.Buffer
			st, err := src.WriteImage(&img)
			if err != nil {
				t.Fatal(err)
			}
			res1, blocks1 := resident(t, src), fileBlocks(t, src)
			t.Logf("%v: image of %d pages, %d bytes; resident %d -> %d KiB, file blocks %d -> %d KiB",
				src, st.Pages, st.Bytes, res0>>10, res1>>10, blocks0>>10, blocks1>>10)
			if st.Bytes > 4<<20 {
				t.Errorf("image of %d bytes for about 1 MiB of data", st.Bytes)
			}
			if res1 > res0+slack || blocks1 > blocks0+slack {
				t.Errorf("WriteImage faulted in holes: resident %d -> %d, file blocks %d -> %d bytes", res0, res1, blocks0, blocks1)
			}

			ropts := opts
			ropts.Name = restoredName(t)
			dst := mustRestore(t, ropts, img.Bytes())
			if res := resident(t, dst); res > slack {
				t.Errorf("restored region has %d bytes resident", res)
			}
			if !bytes.Equal(src.Bytes()[:64<<20], dst.Bytes()[:64<<20]) || !bytes.Equal(src.Bytes()[off:off+1<<20], dst.Bytes()[off:off+1<<20]) {
				t.Error("restored region differs")
			}
		})
	}
}

// cachedBytes returns the bytes of r's file in the page cache (mincore on
// its shared mapping), whatever the rest of the process does.
func cachedBytes(t *testing.T, r *Region) uint64 {
	t.Helper()
	ps := os.Getpagesize()
	vec := make([]byte, (len(r.Bytes())+ps-1)/ps)
	// x/sys has no Mincore wrapper.
	b := r.Bytes()
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	var n uint64
	for _, v := range vec {
		n += uint64(v & 1)
	}
	return n * uint64(ps)
}

// mappingRss returns the resident bytes of r's mapping (/proc/self/smaps),
// whatever the rest of the process does.
func mappingRss(t *testing.T, r *Region) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&r.Bytes()[0])))
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if fs := strings.Fields(line); len(fs) > 0 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			in = strings.HasPrefix(line, start)
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); in && ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}

// fileBlocks returns the bytes allocated to r's file.
func fileBlocks(t *testing.T, r *Region) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(r.Path(), &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}
