package rsm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cellstore/cell/meganode"
)

// dirFiles keeps a test's region files as plain mapped files in dir
// (meganode.HugepagesOff): real mapped memory, removed with the test's
// temporary directory.
type dirFiles struct {
	dir string
	// created counts the files Create made, discarded those Discard
	// removed: a test checks what a restore did with them.
	created, discarded int
}

func (f *dirFiles) options(id uint32, l Layout, name string) meganode.Options {
	return meganode.Options{ID: id, Size: l.Size, MeganodeSize: l.MeganodeSize, NodeSize: int(l.NodeSize), SizeClasses: l.SizeClasses,
		Hugepages: meganode.HugepagesOff, Dir: f.dir, Name: name, Logger: discard}
}

func (f *dirFiles) name(id uint32) string { return fmt.Sprintf("region-%06d", id) }

func (f *dirFiles) Create(id uint32, l Layout) (*meganode.Region, error) {
	if err := os.Remove(filepath.Join(f.dir, f.name(id))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	f.created++
	return meganode.Create(f.options(id, l, f.name(id)))
}

func (f *dirFiles) ReadImage(id uint32, img io.Reader) (*meganode.Region, error) {
	name := f.name(id) + ".restoring"
	if err := os.Remove(filepath.Join(f.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return meganode.RestoreImage(f.options(id, Layout{}, name), img)
}

func (f *dirFiles) Install(id uint32, r *meganode.Region) (*meganode.Region, error) {
	tmp := r.Path()
	if err := r.Close(); err != nil {
		return nil, err
	}
	path := filepath.Join(f.dir, f.name(id))
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	return meganode.Open(path, meganode.OpenOptions{Logger: discard})
}

func (f *dirFiles) Discard(r *meganode.Region) error {
	f.discarded++
	return errors.Join(r.Close(), r.Remove())
}

var discard = slog.New(slog.DiscardHandler)

// testLayout is a small region: 4 MiB of 256 KiB meganodes of 1 KiB
// nodes.
var testLayout = Layout{Size: 4 << 20, MeganodeSize: 256 << 10, NodeSize: 1 << 10}

// newMachine makes a Machine of region id over an empty region of layout
// l in a temporary directory, closed when the test ends.
func newMachine(t testing.TB, id uint32, l Layout, edit ...func(*Config)) (*Machine, *dirFiles) {
	t.Helper()
	files := &dirFiles{dir: t.TempDir()}
	r, err := files.Create(id, l)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Region: r, Files: files}
	for _, e := range edit {
		e(&c)
	}
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, files
}
