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

// createTable creates a registration table file of size bytes under a
// fresh name in dir and maps it read-write, shared. The descriptor is
// closed; the mapping keeps the file's pages.
func createTable(dir string, size int) (string, []byte, error) {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	path := filepath.Join(dir, fmt.Sprintf("cell-rdma-%d-%s", os.Getpid(), hex.EncodeToString(nonce[:])))
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, fmt.Errorf("rdma: registration table path: %w", err)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("rdma: create registration table: %w", err)
	}
	defer f.Close()
	length := (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	if err := f.Truncate(int64(length)); err != nil {
		_ = os.Remove(abs)
		return "", nil, fmt.Errorf("rdma: size registration table: %w", err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = os.Remove(abs)
		return "", nil, fmt.Errorf("rdma: map registration table: %w", err)
	}
	return abs, data, nil
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
