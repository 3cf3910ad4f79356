package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
)

// The data directory's files:
//
//	LOCK         flock'ed while a server runs on the directory
//	region.json  which region the directory holds: {ServerID, Region, Path},
//	             written when the region file is made at each start
//	wal/         the raft log and stable state of the server's regions
//	             (package wal, one pebble instance)
//	snapshots/   the regions' raft snapshots (package wal), or a symbolic
//	             link to <Options.SnapshotDir>/cell-<hash>-snapshots
//
// region.json is written to a temporary name, synced, renamed and the
// directory synced, so a crash leaves the old or the new file, never a
// torn one.
const (
	lockFile     = "LOCK"
	stateFile    = "region.json"
	walDir       = "wal"
	snapshotsDir = "snapshots"
)

// dataState is region.json.
type dataState struct {
	ServerID string
	Region   uint32
	Path     string
}

// dataDir is an open, locked data directory.
type dataDir struct {
	dir  string // absolute
	lock *os.File
}

// openDataDir creates dir if needed and locks it.
func openDataDir(dir string) (*dataDir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("server: data directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("server: create data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(abs, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("server: open lock file: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("server: %s: %w", abs, ErrDataDirLocked)
		}
		return nil, fmt.Errorf("server: lock %s: %w", abs, err)
	}
	return &dataDir{dir: abs, lock: f}, nil
}

func (d *dataDir) path(name string) string { return filepath.Join(d.dir, name) }

// snapshotTarget is the directory of the data directory abs's snapshots
// under the snapshot directory dir (Options.SnapshotDir): named after
// abs, like its region files, so data directories sharing dir never mix.
func snapshotTarget(dir, abs string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("server: snapshot directory %s: %w", dir, err)
	}
	return filepath.Join(d, regionFilePrefix(abs)+"snapshots"), nil
}

// linkSnapshots makes the data directory's snapshots/ a link to the
// snapshot directory dir's part for it (Options.SnapshotDir), or checks
// that it is one already; with dir empty, it checks only that a link
// found there leads somewhere.
func (d *dataDir) linkSnapshots(dir string) error {
	var want string // the link's target dir asks for; "" without dir
	if dir != "" {
		var err error
		if want, err = snapshotTarget(dir, d.dir); err != nil {
			return err
		}
	}
	link := d.path(snapshotsDir)
	fi, err := os.Lstat(link)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("server: %s: %w", link, err)
	}
	exists := err == nil
	if exists && fi.Mode()&fs.ModeSymlink != 0 {
		return d.checkSnapshotLink(link, want)
	}
	if want == "" {
		return nil // snapshots/ in the data directory, made by the store
	}
	if rel, err := filepath.Rel(d.dir, want); err == nil && !strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%w: %s is inside the data directory %s, where the snapshots are by default: --snapshot-dir is for another disk", ErrSnapshotDir, dir, d.dir)
	}
	if exists {
		// A snapshots/ directory of its own: moved only if empty.
		ents, err := os.ReadDir(link)
		if err != nil {
			return fmt.Errorf("server: %s: %w", link, err)
		}
		if len(ents) > 0 {
			return fmt.Errorf("%w: the data directory keeps its snapshots in %s; to use --snapshot-dir, stop the server, move that directory to %s and leave a symbolic link to it in its place", ErrSnapshotDir, link, want)
		}
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("server: %s: %w", link, err)
		}
	}
	if err := os.MkdirAll(want, 0o755); err != nil {
		return fmt.Errorf("server: create snapshot directory: %w", err)
	}
	if err := syncPath(filepath.Dir(want)); err != nil {
		return err
	}
	if err := os.Symlink(want, link); err != nil {
		return fmt.Errorf("server: link the snapshot directory: %w", err)
	}
	return d.syncDir()
}

// checkSnapshotLink checks the existing snapshots/ link: it leads to want
// (when want is set) and to a directory that is there.
func (d *dataDir) checkSnapshotLink(link, want string) error {
	cur, err := os.Readlink(link)
	if err != nil {
		return fmt.Errorf("server: %s: %w", link, err)
	}
	if want != "" && cur != want {
		return fmt.Errorf("%w: the data directory's snapshots are in %s (an earlier --snapshot-dir %s), not %s: start with that one, or move the directory and the link %s with the server stopped", ErrSnapshotDir, cur, filepath.Dir(cur), want, link)
	}
	if st, err := os.Stat(cur); err != nil || !st.IsDir() {
		return fmt.Errorf("%w: the data directory's snapshots are in %s, which is missing or not a directory (an unmounted disk?): without them the log, truncated after them, is not enough to recover (%v)", ErrSnapshotDir, cur, err)
	}
	return nil
}

// syncPath fsyncs the directory dir (a new entry in it is then durable).
func syncPath(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("server: sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("server: sync %s: %w", dir, err)
	}
	return nil
}

// regionFileName names the region file of region id for this directory.
// The name is unique per data directory, so servers with different data
// directories on one host never collide in a shared tmpfs or hugetlbfs.
func (d *dataDir) regionFileName(id uint32) string {
	return fmt.Sprintf("%s%06x", regionFilePrefix(d.dir), id)
}

// regionFilePrefix is how the names of every region file of the data
// directory abs (an absolute path) begin: "cell-" and 16 hex digits of a
// hash of the path. The region files live in the data directory, the shm
// directory or a hugetlbfs mount (Options.Hugepages); the prefix is how
// Wipe and a starting server find them there.
func regionFilePrefix(abs string) string {
	h := sha256.Sum256([]byte(abs))
	return "cell-" + hex.EncodeToString(h[:8]) + "-"
}

// regionDirs are the directories a region file of this server may be in:
// the data directory, the shm directory and the hugetlbfs mounts.
func (s *Server) regionDirs() []string {
	return regionDirs(s.dir.dir, s.opts.ShmDir)
}

func regionDirs(dataDir, shmDir string) []string {
	dirs := []string{dataDir}
	for _, d := range append([]string{shmDir}, meganode.HugetlbfsMounts()...) {
		if d != "" && !slices.Contains(dirs, filepath.Clean(d)) {
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	return dirs
}

// removeStaleRegionFiles removes the files of dirs whose names begin with
// prefix (the region files of one data directory, regionFilePrefix) and
// that no process holds open as a region (flock): those an earlier run of
// the directory left, after a crash, or after the directory was deleted
// and made again. A file some process holds is left alone (held). It
// returns the paths removed and those held.
func removeStaleRegionFiles(dirs []string, prefix string) (removed, held []string, _ error) {
	var errs []error
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("server: list %s: %w", dir, err))
			continue
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
				continue
			}
			ok, err := removeStaleRegionFile(dir, e.Name())
			switch {
			case errors.Is(err, ErrDataDirLocked):
				held = append(held, filepath.Join(dir, e.Name()))
			case err != nil:
				errs = append(errs, err)
			case ok:
				removed = append(removed, filepath.Join(dir, e.Name()))
			}
		}
	}
	return removed, held, errors.Join(errs...)
}

// Wipe deletes the data directory dir and every region file it names: its
// own region's and its followers' (whatever a crash left), in the data
// directory, in shmDir (default DefaultShmDir) and in the hugetlbfs
// mounts. Region files are named after the directory's absolute path
// (regionFilePrefix), so Wipe finds them also when dir itself was already
// deleted (rm -rf leaves a killed server's region files in /dev/shm). It
// also removes the shm registration tables of dead processes in shmDir
// (rdma.RemoveStaleTables), which a killed server leaves there too. It
// refuses, with an error wrapping ErrDataDirLocked, while a server holds
// the directory's LOCK, and leaves alone a region file some process holds
// open (it then says so in an error wrapping ErrDataDirLocked, after
// removing the rest). It returns the paths it removed.
func Wipe(dir, shmDir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("server: data directory %s: %w", dir, err)
	}
	if shmDir == "" {
		shmDir = DefaultShmDir
	}
	if err := looksLikeDataDir(abs); err != nil {
		return nil, err
	}
	var removed []string
	lock, err := os.OpenFile(filepath.Join(abs, lockFile), os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("server: open %s: %w", filepath.Join(abs, lockFile), err)
	default:
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("server: %s is in use by a running server: %w", abs, ErrDataDirLocked)
			}
			return nil, fmt.Errorf("server: lock %s: %w", abs, err)
		}
	}
	dirs := regionDirs(abs, shmDir)
	var st dataState
	if b, err := os.ReadFile(filepath.Join(abs, stateFile)); err == nil && json.Unmarshal(b, &st) == nil && st.Path != "" {
		// The region file the last run made, wherever that run's shm
		// directory was.
		if d := filepath.Dir(st.Path); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	files, held, err := removeStaleRegionFiles(dirs, regionFilePrefix(abs))
	removed = append(removed, files...)
	if err != nil {
		return removed, err
	}
	// Snapshots on a disk of their own (Options.SnapshotDir): the link
	// leads to them.
	if target, err := os.Readlink(filepath.Join(abs, snapshotsDir)); err == nil {
		if _, err := os.Stat(target); err == nil {
			if err := os.RemoveAll(target); err != nil {
				return removed, fmt.Errorf("server: remove %s: %w", target, err)
			}
			removed = append(removed, target)
		}
	}
	if _, err := os.Stat(abs); err == nil {
		if err := os.RemoveAll(abs); err != nil {
			return removed, fmt.Errorf("server: remove %s: %w", abs, err)
		}
		removed = append(removed, abs)
	}
	// The shm registration tables of dead processes (the killed server's
	// among them): any start would remove them too.
	if usableDir(shmDir) {
		tables, err := rdma.RemoveStaleTables(shmDir)
		removed = append(removed, tables...)
		if err != nil {
			return removed, err
		}
	}
	if len(held) > 0 {
		return removed, fmt.Errorf("server: region files named after %s are held by another process, not removed: %s: %w", abs, strings.Join(held, ", "), ErrDataDirLocked)
	}
	return removed, nil
}

// readJSON reads name into v; it reports false when the file does not
// exist.
func (d *dataDir) readJSON(name string, v any) (bool, error) {
	b, err := os.ReadFile(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("server: read %s: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("server: %s in %s does not parse: %w", name, d.dir, err)
	}
	return true, nil
}

// writeJSON replaces name with v durably.
func (d *dataDir) writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("server: encode %s: %w", name, err)
	}
	tmp := d.path(name + ".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("server: write %s: %w", name, err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, d.path(name))
	}
	if err == nil {
		err = d.syncDir()
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("server: write %s: %w", name, err)
	}
	return nil
}

func (d *dataDir) syncDir() error { return syncPath(d.dir) }

// close releases the lock.
func (d *dataDir) close() error {
	return d.lock.Close() // closing the descriptor drops the flock
}

// removeFile deletes a region file left by an earlier run; a missing file
// is not an error.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeRegionFileNamed removes the region file called name from every
// directory a region file of s may be in, unless another process holds it.
func (s *Server) removeRegionFileNamed(name string) error {
	for _, dir := range s.regionDirs() {
		if _, err := removeStaleRegionFile(dir, name); err != nil {
			return err
		}
	}
	return nil
}

// removeStaleRegionFile removes a region file named name in dir that no
// process holds: one left by an earlier incarnation of this data directory
// whose region.json is gone (the directory was deleted and made again; the
// name is derived from the directory's path). A file some process holds
// open as its region (flock) is an error wrapping ErrDataDirLocked. It
// reports whether it removed a file.
func removeStaleRegionFile(dir, name string) (bool, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("server: stale region file %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, fmt.Errorf("server: region file %s is in use by another process: %w", path, ErrDataDirLocked)
		}
		return false, fmt.Errorf("server: lock stale region file %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("server: remove stale region file %s: %w", path, err)
	}
	return true, nil
}

// looksLikeDataDir refuses to wipe a directory that holds files and none
// a server or its embedded etcd makes: a mistyped --data-dir.
func looksLikeDataDir(abs string) error {
	ents, err := os.ReadDir(abs)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(ents) == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("server: read %s: %w", abs, err)
	}
	for _, e := range ents {
		switch e.Name() {
		case lockFile, stateFile, walDir, snapshotsDir, "etcd":
			return nil
		}
	}
	return fmt.Errorf("server: %s holds no LOCK, %s, %s/ or etcd/: not a data directory; not wiped", abs, stateFile, walDir)
}
