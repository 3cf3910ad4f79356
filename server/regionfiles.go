package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// replicaFiles is where a replica's region files live (rsm.Files): named
// after the data directory (datadir.go), on hugetlbfs or in
// Options.ShmDir, as the server's options say. A region that was served
// may still be read by requests in flight when its machine discards it:
// it stays mapped until the server stops (Server.retire), and only its
// file is removed.
type replicaFiles struct{ rep *replica }

var _ rsm.Files = replicaFiles{}

// Create makes region id's file, empty, with layout l, in place of any
// file of its name.
func (f replicaFiles) Create(id uint32, l rsm.Layout) (*meganode.Region, error) {
	s := f.rep.srv
	opts := f.rep.regionOptions(id, l)
	if err := s.removeRegionFileNamed(opts.Name); err != nil {
		return nil, err
	}
	r, err := meganode.Create(opts)
	if err != nil {
		return nil, fmt.Errorf("server: create region %d: %w", id, err)
	}
	return r, nil
}

// restoringSuffix names the file an image is read into, beside the
// region's own.
const restoringSuffix = ".restoring"

// ReadImage reads an image into region id's file name with
// restoringSuffix.
func (f replicaFiles) ReadImage(id uint32, img io.Reader) (*meganode.Region, error) {
	s := f.rep.srv
	opts := f.rep.regionOptions(id, rsm.Layout{}) // sizes from the image
	opts.Name += restoringSuffix
	if err := s.removeRegionFileNamed(opts.Name); err != nil {
		return nil, err
	}
	if k := s.opts.TestingKnobs.BeforeRestoreImage; k != nil {
		k(id)
	}
	return meganode.RestoreImage(opts, img)
}

// Install renames a restored image's file into the region's place.
func (f replicaFiles) Install(id uint32, r *meganode.Region) (*meganode.Region, error) {
	s := f.rep.srv
	tmp := r.Path()
	if err := r.Close(); err != nil {
		_ = r.Remove()
		return nil, err
	}
	path := filepath.Join(filepath.Dir(tmp), s.dir.regionFileName(id))
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return nil, err
	}
	return meganode.Open(path, meganode.OpenOptions{Logger: s.log})
}

// Discard removes r's file; it unmaps r, or retires it when the replica
// was served (requests may still read it).
func (f replicaFiles) Discard(r *meganode.Region) error {
	s := f.rep.srv
	path := r.Path()
	var err error
	if f.rep.wasServed.Load() {
		s.hosting.retire(r)
		err = r.Remove()
	} else {
		err = errors.Join(r.Close(), r.Remove())
	}
	if err != nil {
		return err
	}
	s.log.Info("server: region closed and its file removed (the log holds it)", slog.Uint64("region", uint64(r.ID())), slog.String("path", path))
	return nil
}

// openMachine makes region id's file, empty, with the sizes of the
// server's options (the log's region record pins the region's own), and
// the replica's state machine over it.
func (rep *replica) openMachine(id uint32) error {
	s := rep.srv
	files := replicaFiles{rep}
	r, err := files.Create(id, rsm.Layout{Size: s.opts.RegionSize, MeganodeSize: s.opts.MeganodeSize, NodeSize: uint32(s.opts.NodeSize), SizeClasses: !s.opts.BuddyExtents})
	if err != nil {
		return err
	}
	sm, err := rsm.New(rsm.Config{
		Region: r, Files: files, Logger: s.log,
		OnApply: func(index uint64, rec []byte, kind string, err error) {
			s.metrics.applies.WithLabelValues(kind, wire.StatusOf(wireError(err)).String()).Inc()
			if hook := s.opts.TestingKnobs.OnApply; hook != nil {
				hook(index, rec, err)
			}
		},
		OnSnapshot: s.opts.TestingKnobs.OnSnapshot,
	})
	if err != nil {
		return errors.Join(err, r.Close(), r.Remove())
	}
	rep.regionID, rep.sm = id, sm
	return nil
}
