package meganode

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// This file parses what the kernel says about huge pages. The parsers are
// pure (and platform independent, so they are tested everywhere); the Linux
// code that reads /proc and /sys is in mmap_linux.go.

// hugetlbfsMount is a hugetlbfs mount point from /proc/mounts.
type hugetlbfsMount struct {
	dir      string
	pageSize uint64 // from the pagesize= option; 0 means the default size
}

// parseMounts returns the hugetlbfs mounts listed in /proc/mounts format
// (fields separated by spaces, spaces in paths escaped as \040).
func parseMounts(data []byte) []hugetlbfsMount {
	var ms []hugetlbfsMount
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[2] != "hugetlbfs" {
			continue
		}
		m := hugetlbfsMount{dir: unescapeMountPath(f[1])}
		for _, opt := range strings.Split(f[3], ",") {
			if v, ok := strings.CutPrefix(opt, "pagesize="); ok {
				if n, err := parseSize(v); err == nil {
					m.pageSize = n
				}
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// unescapeMountPath undoes the octal escapes (\040 space, \011 tab, \012
// newline, \134 backslash) of /proc/mounts paths.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseSize parses a size with an optional K, M, G or T suffix (powers of
// 1024, case-insensitive, optional trailing B), as hugetlbfs prints pagesize.
func parseSize(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift != 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n == 0 || n > (1<<63)>>shift {
		return 0, fmt.Errorf("meganode: bad size %q", s)
	}
	return n << shift, nil
}

// meminfo holds the huge page lines of /proc/meminfo.
type meminfo struct {
	total, free, rsvd, surp uint64 // pages of the default huge page size
	pageSize                uint64 // Hugepagesize in bytes
}

// available returns the default-size huge pages that a new mapping can
// still reserve: free pages not already promised to other mappings.
func (m meminfo) available() uint64 {
	if m.rsvd >= m.free {
		return 0
	}
	return m.free - m.rsvd
}

// parseMeminfo extracts the huge page counters from /proc/meminfo. A kernel
// without huge page support has no such lines: all counters are then zero.
func parseMeminfo(data []byte) (meminfo, error) {
	var m meminfo
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		unit := uint64(1)
		switch name {
		case "HugePages_Total":
			dst = &m.total
		case "HugePages_Free":
			dst = &m.free
		case "HugePages_Rsvd":
			dst = &m.rsvd
		case "HugePages_Surp":
			dst = &m.surp
		case "Hugepagesize":
			dst = &m.pageSize
			unit = 1024
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return meminfo{}, fmt.Errorf("meganode: meminfo line %q has no value", sc.Text())
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return meminfo{}, fmt.Errorf("meganode: meminfo line %q: %w", sc.Text(), err)
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			unit = 1024
		}
		*dst = v * unit
	}
	if err := sc.Err(); err != nil {
		return meminfo{}, fmt.Errorf("meganode: reading meminfo: %w", err)
	}
	return m, nil
}

// hugeEnv is what the kernel says about huge pages, gathered by the
// platform code, so that the choice of a hugetlbfs mount is a pure function.
type hugeEnv struct {
	mounts  []hugetlbfsMount
	meminfo meminfo
	// avail returns the free, unreserved pages of a huge page size other
	// than the default one (from sysfs); ok is false when unknown.
	avail func(pageSize uint64) (n uint64, ok bool)
	// writable reports whether this process may create files in dir.
	writable func(dir string) bool
}

// pick returns the first hugetlbfs mount (the one at dir, if dir is not
// empty) that has enough free huge pages for a mapping of size bytes and is
// writable, with its page size filled in. Otherwise it returns an error
// wrapping ErrNoHugepages that says why each mount was passed over.
func (env hugeEnv) pick(dir string, size uint64) (hugetlbfsMount, error) {
	var reasons []string
	for _, m := range env.mounts {
		if dir != "" && filepath.Clean(m.dir) != filepath.Clean(dir) {
			continue
		}
		ps := m.pageSize
		if ps == 0 {
			ps = env.meminfo.pageSize
		}
		if ps == 0 {
			reasons = append(reasons, fmt.Sprintf("%s: unknown huge page size", m.dir))
			continue
		}
		var avail uint64
		if ps == env.meminfo.pageSize {
			avail = env.meminfo.available()
		} else if a, ok := env.avail(ps); ok {
			avail = a
		} else {
			reasons = append(reasons, fmt.Sprintf("%s: no counters for %d-byte huge pages", m.dir, ps))
			continue
		}
		need := size/ps + min(size%ps, 1)
		if avail < need {
			reasons = append(reasons, fmt.Sprintf("%s: %d free huge pages of %d KiB, need %d", m.dir, avail, ps>>10, need))
			continue
		}
		if !env.writable(m.dir) {
			reasons = append(reasons, fmt.Sprintf("%s: not writable", m.dir))
			continue
		}
		m.pageSize = ps
		return m, nil
	}
	switch {
	case len(reasons) > 0:
		return hugetlbfsMount{}, fmt.Errorf("meganode: %s (HugePages_Total %d): %w", strings.Join(reasons, "; "), env.meminfo.total, ErrNoHugepages)
	case dir != "":
		return hugetlbfsMount{}, fmt.Errorf("meganode: no hugetlbfs mounted at %s: %w", dir, ErrNoHugepages)
	default:
		return hugetlbfsMount{}, fmt.Errorf("meganode: no hugetlbfs mount in /proc/mounts (HugePages_Total %d): %w", env.meminfo.total, ErrNoHugepages)
	}
}
