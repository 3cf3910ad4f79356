//go:build !linux

package rdma

import (
	"fmt"
	"os"
)

// HostID returns this host's identity for the shm provider. The shm
// provider runs on Linux only; elsewhere HostID fails with ErrUnsupported.
func HostID() (string, error) { return "", fmt.Errorf("rdma: host identity: %w", ErrUnsupported) }

func defaultTableDir() string { return os.TempDir() }

func createTable(string, int, int) (string, []byte, *os.File, error) {
	return "", nil, nil, fmt.Errorf("rdma: shm provider: %w", ErrUnsupported)
}

// RemoveStaleTables removes the registration tables of dead processes:
// there are none on this platform.
func RemoveStaleTables(string) ([]string, error) { return nil, nil }

func mapReadOnly(string) ([]byte, uint64, uint64, error) {
	return nil, 0, 0, fmt.Errorf("rdma: shm provider: %w", ErrUnsupported)
}

func statFile(string) (uint64, uint64, int64, error) {
	return 0, 0, 0, fmt.Errorf("rdma: shm provider: %w", ErrUnsupported)
}

func unmap([]byte) error { return nil }

func removeFile(path string) error { return os.Remove(path) }
