//go:build linux

package rdma

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Files the host identity is read from.
const (
	procBootID = "/proc/sys/kernel/random/boot_id"
	shmDir     = "/dev/shm"
)

// HostID returns this host's identity for the shm provider: the host name
// and the kernel's boot id ("name/boot-id"). Two processes with the same
// identity run on the same kernel since its last boot, so a region file
// path from one is meaningful to the other, provided they also share the
// file system namespace (containers on one kernel share the boot id but
// may not share /dev/shm: give each container its own Host in the options,
// or mount the same directory). Discovery, i.e. telling a client which
// servers share its host, is left to the caller (the region table).
func HostID() (string, error) { return hostIDOnce() }

var hostIDOnce = sync.OnceValues(func() (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("rdma: host identity: %w", err)
	}
	boot, err := os.ReadFile(procBootID)
	if err != nil {
		return "", fmt.Errorf("rdma: host identity: %w", err)
	}
	return name + "/" + strings.TrimSpace(string(boot)), nil
})

// defaultTableDir returns /dev/shm when this process can create files in
// it, else os.TempDir().
func defaultTableDir() string {
	if fi, err := os.Stat(shmDir); err == nil && fi.IsDir() && unix.Access(shmDir, unix.W_OK|unix.X_OK) == nil {
		return shmDir
	}
	return os.TempDir()
}

// tablePrefix begins the name of every registration table file:
// cell-rdma-<pid>-<nonce>.
const tablePrefix = "cell-rdma-"

// createTable creates a registration table file of size bytes under a
// fresh name in dir, locks it (flock, shared: the lock says a live process
// owns the table, whatever pid namespace looks at it) and maps it
// read-write, shared. The returned file holds the lock until it is closed.
func createTable(dir string, size, group int) (string, []byte, *os.File, error) {
	path, data, f, err := createTableFile(dir, size, group)
	if err != nil {
		return "", nil, nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		_ = unix.Munmap(data)
		_ = f.Close()
		_ = os.Remove(path)
		return "", nil, nil, fmt.Errorf("rdma: lock registration table: %w", err)
	}
	return path, data, f, nil
}

// RemoveStaleTables removes the registration tables in dir of processes
// that died without closing them (kill -9): named cell-rdma-<pid>-*, their
// pid gone (kill(pid, 0) fails with ESRCH) and no process holding them
// locked (a live table's owner does; from another pid namespace its pid
// may look dead). It returns the paths removed.
func RemoveStaleTables(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rdma: list %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), tablePrefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive (or not ours to signal: alive too)
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("rdma: stale registration table: %w", err))
			}
			continue
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if err = os.Remove(path); err == nil {
				removed = append(removed, path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("rdma: remove stale registration table: %w", err))
			}
		}
		_ = f.Close()
	}
	return removed, errors.Join(errs...)
}

// createTableFile creates a registration table file of size bytes under a
// fresh name in dir (0600; 0640 and owned by group if group is positive)
// and maps it read-write, shared.
func createTableFile(dir string, size, group int) (string, []byte, *os.File, error) {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	path := filepath.Join(dir, fmt.Sprintf(tablePrefix+"%d-%s", os.Getpid(), hex.EncodeToString(nonce[:])))
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, nil, fmt.Errorf("rdma: registration table path: %w", err)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, nil, fmt.Errorf("rdma: create registration table: %w", err)
	}
	if group > 0 {
		// Given to the group before it is opened to the group.
		err := f.Chown(-1, group)
		if err == nil {
			err = f.Chmod(0o640)
		}
		if err != nil {
			_ = f.Close()
			_ = os.Remove(abs)
			return "", nil, nil, fmt.Errorf("rdma: share registration table with group %d: %w", group, err)
		}
	}
	length := (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	if err := f.Truncate(int64(length)); err != nil {
		_ = f.Close()
		_ = os.Remove(abs)
		return "", nil, nil, fmt.Errorf("rdma: size registration table: %w", err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = f.Close()
		_ = os.Remove(abs)
		return "", nil, nil, fmt.Errorf("rdma: map registration table: %w", err)
	}
	return abs, data, f, nil
}

// mapReadOnly maps the whole file at path read-only and shared, and returns
// the file's device and inode. A hugetlbfs file's size is a multiple of its
// page size, as mmap there requires.
func mapReadOnly(path string) (data []byte, dev, ino uint64, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, 0, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size <= 0 || uint64(st.Size) > uint64(^uint(0)>>1) {
		return nil, 0, 0, fmt.Errorf("rdma: %s: not a mappable regular file (%d bytes)", path, st.Size)
	}
	data, err = unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, 0, &fs.PathError{Op: "mmap", Path: path, Err: err}
	}
	return data, uint64(st.Dev), st.Ino, nil
}

// statFile returns a file's device, inode and size.
func statFile(path string) (dev, ino uint64, size int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, 0, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return uint64(st.Dev), st.Ino, st.Size, nil
}

func unmap(data []byte) error {
	if data == nil {
		return nil
	}
	return unix.Munmap(data)
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
