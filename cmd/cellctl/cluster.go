package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// The cluster as members, regions, meganodes and check see it: the region
// table and every live member's Metadata reply, asked in parallel.

// cluster is a snapshot of the region table and of what each live member
// says about itself.
type cluster struct {
	eps     []string // --endpoints, for messages
	table   regiontable.State
	servers []memberMeta // one per live member, in member order
}

// memberMeta is one member and its Metadata reply (with meganodes), or why
// it could not be had.
type memberMeta struct {
	member regiontable.Member
	meta   *wire.MetadataReply
	err    error
}

// loadTable reads the region table at --endpoints.
func (g *globals) loadTable(ctx context.Context) (regiontable.State, []string, error) {
	eps, err := g.etcdEndpoints()
	if err != nil {
		return regiontable.State{}, nil, err
	}
	store, err := g.openTable()
	if err != nil {
		return regiontable.State{}, nil, err
	}
	defer store.Close()
	st, err := loadTable(ctx, store, eps)
	return st, eps, err
}

// collectCluster reads the region table and asks every live member for
// its metadata. Servers that do not answer are recorded with their error;
// a cluster without live members is an error.
func (g *globals) collectCluster(ctx context.Context) (*cluster, error) {
	st, eps, err := g.loadTable(ctx)
	if err != nil {
		return nil, err
	}
	if len(st.Members) == 0 {
		return nil, fmt.Errorf("no live server in the region table at %s", strings.Join(eps, ","))
	}
	cl := &cluster{eps: eps, table: st, servers: make([]memberMeta, len(st.Members))}
	cl.each(func(i int, m regiontable.Member) {
		cl.servers[i] = memberMeta{member: m}
		c, err := g.dialServer(ctx, m.RPCAddr)
		if err != nil {
			cl.servers[i].err = err
			return
		}
		defer c.Close()
		cl.servers[i].meta, cl.servers[i].err = metadata(ctx, c, true)
	})
	return cl, nil
}

// each runs f for every live member in parallel and waits.
func (cl *cluster) each(f func(i int, m regiontable.Member)) {
	var wg sync.WaitGroup
	for i, m := range cl.table.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, m)
		}()
	}
	wg.Wait()
}

// failures lists the servers that did not answer, one line each.
func (cl *cluster) failures() []string {
	var out []string
	for _, s := range cl.servers {
		if s.err != nil {
			out = append(out, s.member.ID+": "+oneLine(s.err.Error()))
		}
	}
	return out
}

// view is the cluster checks' input: the servers that answered.
func (cl *cluster) view() clusterView {
	v := clusterView{Root: cl.table.Root, Members: cl.table.Members, Regions: cl.table.Regions}
	for _, s := range cl.servers {
		if s.meta != nil {
			v.Servers = append(v.Servers, serverView{ID: s.member.ID, Meta: s.meta})
		}
	}
	return v
}

// hosted is a meganode with the server that reported it.
type hosted struct {
	wire.MeganodeStats
	server string
}

// meganodes returns every reported meganode in the tree's order: by level
// from the top down, then by min key (-inf first), then by pointer.
func (cl *cluster) meganodes() []hosted {
	var all []hosted
	for _, s := range cl.servers {
		if s.meta == nil {
			continue
		}
		for _, m := range s.meta.Meganodes {
			all = append(all, hosted{MeganodeStats: m, server: s.member.ID})
		}
	}
	slices.SortFunc(all, func(a, b hosted) int {
		if a.Level != b.Level {
			return int(b.Level) - int(a.Level)
		}
		if c := cmpMin(&a.Range, &b.Range); c != 0 {
			return c
		}
		return cmp.Compare(a.Ptr, b.Ptr)
	})
	return all
}

// levels returns the number of levels of the tree of meganodes: the
// highest level reported + 1 (0 without meganodes).
func levels(ms []hosted) int {
	n := 0
	for _, m := range ms {
		n = max(n, int(m.Level)+1)
	}
	return n
}
