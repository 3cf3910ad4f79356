package server

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// tableView is the server's cached copy of the region table, kept current
// by followTable. It is immutable once published. The server uses it only
// to say where a request should have gone (redirects) and to learn a new
// root pointer; it never serves data from it.
type tableView struct {
	members  map[string]regiontable.Member
	regions  map[uint32]regiontable.Region
	draining map[string]bool // servers marked draining (cellctl drain)
	// missing holds the table's missing marks: how long a server no more
	// a member had been missing, as the coordinator counted, when its
	// mark was written.
	missing map[string]time.Duration
}

// newTableView returns the view of a loaded table.
func newTableView(st regiontable.State) *tableView {
	v := &tableView{members: make(map[string]regiontable.Member), regions: make(map[uint32]regiontable.Region), draining: make(map[string]bool), missing: make(map[string]time.Duration)}
	for _, m := range st.Members {
		v.members[m.ID] = m
	}
	for _, r := range st.Regions {
		v.regions[r.ID] = r
	}
	for _, id := range st.Draining {
		v.draining[id] = true
	}
	maps.Copy(v.missing, st.Missing)
	return v
}

func (v *tableView) with(ev regiontable.Event) *tableView {
	nv := newTableView(regiontable.State{})
	maps.Copy(nv.members, v.members)
	maps.Copy(nv.regions, v.regions)
	maps.Copy(nv.draining, v.draining)
	maps.Copy(nv.missing, v.missing)
	switch ev.Kind {
	case regiontable.MissingSet:
		if ev.Missing {
			nv.missing[ev.Member.ID] = ev.MissingFor
		} else {
			delete(nv.missing, ev.Member.ID)
		}
	case regiontable.DrainSet:
		if ev.Draining {
			nv.draining[ev.Member.ID] = true
		} else {
			delete(nv.draining, ev.Member.ID)
		}
	case regiontable.MemberUp:
		nv.members[ev.Member.ID] = ev.Member
	case regiontable.MemberDown:
		delete(nv.members, ev.Member.ID)
	case regiontable.RegionPut:
		nv.regions[ev.Region.ID] = ev.Region
	case regiontable.RegionDelete:
		delete(nv.regions, ev.Region.ID)
	}
	return nv
}

// followTable loads the region table and follows its changes until the
// server stops, reloading after a failed watch.
func (s *Server) followTable() {
	backoff := 100 * time.Millisecond
	for s.bgCtx.Err() == nil {
		st, err := s.opts.Store.Load(s.bgCtx)
		if err != nil {
			if s.bgCtx.Err() == nil {
				s.log.Warn("server: load the region table", slog.Any("err", err))
			}
		} else {
			v := newTableView(st)
			s.table.Store(v)
			s.coord.gone.note(v, time.Now())
			for _, r := range st.Regions {
				s.keep.noteRegionEntry(r)
			}
			s.learnRoot(st.Root)
			backoff = 100 * time.Millisecond
			for ev := range s.opts.Store.Watch(s.bgCtx, st.Revision) {
				if ev.Err != nil {
					s.log.Warn("server: region table watch ended; reloading", slog.Any("err", ev.Err))
					break
				}
				v := s.table.Load().with(ev)
				s.table.Store(v)
				s.coord.gone.note(v, time.Now())
				switch {
				case ev.Kind == regiontable.RootSet:
					s.learnRoot(ev.Root)
				case ev.Kind == regiontable.RegionPut:
					s.keep.noteRegionEntry(ev.Region)
				}
			}
		}
		select {
		case <-time.After(backoff):
		case <-s.bgCtx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// learnRoot adopts a root pointer published in the table.
func (s *Server) learnRoot(p blink.Ptr) {
	if p.IsNil() || uint64(p) == s.root.Load() {
		return
	}
	old := blink.Ptr(s.root.Swap(uint64(p)))
	s.log.Info("server: root pointer changed", slog.String("root", p.String()), slog.String("old", old.String()))
}

// redirect returns the error for a request about region id, which this
// server does not host: WrongServer naming the host's RPC address when the
// table knows a live host, Unavailable when the host is down, and
// UnknownRegion when the table does not know the region.
func (s *Server) redirect(id uint32, what string) error {
	v := s.table.Load()
	r, ok := v.regions[id]
	if !ok {
		return &wire.StatusError{Status: wire.StatusUnknownRegion, Region: id, Message: fmt.Sprintf("%s: region %d is not in the region table", what, id)}
	}
	m, live := v.members[r.Host]
	if !live {
		return &wire.StatusError{Status: wire.StatusUnavailable, Region: id, Epoch: r.Epoch, Message: fmt.Sprintf("%s: region %d's host %s is down", what, id, r.Host)}
	}
	return &wire.StatusError{Status: wire.StatusWrongServer, Region: id, Epoch: r.Epoch, Leader: m.RPCAddr, Message: fmt.Sprintf("%s: region %d is on %s", what, id, r.Host)}
}

// usableDir reports whether dir is a directory this process can create
// files in.
func usableDir(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir() && unix.Access(dir, unix.W_OK|unix.X_OK) == nil
}
