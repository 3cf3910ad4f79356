package server

import (
	"errors"
	"log/slog"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
)

// Versions (docs/transactions.md §2). A region written before versions
// existed has none: its leaves are legacy, its records apply as they did.
// Its keys get versions from the version record on: the leader of a
// served region proposes it once every server in the region's group
// publishes that its code knows versions (regiontable.FeatureVersions in
// its member entry), so no replica meets a record it cannot apply. The
// record gives every entry written before the legacy version U (its
// index) and every later put a version from the region's clock. A new
// region gets its record within a replicaInterval of its first leader.

// startVersions proposes the version record for rep's region, which this
// server serves and leads, when the region has no versions yet and every
// server of its group knows them. The proposal is settled beside the
// keeper's loop (a group short of its quorum must not hold up the other
// replicas' tending), one at a time. A split in progress makes apply
// refuse it (rsm.ErrVersionMode): a later tick proposes it again.
func (k *keeper) startVersions(rep *replica) {
	s := k.s
	if s.opts.TestingKnobs.NoVersions {
		return
	}
	if versioned, _, _ := rep.sm.Versions(); versioned || !rep.sm.Formatted() {
		return
	}
	if !k.groupKnowsVersions(rep) || !rep.versioning.CompareAndSwap(false, true) {
		return
	}
	f := rep.proposeAsync(rsm.AppendRecord(nil, &rsm.Record{Kind: rsm.KindVersion}))
	go func() {
		defer rep.versioning.Store(false)
		if _, err := rep.settle(f); err != nil && !errors.Is(err, rsm.ErrVersionMode) && s.bgCtx.Err() == nil {
			s.log.Debug("server: proposing the version record", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		}
	}()
}

// groupKnowsVersions reports whether every server of rep's group (voters
// and learners) is a member whose entry lists FeatureVersions.
func (k *keeper) groupKnowsVersions(rep *replica) bool {
	f := rep.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	members := k.s.table.Load().members
	for _, srv := range f.Configuration().Servers {
		if m, ok := members[string(srv.ID)]; !ok || !m.Has(regiontable.FeatureVersions) {
			return false
		}
	}
	return true
}
