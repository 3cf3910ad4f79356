package server

import (
	"fmt"
	"log/slog"

	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
)

// One-sided reads over libfabric (Options.Fabric, cellserver --provider
// fabric): the endpoints open with the other listeners, before the member
// entry is published with their addresses; each served region is
// registered with each of them beside the tcp responder and shm
// (registerReads), and its keys published with the region's entry.
// Leases and revocation go through provider() like the others'.

// libfabricServer is what a fabric rdma.Server tells of its endpoint.
type libfabricServer interface {
	rdma.Server
	LibfabricProvider() string
	Addr() string
}

// openFabric opens an endpoint for each of Options.Fabric. A server asked
// for one that cannot open it does not start.
func (s *Server) openFabric() error {
	for _, o := range s.opts.Fabric {
		if o.Logger == nil {
			o.Logger = s.log
		}
		if o.Host == "" {
			o.Host = s.opts.HostID
		}
		srv, err := rdma.NewServer(rdma.ServerConfig{Provider: rdma.ProviderFabric, Fabric: o})
		if err != nil {
			return fmt.Errorf("server: open the fabric endpoint (%s): %w", o.Provider, err)
		}
		s.fabric = append(s.fabric, srv)
	}
	return nil
}

// fabricEndpoints lists the fabric endpoints for the member entry.
func (s *Server) fabricEndpoints() []regiontable.FabricEndpoint {
	var eps []regiontable.FabricEndpoint
	for _, f := range s.fabric {
		if ep, ok := f.(libfabricServer); ok {
			eps = append(eps, regiontable.FabricEndpoint{Provider: ep.LibfabricProvider(), Addr: ep.Addr()})
		}
	}
	return eps
}

// fabricOf returns the fabric endpoint that registered rk (nil if none).
func (s *Server) fabricOf(rk rdma.RemoteKey) rdma.Server {
	p := rdma.FabricKeyProvider(&rk)
	for _, f := range s.fabric {
		if ep, ok := f.(libfabricServer); ok && ep.LibfabricProvider() == p {
			return f
		}
	}
	return nil
}

// registerFabric registers rep's region with each fabric endpoint and
// returns keys with their RemoteKeys added. A region an endpoint cannot
// register (a memlock limit, say) is read over the other providers and
// server-side.
func (s *Server) registerFabric(rep *replica, keys []rdma.RemoteKey) []rdma.RemoteKey {
	for _, f := range s.fabric {
		rk, err := f.Register(rep.sm.Region())
		if err != nil {
			s.log.Warn("server: region not readable over the fabric", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
			continue
		}
		keys = append(keys, rk)
	}
	return keys
}
