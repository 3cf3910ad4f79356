//go:build linux

package rdma

import (
	"testing"

	"golang.org/x/sys/unix"
)

// offHeap returns n bytes of anonymous mapped memory, outside the Go heap,
// unmapped at cleanup.
func offHeap(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}
