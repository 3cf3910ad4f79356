package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// The regions a server serves: those whose raft group it leads and whose
// region table entry names it as host. Requests are routed to a served
// replica by the region of the pointer they name; every other region is
// redirected (table.go). A served replica is registered for one-sided
// reads and published in the region table with a new epoch (serve).

// servedMeganode returns the meganode of a served region holding the node at
// p, or nil when there is none (another region's, or not a node).
func (s *Server) servedMeganode(p blink.Ptr) *rsm.Meganode {
	if rep := s.reps.servedReplica(p.Region()); rep != nil {
		return rep.sm.MeganodeAt(p)
	}
	return nil
}

// holder returns the served replica whose region holds lm, which a
// write to lm is proposed to: an error redirects the request when this
// server no longer serves the region.
func (s *Server) holder(lm *rsm.Meganode) (*replica, error) {
	id := lm.Ptr().Region()
	if rep := s.reps.servedReplica(id); rep != nil {
		return rep, nil
	}
	return nil, s.redirect(id, "write")
}

// servedMeganodes lists the meganodes of reps.
func servedMeganodes(reps []*replica) []*rsm.Meganode {
	var out []*rsm.Meganode
	for _, rep := range reps {
		for lm := range rep.sm.Meganodes() {
			out = append(out, lm)
		}
	}
	return out
}

// hosting serves the regions whose groups this server leads and whose
// table entries name it (failover.go tells when): it holds each one's
// read lease (lease.go), registers it for one-sided reads, publishes its
// table entry, and stops all of that when the region goes. It reaches
// replicas through the server's registry.
type hosting struct {
	s *Server
	// retired are regions replaced while requests may read them (a
	// served replica restored from a snapshot, regionfiles.go), unmapped
	// at shutdown.
	retired   []*meganode.Region
	retiredMu sync.Mutex
}

// serve makes rep served: it registers the region for one-sided reads,
// publishes its table entry with the next epoch (the group's term and
// replicas with it), and adds it to the served set. REQUIRES: this server
// leads rep's group and has applied everything committed.
func (h *hosting) serve(ctx context.Context, rep *replica) error {
	s := h.s
	if !h.renewLease(rep) {
		return fmt.Errorf("server: region %d: no read lease: %w", rep.regionID, raft.ErrNotLeader)
	}
	if err := h.registerReads(rep); err != nil {
		return err
	}
	if err := h.publishRegion(ctx, rep); err != nil {
		h.deregisterReads(rep)
		return err
	}
	rep.wasServed.Store(true)
	s.reps.setServed(rep, true)
	stop := make(chan struct{})
	s.reps.servedMu.Lock()
	rep.leaseStop = stop
	s.reps.servedMu.Unlock()
	s.goBackground(func() { h.keepLease(rep, stop) })
	return nil
}

// unserve stops serving rep's region: requests for it are redirected from
// now on, one-sided reads of it refused, and its lease no longer renewed.
// It reports whether the region was served.
func (h *hosting) unserve(rep *replica) bool {
	s := h.s
	if s.reps.servedReplica(rep.regionID) != rep {
		return false
	}
	s.reps.setServed(rep, false)
	s.reps.servedMu.Lock()
	if rep.leaseStop != nil {
		close(rep.leaseStop)
		rep.leaseStop = nil
	}
	s.reps.servedMu.Unlock()
	rep.leaseUntil.Store(0)
	h.deregisterReads(rep)
	return true
}

// retire keeps region r, replaced by a snapshot after it was served,
// mapped until the server stops: requests that were reading it finish
// on the old copy.
func (h *hosting) retire(r *meganode.Region) {
	h.retiredMu.Lock()
	defer h.retiredMu.Unlock()
	h.retired = append(h.retired, r)
}

// closeRetired unmaps the retired regions. REQUIRES: no request runs.
func (h *hosting) closeRetired() error {
	h.retiredMu.Lock()
	defer h.retiredMu.Unlock()
	var errs []error
	for _, r := range h.retired {
		errs = append(errs, r.Close())
	}
	h.retired = nil
	return errors.Join(errs...)
}

// openSHM starts the same-host shared-memory provider, when the platform
// has one: regions are registered with it as they are served.
func (h *hosting) openSHM() {
	s := h.s
	shm, err := rdma.NewSHMServer(rdma.SHMOptions{Dir: s.shmTableDir(), Host: s.opts.HostID, FileGroup: s.opts.ShmGroup, Logger: s.log})
	if err != nil {
		s.log.Warn("server: no shared-memory one-sided reads", slog.Any("err", err))
		return
	}
	s.shm = shm
}

// registerReads exposes rep's region to one-sided reads: the tcp
// responder always, shared memory where the platform supports it.
func (h *hosting) registerReads(rep *replica) error {
	s := h.s
	rk, err := s.responder.Register(rep.sm.Region())
	if err != nil {
		return fmt.Errorf("server: register region %d with the tcp responder: %w", rep.regionID, err)
	}
	keys := []rdma.RemoteKey{rk}
	if s.shm != nil {
		if rk, err = s.shm.Register(rep.sm.Region()); err != nil {
			s.log.Warn("server: region not readable over shared memory", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		} else {
			keys = append(keys, rk)
		}
	}
	keys = s.registerFabric(rep, keys)
	rep.readMu.Lock()
	rep.readKeys = keys
	rep.readMu.Unlock()
	h.applyLease(rep, rep.leaseUntil.Load())
	return nil
}

// provider is the one-sided provider that registered rk: the tcp
// responder, the shm server or the fabric server (registerReads makes no
// other).
func (h *hosting) provider(rk rdma.RemoteKey) rdma.Server {
	s := h.s
	switch rk.Provider {
	case rdma.ProviderSHM:
		return s.shm
	case rdma.ProviderFabric:
		return s.fabricOf(rk)
	}
	return s.responder
}

// deregisterReads revokes one-sided access to rep's region.
func (h *hosting) deregisterReads(rep *replica) {
	s := h.s
	rep.readMu.Lock()
	defer rep.readMu.Unlock()
	for _, rk := range rep.readKeys {
		if err := h.provider(rk).Deregister(rk.Key); err != nil {
			s.log.Warn("server: revoke one-sided reads", slog.Uint64("region", uint64(rep.regionID)), slog.String("provider", rk.Provider), slog.Any("err", err))
		}
	}
	rep.readKeys = nil
}

// publishRegion writes rep's entry with the next epoch, naming this server
// as host, with the group's term and replicas. The table refuses it when
// another server published the region with a higher term meanwhile.
func (h *hosting) publishRegion(ctx context.Context, rep *replica) error {
	s := h.s
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
		Size:     rep.sm.Region().Layout().Size,
		Host:     s.opts.ServerID,
		Epoch:    epoch,
		Term:     rep.raft.CurrentTerm(),
		Replicas: voters,
		Learners: learners,
		Path:     rep.sm.Region().Path(),
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
func (h *hosting) regionInfo(rep *replica) wire.RegionInfo {
	s := h.s
	ri := wire.RegionInfo{
		ID: rep.regionID, Epoch: rep.epoch, Size: rep.sm.Region().Layout().Size,
		Host: s.opts.HostID, RPCAddr: s.rpcAddr, ReadAddr: s.responder.Addr(), Path: rep.sm.Region().Path(),
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
	if rep := s.reps.servedReplica(s.reps.own.regionID); rep != nil {
		return rep
	}
	var best *replica
	for _, rep := range s.reps.servedList() {
		if best == nil || len(rep.sm.Region().Meganodes()) < len(best.sm.Region().Meganodes()) {
			best = rep
		}
	}
	return best
}

// readKeyList returns rep's one-sided read registrations.
func (rep *replica) readKeyList() []rdma.RemoteKey {
	rep.readMu.Lock()
	defer rep.readMu.Unlock()
	return slices.Clone(rep.readKeys)
}
