package server

import (
	"fmt"
	"log/slog"

	"github.com/cellstore/cell/rdma"
)

// One-sided reads over libfabric (Options.Fabric, cellserver --provider
// fabric): the endpoint opens with the other listeners, before the member
// entry is published with its address; each served region is registered
// with it beside the tcp responder and shm (registerReads), and its key
// published with the region's entry. Leases and revocation go through
// provider() like the others'.

// openFabric opens the fabric endpoint when Options.Fabric names a
// provider. A server asked for one that cannot open it does not start.
func (s *Server) openFabric() error {
	if s.opts.Fabric.Provider == "" {
		return nil
	}
	o := s.opts.Fabric
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
	s.fabric = srv
	return nil
}

// fabricEndpoint names the fabric endpoint for the member entry: the
// libfabric provider and the address; empty without one.
func (s *Server) fabricEndpoint() (provider, addr string) {
	ep, ok := s.fabric.(interface {
		LibfabricProvider() string
		Addr() string
	})
	if !ok {
		return "", ""
	}
	return ep.LibfabricProvider(), ep.Addr()
}

// registerFabric registers rep's region with the fabric endpoint, if any,
// and returns keys with its RemoteKey added. A region the endpoint cannot
// register (a memlock limit, say) is read over the other providers and
// server-side.
func (s *Server) registerFabric(rep *replica, keys []rdma.RemoteKey) []rdma.RemoteKey {
	if s.fabric == nil {
		return keys
	}
	rk, err := s.fabric.Register(rep.region)
	if err != nil {
		s.log.Warn("server: region not readable over the fabric", slog.Uint64("region", uint64(rep.regionID)), slog.Any("err", err))
		return keys
	}
	return append(keys, rk)
}
