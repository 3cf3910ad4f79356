package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
)

// libfabric's shm provider backs each endpoint with a file in /dev/shm
// named after its process, "<pid>:<n>:<n>", which it removes when the
// endpoint closes; a process killed with its endpoint open leaves the
// file (16 MiB of tmpfs) behind.
var fabricSHMName = regexp.MustCompile(`^([0-9]+):[0-9]+:[0-9]+$`)

// RemoveStaleFabricSHM removes from dir (/dev/shm when empty) the files
// of libfabric shm endpoints whose process is gone (kill(pid, 0) fails
// with ESRCH), and returns their paths. A fabric server or client of the
// shm provider calls it when it starts; tests call it after killing a
// process that had one.
func RemoveStaleFabricSHM(dir string) ([]string, error) {
	if dir == "" {
		dir = shmDir
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rdma: list %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		m := fabricSHMName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive, or not ours to signal
		}
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err == nil {
			removed = append(removed, path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("rdma: remove a dead process's libfabric shm file: %w", err))
		}
	}
	return removed, errors.Join(errs...)
}
