//go:build linux

package meganode

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kernel interfaces read to find huge pages.
const (
	procMounts      = "/proc/mounts"
	procMeminfo     = "/proc/meminfo"
	sysHugepages    = "/sys/kernel/mm/hugepages"
	sysShmemEnabled = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
)

// createMapping creates, sizes and maps the file of a new region of size
// bytes, choosing the backing by o.Hugepages:
//
//   - on: a hugetlbfs mount with enough free huge pages, or ErrNoHugepages;
//   - auto: the same, else a file in o.ShmDir advised MADV_HUGEPAGE, else a
//     plain file in o.Dir. It falls back only when a backing is absent or
//     unusable (no mount or pages, directory missing or not writable); other
//     errors (the file exists, no space) are returned;
//   - off: a plain file in o.Dir.
func createMapping(o *Options, size uint64) (*mapping, error) {
	switch o.Hugepages {
	case HugepagesOff:
		return createFileMapping(filepath.Join(o.Dir, o.Name), size, BackingFile, o)
	case HugepagesOn:
		mnt, err := probeHugetlbfs(o.HugetlbfsDir, size)
		if err != nil {
			return nil, err
		}
		return createHugeMapping(filepath.Join(mnt.dir, o.Name), size, mnt.pageSize, o.FileGroup)
	}
	mnt, err := probeHugetlbfs(o.HugetlbfsDir, size)
	if err == nil {
		var m *mapping
		m, err = createHugeMapping(filepath.Join(mnt.dir, o.Name), size, mnt.pageSize, o.FileGroup)
		if err == nil || !errors.Is(err, ErrNoHugepages) {
			return m, err
		}
	}
	o.Logger.Info("meganode: no hugetlbfs backing, trying shm", slog.Any("reason", err))
	if usableDir(o.ShmDir) {
		return createFileMapping(filepath.Join(o.ShmDir, o.Name), size, BackingShm, o)
	}
	o.Logger.Warn("meganode: no usable shm directory; region backed by a plain file", slog.String("shm_dir", o.ShmDir), slog.String("dir", o.Dir))
	return createFileMapping(filepath.Join(o.Dir, o.Name), size, BackingFile, o)
}

// probeHugetlbfs finds a hugetlbfs mount (dir, if not empty) with enough
// free huge pages for size bytes. Errors wrap ErrNoHugepages.
func probeHugetlbfs(dir string, size uint64) (hugetlbfsMount, error) {
	mounts, err := os.ReadFile(procMounts)
	if err != nil {
		return hugetlbfsMount{}, fmt.Errorf("meganode: %w: %w", err, ErrNoHugepages)
	}
	mi, err := os.ReadFile(procMeminfo)
	if err != nil {
		return hugetlbfsMount{}, fmt.Errorf("meganode: %w: %w", err, ErrNoHugepages)
	}
	info, err := parseMeminfo(mi)
	if err != nil {
		return hugetlbfsMount{}, fmt.Errorf("%w: %w", err, ErrNoHugepages)
	}
	env := hugeEnv{
		mounts:   parseMounts(mounts),
		meminfo:  info,
		avail:    sysfsHugepagesAvailable,
		writable: usableDir,
	}
	return env.pick(dir, size)
}

// sysfsHugepagesAvailable returns free minus reserved huge pages of one
// page size from /sys/kernel/mm/hugepages.
func sysfsHugepagesAvailable(pageSize uint64) (uint64, bool) {
	dir := filepath.Join(sysHugepages, fmt.Sprintf("hugepages-%dkB", pageSize>>10))
	read := func(name string) (uint64, bool) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	free, ok1 := read("free_hugepages")
	rsvd, ok2 := read("resv_hugepages")
	if !ok1 || !ok2 {
		return 0, false
	}
	if rsvd >= free {
		return 0, true
	}
	return free - rsvd, true
}

// usableDir reports whether dir is a directory this process can create
// files in.
func usableDir(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir() && unix.Access(dir, unix.W_OK|unix.X_OK) == nil
}

// createFile creates path exclusively (0600; 0640 and owned by group if
// group is positive) and locks it.
func createFile(path string, group int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("meganode: create region file: %w", err)
	}
	if err := shareWithGroup(f, group); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("meganode: region file %s: %w", path, err)
	}
	if err := lockFile(f); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}

func lockFile(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return fmt.Errorf("meganode: %s: %w", f.Name(), ErrLocked)
		default:
			return fmt.Errorf("meganode: lock %s: %w", f.Name(), err)
		}
	}
}

// createFileMapping creates a region file in a tmpfs or ordinary file
// system and maps it. With prefault it commits the file's blocks
// (fallocate, where supported); without, the file is sparse and takes
// memory (or disk) as its pages are first written, and a file system with
// less room than the region is only warned about.
func createFileMapping(path string, size uint64, backing Backing, o *Options) (_ *mapping, err error) {
	prefault, log := o.Prefault, o.Logger
	f, err := createFile(path, o.FileGroup)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(path)
		}
	}()
	length := alignUp(size, uint64(os.Getpagesize()))
	if err := f.Truncate(int64(length)); err != nil {
		return nil, fmt.Errorf("meganode: size region file: %w", err)
	}
	if prefault {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(length)); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("meganode: reserve %d bytes for region file %s: %w", length, path, err)
		}
	} else {
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &st); err == nil && st.Bavail*uint64(st.Bsize) < length {
			log.Warn("meganode: the region's file system has less room than the region; a write past it faults (SIGBUS) and stops the server (prefault commits the region up front)",
				slog.String("path", path), slog.Uint64("size", length), slog.Uint64("available", st.Bavail*uint64(st.Bsize)))
		}
	}
	data, err := mmap(f, length)
	if err != nil {
		return nil, err
	}
	if backing == BackingShm {
		adviseHuge(data, log)
	}
	return &mapping{path: path, backing: backing, file: f, data: data}, nil
}

// createHugeMapping creates a region file in a hugetlbfs mount; the file
// and mapping are rounded up to the huge page size. The kernel reserves the
// huge pages at mmap (MAP_SHARED), so running short fails here with an
// error wrapping ErrNoHugepages, not later with SIGBUS.
func createHugeMapping(path string, size, pageSize uint64, group int) (_ *mapping, err error) {
	f, err := createFile(path, group)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(path)
		}
	}()
	length := size/pageSize*pageSize + min(size%pageSize, 1)*pageSize
	if err := f.Truncate(int64(length)); err != nil {
		return nil, fmt.Errorf("meganode: size hugetlbfs region file: %w", err)
	}
	data, err := mmap(f, length)
	if errors.Is(err, unix.ENOMEM) {
		return nil, fmt.Errorf("meganode: reserve %d huge pages of %d KiB: %w: %w", length/pageSize, pageSize>>10, err, ErrNoHugepages)
	}
	if err != nil {
		return nil, err
	}
	return &mapping{path: path, backing: BackingHugetlbfs, hugePageSize: pageSize, file: f, data: data}, nil
}

func mmap(f *os.File, length uint64) ([]byte, error) {
	if length > uint64(^uint(0)>>1) {
		return nil, fmt.Errorf("meganode: mapping of %d bytes too large for this platform", length)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("meganode: mmap %s (%d bytes): %w", f.Name(), length, err)
	}
	return data, nil
}

// adviseHuge asks for transparent huge pages on a tmpfs mapping. It is a
// hint: the kernel honours it only when shmem THP is "advise" or stronger.
func adviseHuge(data []byte, log *slog.Logger) {
	if err := unix.Madvise(data, unix.MADV_HUGEPAGE); err != nil {
		log.Info("meganode: madvise(MADV_HUGEPAGE) failed; small pages", slog.Any("error", err))
		return
	}
	if b, err := os.ReadFile(sysShmemEnabled); err == nil && strings.Contains(string(b), "[never]") {
		log.Info("meganode: shmem transparent huge pages are disabled; region uses small pages", slog.String("setting", sysShmemEnabled))
	}
}

// openMapping opens, locks and maps an existing region file, and
// recognises its backing from the file system.
func openMapping(path string) (_ *mapping, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("meganode: open region file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	if err := lockFile(f); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("meganode: stat region file: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() < headerSize {
		return nil, fmt.Errorf("meganode: %s: %d bytes, not a region file: %w", path, fi.Size(), ErrCorruption)
	}
	m := &mapping{path: path, backing: BackingFile, file: f}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err == nil {
		switch uint32(st.Type) {
		case unix.HUGETLBFS_MAGIC:
			m.backing = BackingHugetlbfs
			m.hugePageSize = uint64(st.Bsize)
		case unix.TMPFS_MAGIC:
			m.backing = BackingShm
		}
	}
	m.data, err = mmap(f, uint64(fi.Size()))
	if err != nil {
		return nil, err
	}
	if m.backing == BackingShm {
		adviseHuge(m.data, slog.New(slog.DiscardHandler))
	}
	return m, nil
}

// close unmaps the region and closes (and so unlocks) its file.
func (m *mapping) close() error {
	err := unix.Munmap(m.data)
	m.data = nil
	if cerr := m.file.Close(); err == nil && cerr != nil && !errors.Is(cerr, fs.ErrClosed) {
		err = cerr
	}
	return err
}

// sync flushes the mapping to the file.
func (m *mapping) sync() error {
	if err := unix.Msync(m.data, unix.MS_SYNC); err != nil {
		return fmt.Errorf("meganode: msync %s: %w", m.path, err)
	}
	return nil
}

// nextData is the nextDataFunc of the region file: it asks the file system
// where its data is (lseek SEEK_DATA, SEEK_HOLE), so that WriteImage reads
// no hole. Reading a hole through the shared mapping would allocate a page
// for it (tmpfs) or cache one (plain file). REQUIRES: the region is open.
func (m *mapping) nextData(off, size uint64) (uint64, uint64, bool) {
	fd := int(m.file.Fd())
	return seekData(func(off int64, whence int) (int64, error) { return unix.Seek(fd, off, whence) }, off, size)
}

// seekData implements nextData over seek, lseek(2) on the region file.
// Only ENXIO from SEEK_DATA ("no data at or after off") is trusted to skip
// the rest; any other failure (EINVAL where the file system has no
// SEEK_DATA) returns everything from off on, which is always correct. File
// systems without real support (hugetlbfs uses default_llseek) report the
// whole file as data, so every page is read there.
func seekData(seek func(off int64, whence int) (int64, error), off, size uint64) (uint64, uint64, bool) {
	if off >= size {
		return 0, 0, false
	}
	d, err := seek(int64(off), unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return 0, 0, false
	case err != nil || d < int64(off):
		return off, size, true
	case uint64(d) >= size:
		// Data only past the region (the huge page rounding of the file).
		return 0, 0, false
	}
	h, err := seek(d, unix.SEEK_HOLE)
	if err != nil || h <= d {
		return uint64(d), size, true
	}
	return uint64(d), min(uint64(h), size), true
}

// adviseScan turns read-ahead off on a plain file's mapping (MADV_RANDOM)
// while WriteImage reads it (or RestoreImage writes it), and returns the
// function that turns it back on once no WriteImage runs. Read-ahead
// around the scan's faults would cache pages of the file's holes, which
// SEEK_DATA then reports as data: the scan would chain through the whole
// file. tmpfs and hugetlbfs faults read nothing ahead. Advice is a hint:
// failures are ignored.
func (m *mapping) adviseScan() func() {
	if m.backing != BackingFile {
		return func() {}
	}
	m.scans.Lock()
	defer m.scans.Unlock()
	if m.scans.n++; m.scans.n == 1 {
		_ = unix.Madvise(m.data, unix.MADV_RANDOM)
	}
	return func() {
		m.scans.Lock()
		defer m.scans.Unlock()
		if m.scans.n--; m.scans.n == 0 {
			_ = unix.Madvise(m.data, unix.MADV_NORMAL)
		}
	}
}

// HugetlbfsMounts lists the directories hugetlbfs is mounted on
// (/proc/mounts), where HugepagesAuto and HugepagesOn put region files.
func HugetlbfsMounts() []string {
	b, err := os.ReadFile(procMounts)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, m := range parseMounts(b) {
		dirs = append(dirs, m.dir)
	}
	return dirs
}

// shareWithGroup gives f (created 0600) to group and opens it to the
// group's reading, in that order, so that no other group can ever read
// it. A non-positive group leaves it as it is.
func shareWithGroup(f *os.File, group int) error {
	if group <= 0 {
		return nil
	}
	if err := f.Chown(-1, group); err != nil {
		return fmt.Errorf("give it to group %d: %w", group, err)
	}
	if err := f.Chmod(0o640); err != nil {
		return fmt.Errorf("make it readable by group %d: %w", group, err)
	}
	return nil
}
