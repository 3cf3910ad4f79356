package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
)

// localMeganode is a meganode of the server's region.
type localMeganode struct {
	m     *meganode.Meganode
	t     *blink.Tree
	level int // level in the global tree, fixed for the meganode's life

	// splitQueued: a split request for the meganode is queued (split.go);
	// splitForce: a write found it full, split whatever its fill.
	splitQueued, splitForce atomic.Bool
}

// meganodeTable holds the region's meganodes by slot. It is immutable once
// published: readers load it without a lock.
type meganodeTable struct {
	bySlot []*localMeganode
}

// meganodeAt returns the meganode holding the node at p, or nil when p is
// not a node of a meganode in use here.
func (s *Server) meganodeAt(p blink.Ptr) *localMeganode {
	if p.Region() != s.regionID {
		return nil
	}
	slot, ok := s.region.SlotOf(p)
	if !ok {
		return nil
	}
	tab := s.megas.Load()
	if slot >= len(tab.bySlot) || tab.bySlot[slot] == nil {
		return nil
	}
	lm := tab.bySlot[slot]
	if (p.Offset()-lm.m.Base())%uint64(s.nodeSize) != 0 {
		return nil
	}
	return lm
}

// addMeganodeLocked publishes m in the meganode table. REQUIRES: s.megaMu
// held.
func (s *Server) addMeganodeLocked(m *meganode.Meganode) error {
	h, err := m.Tree().Header()
	if err != nil {
		return fmt.Errorf("server: meganode %v: %w", m.Ptr(), err)
	}
	old := s.megas.Load()
	bySlot := make([]*localMeganode, max(len(old.bySlot), m.Slot()+1))
	copy(bySlot, old.bySlot)
	bySlot[m.Slot()] = &localMeganode{m: m, t: m.Tree(), level: h.Level}
	s.megas.Store(&meganodeTable{bySlot: bySlot})
	return nil
}

// dropMeganode unpublishes the meganode of slot and frees the slot.
func (s *Server) dropMeganode(slot int) error {
	s.megaMu.Lock()
	defer s.megaMu.Unlock()
	old := s.megas.Load()
	bySlot := append([]*localMeganode(nil), old.bySlot...)
	if slot < len(bySlot) {
		bySlot[slot] = nil
	}
	s.megas.Store(&meganodeTable{bySlot: bySlot})
	return s.region.FreeMeganode(slot)
}

// treeOptions are the run-time options of the region's trees.
func (s *Server) treeOptions() blink.Options {
	return blink.Options{NodeSize: s.nodeSize}
}

// openRegion reopens the region a clean shutdown left in the data
// directory, or else discards what an unclean stop left and creates a new
// region. It sets s.region, s.regionID, s.nodeSize and the meganode table.
func (s *Server) openRegion(ctx context.Context) error {
	d := s.dir
	var st dataState
	haveState, err := d.readJSON(stateFile, &st)
	if err != nil {
		return err
	}
	if haveState && st.ServerID != s.opts.ServerID {
		return fmt.Errorf("server: %s holds region %d of server %q, not %q (start with --server-id %s or another data directory): %w",
			d.dir, st.Region, st.ServerID, s.opts.ServerID, st.ServerID, ErrDataDirOwned)
	}
	var mark cleanMarker
	clean, err := d.readJSON(markerFile, &mark)
	if err != nil {
		s.log.Warn("server: unreadable clean-shutdown marker, treating the last stop as unclean", slog.Any("err", err))
		clean = false
	}
	if haveState && clean && mark.Region == st.Region && mark.Path == st.Path {
		if _, err := os.Stat(st.Path); err == nil {
			return s.reopenRegion(ctx, st)
		}
		s.log.Warn("server: the previous run shut down cleanly but its region file is gone (a tmpfs or hugetlbfs does not survive a reboot); starting with an empty region",
			slog.Uint64("region", uint64(st.Region)), slog.String("path", st.Path))
	} else if haveState {
		s.log.Warn("server: the previous run did NOT shut down cleanly; its region is discarded and the server starts EMPTY (there is no write-ahead log yet)",
			slog.Uint64("region", uint64(st.Region)), slog.String("path", st.Path))
	}
	if err := d.remove(markerFile); err != nil {
		return err
	}
	id, err := s.chooseRegionID(ctx, haveState, st)
	if err != nil {
		return err
	}
	if haveState {
		if err := removeFile(st.Path); err != nil {
			return fmt.Errorf("server: remove the discarded region file: %w", err)
		}
	}
	name := d.regionFileName(id)
	for _, dir := range []string{d.dir, s.opts.ShmDir} {
		removed, err := removeStaleRegionFile(dir, name)
		if err != nil {
			return err
		}
		if removed {
			s.log.Warn("server: removed a region file left by an earlier incarnation of this data directory", slog.String("path", filepath.Join(dir, name)))
		}
	}
	r, err := meganode.Create(meganode.Options{
		ID:           id,
		Size:         s.opts.RegionSize,
		MeganodeSize: s.opts.MeganodeSize,
		NodeSize:     s.opts.NodeSize,
		Hugepages:    s.opts.Hugepages,
		Dir:          d.dir,
		ShmDir:       s.opts.ShmDir,
		Name:         name,
		Logger:       s.log,
	})
	if err != nil {
		return fmt.Errorf("server: create region %d: %w", id, err)
	}
	if err := d.writeJSON(stateFile, dataState{ServerID: s.opts.ServerID, Region: id, Path: r.Path()}); err != nil {
		_ = r.Close()
		_ = r.Remove()
		return err
	}
	s.setRegion(r)
	s.log.Info("server: new region", slog.Uint64("region", uint64(id)), slog.String("path", r.Path()), slog.String("backing", r.Backing().String()))
	return nil
}

// chooseRegionID keeps the ID of the region being discarded when the
// region table still says this server hosts it, and allocates a new one
// otherwise.
func (s *Server) chooseRegionID(ctx context.Context, haveState bool, st dataState) (uint32, error) {
	if haveState && st.Region != 0 {
		e, err := s.opts.Store.Region(ctx, st.Region)
		switch {
		case err == nil && e.Host == s.opts.ServerID:
			return st.Region, nil
		case err == nil:
			s.log.Warn("server: the region table gives our old region to another server; allocating a new one",
				slog.Uint64("region", uint64(st.Region)), slog.String("host", e.Host))
		case errors.Is(err, regiontable.ErrNotFound):
		default:
			return 0, fmt.Errorf("server: look up region %d: %w", st.Region, err)
		}
	}
	id, err := s.opts.Store.AllocRegionID(ctx)
	if err != nil {
		return 0, fmt.Errorf("server: allocate a region ID: %w", err)
	}
	return id, nil
}

// reopenRegion opens the region of a clean shutdown and its meganodes.
func (s *Server) reopenRegion(ctx context.Context, st dataState) error {
	if e, err := s.opts.Store.Region(ctx, st.Region); err == nil && e.Host != s.opts.ServerID {
		return fmt.Errorf("server: region %d in %s is hosted by %q per the region table: %w", st.Region, s.dir.dir, e.Host, ErrRegionOwned)
	} else if err != nil && !errors.Is(err, regiontable.ErrNotFound) {
		return fmt.Errorf("server: look up region %d: %w", st.Region, err)
	}
	r, err := meganode.Open(st.Path, meganode.OpenOptions{Logger: s.log})
	if err != nil {
		return fmt.Errorf("server: reopen region %d (remove %s to start empty): %w", st.Region, s.dir.path(markerFile), err)
	}
	if r.ID() != st.Region {
		_ = r.Close()
		return fmt.Errorf("server: %s holds region %d, region.json says %d: %w", st.Path, r.ID(), st.Region, meganode.ErrCorruption)
	}
	lay := r.Layout()
	if lay.NodeSize != uint64(s.opts.NodeSize) || lay.MeganodeSize != s.opts.MeganodeSize {
		s.log.Warn("server: the reopened region keeps the sizes it was created with",
			slog.Uint64("node_size", lay.NodeSize), slog.Uint64("meganode_size", lay.MeganodeSize), slog.Uint64("region_size", lay.Size))
	}
	// From here on a crash must not look like a clean stop.
	if err := s.dir.remove(markerFile); err != nil {
		_ = r.Close()
		return err
	}
	s.setRegion(r)
	s.megaMu.Lock()
	defer s.megaMu.Unlock()
	for _, slot := range r.Meganodes() {
		m, err := r.OpenMeganode(slot, s.treeOptions())
		if err != nil {
			return fmt.Errorf("server: reopen meganode in slot %d: %w", slot, err)
		}
		if err := m.Tree().CheckErr(); err != nil {
			return fmt.Errorf("server: meganode %v of the reopened region: %w", m.Ptr(), err)
		}
		if err := s.addMeganodeLocked(m); err != nil {
			return err
		}
	}
	s.log.Info("server: region reopened after a clean shutdown", slog.Uint64("region", uint64(r.ID())),
		slog.String("path", r.Path()), slog.String("backing", r.Backing().String()), slog.Int("meganodes", len(r.Meganodes())))
	return nil
}

func (s *Server) setRegion(r *meganode.Region) {
	s.region = r
	s.regionID = r.ID()
	s.nodeSize = int(r.Layout().NodeSize)
	s.maxKey = blink.MaxKeySize(s.nodeSize)
}

// ensureRoot makes sure the cluster has a root meganode. The root is
// (re)made here, as one leaf meganode covering the whole key space, when
// the cluster has none, or when the root pointer names a region that was
// ours and is gone (an unclean stop discarded it, or its ID is unknown to
// the table). A root on another live server is left alone. The pointer is
// also stored at offset 0 of our region (DESIGN §4).
func (s *Server) ensureRoot(ctx context.Context) error {
	root, err := s.opts.Store.Root(ctx)
	if err != nil {
		return fmt.Errorf("server: read the root pointer: %w", err)
	}
	for attempt := 0; ; attempt++ {
		if attempt > 8 {
			return fmt.Errorf("server: the root pointer keeps changing: %w", regiontable.ErrConflict)
		}
		remake, why, err := s.rootNeedsRemaking(ctx, root)
		if err != nil {
			return err
		}
		if !remake {
			s.root.Store(uint64(root))
			s.region.SetRoot(root)
			return nil
		}
		s.megaMu.Lock()
		m, err := s.region.NewMeganode(0, blink.Full, s.treeOptions())
		if err == nil {
			err = s.addMeganodeLocked(m)
		}
		s.megaMu.Unlock()
		if err != nil {
			return fmt.Errorf("server: format the root meganode: %w", err)
		}
		cur, err := s.opts.Store.SetRoot(ctx, root, m.Ptr())
		if err == nil {
			s.log.Info("server: formatted the root meganode", slog.String("root", m.Ptr().String()), slog.String("old_root", root.String()), slog.String("why", why))
			s.root.Store(uint64(m.Ptr()))
			s.region.SetRoot(m.Ptr())
			return nil
		}
		// Lost the race (or etcd failed): take the meganode back.
		if ferr := s.dropMeganode(m.Slot()); ferr != nil {
			return fmt.Errorf("server: free the unused root meganode: %w", ferr)
		}
		if !errors.Is(err, regiontable.ErrConflict) {
			return fmt.Errorf("server: publish the root pointer: %w", err)
		}
		root = cur
	}
}

// rootNeedsRemaking decides whether root must be replaced by a new root
// meganode formatted here, and why.
func (s *Server) rootNeedsRemaking(ctx context.Context, root blink.Ptr) (bool, string, error) {
	if root.IsNil() {
		return true, "the cluster had no root", nil
	}
	if root.Region() == s.regionID {
		if lm := s.meganodeAt(root); lm != nil && lm.m.Ptr() == root {
			return false, "", nil
		}
		return true, "the root pointed into our region, which holds no meganode there (its contents were discarded)", nil
	}
	e, err := s.opts.Store.Region(ctx, root.Region())
	switch {
	case errors.Is(err, regiontable.ErrNotFound):
		return true, fmt.Sprintf("the root's region %d is not in the region table", root.Region()), nil
	case err != nil:
		return false, "", fmt.Errorf("server: look up the root's region %d: %w", root.Region(), err)
	case e.Host == s.opts.ServerID:
		return true, fmt.Sprintf("the root's region %d was ours and is gone", root.Region()), nil
	}
	s.log.Info("server: the root meganode is on another server", slog.String("root", root.String()), slog.String("host", e.Host))
	return false, "", nil
}
