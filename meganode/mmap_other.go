//go:build !linux

package meganode

import (
	"fmt"
	"runtime"
)

// Regions are mapped with Linux interfaces (hugetlbfs, MADV_HUGEPAGE,
// fallocate, flock). Elsewhere Create and Open fail clearly; the format,
// the allocator and their tests are platform independent.

func createMapping(o *Options, size uint64) (*mapping, error) {
	if o.Hugepages == HugepagesOn {
		return nil, fmt.Errorf("meganode: huge pages on %s: %w: %w", runtime.GOOS, ErrNoHugepages, ErrUnsupported)
	}
	return nil, fmt.Errorf("meganode: regions on %s: %w", runtime.GOOS, ErrUnsupported)
}

func openMapping(path string) (*mapping, error) {
	return nil, fmt.Errorf("meganode: open region %s on %s: %w", path, runtime.GOOS, ErrUnsupported)
}

func (m *mapping) close() error { return nil }

func (m *mapping) sync() error { return nil }

// nextData: without a way to ask for data ranges, everything may be data.
func (m *mapping) nextData(off, size uint64) (uint64, uint64, bool) { return scanAll(off, size) }

func (m *mapping) adviseScan() func() { return func() {} }

// HugetlbfsMounts lists the hugetlbfs mounts: none on this platform.
func HugetlbfsMounts() []string { return nil }
