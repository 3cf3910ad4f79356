package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// The regions a server serves: those whose raft group it leads and whose
// region table entry names it as host. Requests are routed to a served
// replica by the region of the pointer they name; every other region is
// redirected (table.go). A served replica is registered for one-sided
// reads and published in the region table with a new epoch (serve).

// servedSet is the served replicas, sorted by region ID. It is immutable
// once published: the read path loads it without a lock.
type servedSet struct {
	reps []*replica
}

// servedReplica returns the served replica of region id, nil when this
// server does not serve it.
func (s *Server) servedReplica(id uint32) *replica {
	if set := s.served.Load(); set != nil {
		for _, rep := range set.reps {
			if rep.regionID == id {
				return rep
			}
		}
	}
	return nil
}

// servedList returns the served replicas, by region ID.
func (s *Server) servedList() []*replica {
	if set := s.served.Load(); set != nil {
		return set.reps
	}
	return nil
}

// meganodeAt returns the meganode of a served region holding the node at
// p, or nil when there is none (another region's, or not a node).
func (s *Server) meganodeAt(p blink.Ptr) *localMeganode {
	if rep := s.servedReplica(p.Region()); rep != nil {
		return rep.meganodeAt(p)
	}
	return nil
}

// servedMeganodes lists the meganodes of reps.
func servedMeganodes(reps []*replica) []*localMeganode {
	var out []*localMeganode
	for _, rep := range reps {
		for _, lm := range rep.megas.Load().bySlot {
			if lm != nil {
				out = append(out, lm)
			}
		}
	}
	return out
}

// setServed publishes the served set with rep added (add) or removed.
func (s *Server) setServed(rep *replica, add bool) {
	s.servedMu.Lock()
	defer s.servedMu.Unlock()
	var reps []*replica
	if set := s.served.Load(); set != nil {
		reps = slices.Clone(set.reps)
	}
	reps = slices.DeleteFunc(reps, func(r *replica) bool { return r == rep })
	if add {
		reps = append(reps, rep)
		slices.SortFunc(reps, func(a, b *replica) int { return int(a.regionID) - int(b.regionID) })
	}
	s.served.Store(&servedSet{reps: reps})
}

// serve makes rep served: it registers the region for one-sided reads,
// publishes its table entry with the next epoch (the group's term and
// replicas with it), and adds it to the served set. REQUIRES: this server
// leads rep's group and has applied everything committed.
func (s *Server) serve(ctx context.Context, rep *replica) error {
	if !s.renewLease(rep) {
		return fmt.Errorf("server: region %d: no read lease: %w", rep.regionID, raft.ErrNotLeader)
	}
	if err := s.registerReads(rep); err != nil {
		return err
	}
	if err := s.publishRegion(ctx, rep); err != nil {
		s.deregisterReads(rep)
		return err
	}
	rep.wasServed.Store(true)
	s.setServed(rep, true)
	stop := make(chan struct{})
	s.servedMu.Lock()
	rep.leaseStop = stop
	s.servedMu.Unlock()
	s.goBackground(func() { s.keepLease(rep, stop) })
	return nil
}

// unserve stops serving rep's region: requests for it are redirected from
// now on, one-sided reads of it refused, and its lease no longer renewed.
// It reports whether the region was served.
func (s *Server) unserve(rep *replica) bool {
	if s.servedReplica(rep.regionID) != rep {
		return false
	}
	s.setServed(rep, false)
	s.servedMu.Lock()
	if rep.leaseStop != nil {
		close(rep.leaseStop)
		rep.leaseStop = nil
	}
	s.servedMu.Unlock()
	rep.leaseUntil.Store(0)
	s.deregisterReads(rep)
	return true
}

// retire keeps region r, replaced by a snapshot after it was served,
// mapped until the server stops: requests that were reading it finish
// on the old copy.
func (s *Server) retire(r *meganode.Region) {
	s.retiredMu.Lock()
	defer s.retiredMu.Unlock()
	s.retired = append(s.retired, r)
}

// closeRetired unmaps the retired regions. REQUIRES: no request runs.
func (s *Server) closeRetired() error {
	s.retiredMu.Lock()
	defer s.retiredMu.Unlock()
	var errs []error
	for _, r := range s.retired {
		errs = append(errs, r.Close())
	}
	s.retired = nil
	return errors.Join(errs...)
}

// openSHM starts the same-host shared-memory provider, when the platform
// has one: regions are registered with it as they are served.
func (s *Server) openSHM() {
	shm, err := rdma.NewSHMServer(rdma.SHMOptions{Dir: s.shmTableDir(), Host: s.opts.HostID, FileGroup: s.opts.ShmGroup, Logger: s.log})
	if err != nil {
		s.log.Warn("server: no shared-memory one-sided reads", slog.Any("err", err))
		return
	}
	s.shm = shm
}

// registerReads exposes rep's region to one-sided reads: the tcp
// responder always, shared memory where the platform supports it.
func (s *Server) registerReads(rep *replica) error {
	rk, err := s.responder.Register(rep.region)
	if err != nil {
		return fmt.Errorf("server: register region %d with the tcp responder: %w", rep.regionID, err)
	}
	keys := []rdma.RemoteKey{rk}
	if s.shm != nil {
		if rk, err = s.shm.Register(rep.region); err != nil {
			s.log.Warn("server: region not readable over shared memory", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		} else {
			keys = append(keys, rk)
		}
	}
	keys = s.registerFabric(rep, keys)
	rep.readMu.Lock()
	rep.readKeys = keys
	rep.readMu.Unlock()
	s.applyLease(rep, rep.leaseUntil.Load())
	return nil
}

// provider is the one-sided provider that registered rk: the tcp
// responder, the shm server or the fabric server (registerReads makes no
// other).
func (s *Server) provider(rk rdma.RemoteKey) rdma.Server {
	switch rk.Provider {
	case rdma.ProviderSHM:
		return s.shm
	case rdma.ProviderFabric:
		return s.fabricOf(rk)
	}
	return s.responder
}

// deregisterReads revokes one-sided access to rep's region.
func (s *Server) deregisterReads(rep *replica) {
	rep.readMu.Lock()
	defer rep.readMu.Unlock()
	for _, rk := range rep.readKeys {
		if err := s.provider(rk).Deregister(rk.Key); err != nil {
			s.log.Warn("server: revoke one-sided reads", slog.Uint64("region", uint64(rep.regionID)), slog.String("provider", rk.Provider), slog.Any("err", err))
		}
	}
	rep.readKeys = nil
}

// publishRegion writes rep's entry with the next epoch, naming this server
// as host, with the group's term and replicas. The table refuses it when
// another server published the region with a higher term meanwhile.
func (s *Server) publishRegion(ctx context.Context, rep *replica) error {
	id := rep.regionID
	epoch := uint64(1)
	e, err := s.opts.Store.Region(ctx, id)
	switch {
	case err == nil:
		epoch = e.Epoch + 1
	case errors.Is(err, regiontable.ErrNotFound):
	default:
		return fmt.Errorf("server: look up region %d: %w", id, err)
	}
	f := rep.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("server: region %d's configuration: %w", id, err)
	}
	voters, learners := replicaIDs(f.Configuration())
	slices.Sort(voters)
	slices.Sort(learners)
	entry := regiontable.Region{
		ID:       id,
		Kind:     regiontable.KindData,
		Size:     rep.region.Layout().Size,
		Host:     s.opts.ServerID,
		Epoch:    epoch,
		Term:     rep.raft.CurrentTerm(),
		Replicas: voters,
		Learners: learners,
		Path:     rep.region.Path(),
	}
	for _, rk := range rep.readKeyList() {
		b, err := json.Marshal(&rk)
		if err != nil {
			return fmt.Errorf("server: encode remote key: %w", err)
		}
		entry.ReadKey = append(entry.ReadKey, b)
	}
	if err := s.opts.Store.PutRegion(ctx, entry); err != nil {
		return fmt.Errorf("server: publish region %d: %w", id, err)
	}
	rep.epoch = epoch
	rep.shown.epoch.Store(epoch)
	return nil
}

// regionInfo describes served replica rep for OpMetadata.
func (s *Server) regionInfo(rep *replica) wire.RegionInfo {
	ri := wire.RegionInfo{
		ID: rep.regionID, Epoch: rep.epoch, Size: rep.region.Layout().Size,
		Host: s.opts.HostID, RPCAddr: s.rpcAddr, ReadAddr: s.responder.Addr(), Path: rep.region.Path(),
		Raft: rep.raftInfo(),
	}
	for _, rk := range rep.readKeyList() {
		if rk.Provider == "tcp" {
			ri.RemoteKey = uint64(rk.Key)
		}
	}
	return ri
}

// checkEpoch compares a request's epoch (0: unchecked) with the region's:
// any other epoch is StaleEpoch carrying ours, and the client reloads the
// region table (an epoch newer than ours means the table already moved on
// from this incarnation).
func (rep *replica) checkEpoch(epoch uint64) error {
	if epoch == 0 || epoch == rep.epoch {
		return nil
	}
	return &wire.StatusError{Status: wire.StatusStaleEpoch, Region: rep.regionID, Epoch: rep.epoch}
}

// targetReplica is the served replica a remote split puts its new
// meganode in: the server's own region when it serves it, else the
// served region with the fewest meganodes; nil when it serves none.
func (s *Server) targetReplica() *replica {
	if rep := s.servedReplica(s.regionID); rep != nil {
		return rep
	}
	var best *replica
	for _, rep := range s.servedList() {
		if best == nil || len(rep.region.Meganodes()) < len(best.region.Meganodes()) {
			best = rep
		}
	}
	return best
}

// anyReplica returns this server's replica of region id, served or not:
// its own region's, or a follower's; nil if it holds none.
func (s *Server) anyReplica(id uint32) *replica {
	if rep := s.servedReplica(id); rep != nil {
		return rep
	}
	if id == s.regionID {
		return s.replica
	}
	return s.follower(id)
}

// readKeyList returns rep's one-sided read registrations.
func (rep *replica) readKeyList() []rdma.RemoteKey {
	rep.readMu.Lock()
	defer rep.readMu.Unlock()
	return slices.Clone(rep.readKeys)
}
