package rdma

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := unix.Kill(pid, 0); err == nil {
		t.Skipf("pid %d was reused at once", pid)
	}
	return pid
}

// TestRemoveStaleFabricSHM: files of libfabric shm endpoints whose process
// is gone are removed; a live process's, and other files, stay.
func TestRemoveStaleFabricSHM(t *testing.T) {
	dir := t.TempDir()
	dead := deadPID(t)
	names := map[string]bool{ // name -> removed
		fmt.Sprintf("%d:0:0", dead):         true,
		fmt.Sprintf("%d:0:12", dead):        true,
		fmt.Sprintf("%d:0:0", os.Getpid()):  false,
		fmt.Sprintf("%d:0:0", 1):            false, // init: alive
		fmt.Sprintf("cell-rdma-%d-x", dead): false,
		"12:ab:0":                           false,
	}
	for n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveStaleFabricSHM(dir)
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range names {
		_, statErr := os.Stat(filepath.Join(dir, n))
		if gone := errors.Is(statErr, os.ErrNotExist); gone != want {
			t.Errorf("%s: removed %v, want %v", n, gone, want)
		}
	}
	if len(removed) != 2 {
		t.Errorf("removed %v", removed)
	}
}
