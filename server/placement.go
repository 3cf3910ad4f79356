package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cellstore/cell/wire"
)

// Replica placement weighs a server by the bytes its replicas hold in use
// (the nodes in use of each region's meganodes, as the region's leader
// reports them), not by the regions' sizes: a region file takes memory as
// it fills, so a server of three empty regions holds less than one of a
// full one. The coordinator and a leader adding a replica ask every live
// member once (OpMetadata with meganodes; a member reports the regions it
// leads) and keep the answer for useTTL. The question waits at most
// useAskTimeout: the leader asks from its replica loop, which also takes
// over the regions its groups elect it for, so a paused member must not
// hold it for long.

// useTTL is how long the bytes in use of the regions are reused before
// the members are asked again.
const useTTL = 5 * time.Second

// useAskTimeout bounds the OpMetadata calls that ask the members (in
// parallel) for their bytes in use; one that does not answer in time is
// counted by its regions' sizes.
const useAskTimeout = 500 * time.Millisecond

// regionUse caches the bytes in use of each region.
type regionUse struct {
	mu   sync.Mutex
	at   time.Time
	used map[uint32]uint64
}

// regionsInUse returns the bytes in use of the regions the live members
// of v lead, by region ID; a region whose leader did not answer is
// missing (replicaLoad then counts its size).
func (co *coordinator) regionsInUse(v *tableView) map[uint32]uint64 {
	s := co.s
	u := &co.use
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.used != nil && time.Since(u.at) < useTTL {
		return u.used
	}
	used := make(map[uint32]uint64)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range sortedMembers(v) {
		m := v.members[id]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(s.bgCtx, useAskTimeout)
			defer cancel()
			var rep wire.MetadataReply
			if err := s.call(ctx, m.RPCAddr, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true}, &rep); err != nil {
				s.log.Debug("server: placement: a member's bytes in use", slog.String("member", id), slog.Any("err", err))
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, ri := range rep.Regions { // led, perhaps with no meganode yet
				if r, ok := v.regions[ri.ID]; ok && r.Host == id {
					used[ri.ID] += 0
				}
			}
			for _, mn := range rep.Meganodes {
				region := mn.Ptr.Region()
				if r, ok := v.regions[region]; ok && r.Host == id {
					used[region] += uint64(mn.UsedNodes) * uint64(rep.NodeSize)
				}
			}
		}()
	}
	wg.Wait()
	u.used, u.at = used, time.Now()
	return used
}
