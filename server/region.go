package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
)

// openRegion decides which region this data directory holds (region.json,
// or a new ID from the region table) and creates its file EMPTY, with the
// sizes of this server's options: the region's raft group then rebuilds
// its contents from the last snapshot and the log (package rsm), and the first
// record of the log pins the sizes it was made with. Whatever file an
// earlier run left is discarded: after a crash it may hold half-applied
// records, and the log holds everything acknowledged. It sets the own
// replica's region and state machine.
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
	id, err := s.chooseRegionID(ctx, haveState, st)
	if err != nil {
		return err
	}
	if haveState && st.Path != "" {
		if err := removeFile(st.Path); err != nil {
			return fmt.Errorf("server: remove the last run's region file: %w", err)
		}
	}
	// Every region file of this directory an earlier run left (its own
	// region's and its followers', after a crash) is garbage: a restart
	// rebuilds each from the log.
	stale, held, err := removeStaleRegionFiles(s.regionDirs(), regionFilePrefix(d.dir))
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		s.log.Info("server: removed the region files an earlier run left", slog.Any("paths", stale))
	}
	if len(held) > 0 {
		s.log.Warn("server: region files named after this data directory are held by another process", slog.Any("paths", held))
	}
	if err := s.reps.own.openMachine(id); err != nil {
		return err
	}
	r := s.reps.own.sm.Region()
	if err := d.writeJSON(stateFile, dataState{ServerID: s.opts.ServerID, Region: id, Path: r.Path()}); err != nil {
		return errors.Join(err, s.reps.own.sm.Close())
	}
	s.log.Info("server: region file made; its raft group restores its contents", slog.Uint64("region", uint64(id)), slog.String("path", r.Path()),
		slog.String("backing", r.Backing().String()), slog.Bool("restart", haveState))
	return nil
}

// regionOptions are the options that make region id's file with layout b.
func (rep *replica) regionOptions(id uint32, b rsm.Layout) meganode.Options {
	return meganode.Options{
		ID:           id,
		Size:         b.Size,
		MeganodeSize: b.MeganodeSize,
		NodeSize:     int(b.NodeSize),
		SizeClasses:  b.SizeClasses,
		Hugepages:    rep.srv.opts.Hugepages,
		Dir:          rep.srv.dir.dir,
		ShmDir:       rep.srv.opts.ShmDir,
		Name:         rep.srv.dir.regionFileName(id),
		Prefault:     rep.srv.opts.Prefault,
		FileGroup:    rep.srv.opts.ShmGroup,
		Logger:       rep.srv.log,
	}
}

// chooseRegionID keeps the ID of the region this directory held, unless
// the region table gives it to another server, and allocates a new one
// for a new directory.
func (s *Server) chooseRegionID(ctx context.Context, haveState bool, st dataState) (uint32, error) {
	if haveState && st.Region != 0 {
		e, err := s.opts.Store.Region(ctx, st.Region)
		switch {
		case err == nil && e.Host != s.opts.ServerID && !holdsReplica(e, s.opts.ServerID) && len(e.Replicas) == 0:
			return 0, fmt.Errorf("server: region %d in %s is hosted by %q per the region table: %w", st.Region, s.dir.dir, e.Host, ErrRegionOwned)
		case err == nil && e.Host != s.opts.ServerID && !holdsReplica(e, s.opts.ServerID):
			// This server was replaced in the region's group while it
			// was down (repair.go): what its log holds of the region is
			// stale. It starts over with a new, empty region.
			if err := errors.Join(s.wal.DropRegion(st.Region), s.snaps.DropRegion(st.Region)); err != nil {
				return 0, fmt.Errorf("server: drop the stale replica of region %d: %w", st.Region, err)
			}
			s.log.Warn("server: this server was replaced in its region's group while it was down; it drops its stale replica and starts a new region",
				slog.Uint64("region", uint64(st.Region)), slog.String("host", e.Host), slog.Any("replicas", e.Replicas))
		case err == nil, errors.Is(err, regiontable.ErrNotFound):
			return st.Region, nil
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

// ensureRoot makes sure the cluster has a root meganode. The root is
// (re)made here, as one leaf meganode covering the whole key space, when
// the cluster has none, or when the root pointer names a region that was
// ours and holds no such meganode. A root on another live server is left
// alone. Making it is two records around the region table's
// compare-and-set: root format, then root publish (the pointer at offset
// 0 of the region, docs/design.md §4), or root drop when the table took another.
func (s *Server) ensureRoot(ctx context.Context) error {
	root, err := s.opts.Store.Root(ctx)
	if err != nil {
		return fmt.Errorf("server: read the root pointer: %w", err)
	}
	waitSince := time.Now()
	for attempt := 0; ; attempt++ {
		if attempt > 8 {
			return fmt.Errorf("server: the root pointer keeps changing: %w", regiontable.ErrConflict)
		}
		remake, why, err := s.rootNeedsRemaking(ctx, root)
		if errors.Is(err, errRootUnpublished) {
			if time.Since(waitSince) < rootRegionWait {
				// Another server formatted the root and has not published
				// its region yet (they start together): wait for it,
				// rather than make a second root beside its.
				attempt--
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return fmt.Errorf("server: wait for the root's region %d to be published: %w", root.Region(), ctx.Err())
				}
				if root, err = s.opts.Store.Root(ctx); err != nil {
					return fmt.Errorf("server: read the root pointer: %w", err)
				}
				continue
			}
			remake, why, err = true, fmt.Sprintf("the root's region %d has not been in the region table for %v", root.Region(), rootRegionWait), nil
		}
		if err != nil {
			return err
		}
		if !remake {
			s.root.Store(uint64(root))
			return nil
		}
		res, err := s.reps.own.proposeRoot(rsm.RootFormat, 0)
		if err != nil {
			return fmt.Errorf("server: format the root meganode: %w", err)
		}
		np := res.New
		cur, err := s.opts.Store.SetRoot(ctx, root, np)
		if err == nil {
			s.log.Info("server: formatted the root meganode", slog.String("root", np.String()), slog.String("old_root", root.String()), slog.String("why", why))
			return s.publishRoot(s.reps.own, np)
		}
		// Lost the race (or etcd failed): take the meganode back.
		if _, ferr := s.reps.own.proposeRoot(rsm.RootDrop, np); ferr != nil {
			return fmt.Errorf("server: free the unused root meganode: %w", ferr)
		}
		if !errors.Is(err, regiontable.ErrConflict) {
			return fmt.Errorf("server: publish the root pointer: %w", err)
		}
		root = cur
	}
}

// proposeRoot proposes a root record of phase p for meganode mp (0 for
// format) and waits for its outcome.
func (rep *replica) proposeRoot(p rsm.RootPhase, mp blink.Ptr) (rsm.Result, error) {
	return rep.propose(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindRoot, Meganode: mp, Value: rsm.AppendRootBody(nil, p)}))
}

// publishRoot ends the making of root meganode np of rep's region, which
// the region table now names: a root publish record stores it at offset 0
// of the region, and the server searches from it.
func (s *Server) publishRoot(rep *replica, np blink.Ptr) error {
	if _, err := rep.proposeRoot(rsm.RootPublish, np); err != nil {
		return fmt.Errorf("server: publish root meganode %v: %w", np, err)
	}
	s.root.Store(uint64(np))
	return nil
}

// rootRegionWait is how long a starting server waits for the region of
// the root pointer to appear in the region table before it formats a root
// of its own: servers that start together race to format the root, and
// the winner publishes its region only once it serves.
const rootRegionWait = 30 * time.Second

// errRootUnpublished: the root pointer names a region the table does not
// have (yet).
var errRootUnpublished = errors.New("server: the root's region is not in the region table")

// rootNeedsRemaking decides whether root must be replaced by a new root
// meganode formatted here, and why; errRootUnpublished when the root's
// region is not in the table.
func (s *Server) rootNeedsRemaking(ctx context.Context, root blink.Ptr) (bool, string, error) {
	if root.IsNil() {
		return true, "the cluster had no root", nil
	}
	if root.Region() == s.reps.own.regionID {
		if lm := s.reps.own.sm.MeganodeAt(root); lm != nil && lm.Ptr() == root {
			return false, "", nil
		}
		return true, "the root pointed into our region, which holds no meganode there (its contents were discarded)", nil
	}
	e, err := s.opts.Store.Region(ctx, root.Region())
	switch {
	case errors.Is(err, regiontable.ErrNotFound):
		return false, "", errRootUnpublished
	case err != nil:
		return false, "", fmt.Errorf("server: look up the root's region %d: %w", root.Region(), err)
	case e.Host == s.opts.ServerID:
		return true, fmt.Sprintf("the root's region %d was ours and is gone", root.Region()), nil
	}
	s.log.Info("server: the root meganode is on another server", slog.String("root", root.String()), slog.String("host", e.Host))
	return false, "", nil
}
