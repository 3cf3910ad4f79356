package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
)

// addFabricFlags adds the flags of one-sided reads over libfabric
// (--provider fabric).
func addFabricFlags(fs *pflag.FlagSet, provider, addr *string) {
	fs.StringVar(provider, "fabric-provider", "tcp", "--provider fabric: the servers' libfabric provider: verbs, efa, cxi, tcp (tcp;ofi_rxm), shm, or a libfabric provider name")
	fs.StringVar(addr, "fabric-addr", "", "--provider fabric: address this client's libfabric endpoint binds to (an IP address the servers can reach; tcp: 127.0.0.1 for a cluster on this host); default: the provider's choice")
}

// checkFabricFlags checks --provider fabric's flags: this cellctl must
// have the provider.
func checkFabricFlags(provider string) error {
	if !rdma.FabricBuilt {
		return fmt.Errorf("--provider fabric: this cellctl was built without libfabric (build with -tags libfabric, libfabric-dev installed)")
	}
	o := rdma.FabricClientOptions{Provider: provider}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return fmt.Errorf("--fabric-provider %q: %w", provider, err)
	}
	return nil
}

// fabricEndpoint is a member's libfabric endpoint in status and members.
type fabricEndpoint struct {
	Provider string `json:"provider"`
	Addr     string `json:"addr"`
}

// fabricEndpoints lists member m's libfabric endpoints.
func fabricEndpoints(m regiontable.Member) []fabricEndpoint {
	var out []fabricEndpoint
	for _, e := range m.FabricEndpoints() {
		out = append(out, fabricEndpoint{Provider: e.Provider, Addr: e.Addr})
	}
	return out
}

// fabricNotes are status's lines naming each server's libfabric
// endpoints.
func fabricNotes(servers []serverStatus) []string {
	var notes []string
	for _, s := range servers {
		for _, e := range s.Fabric {
			notes = append(notes, fmt.Sprintf("FABRIC: %s reads over %s at %s", s.ID, e.Provider, e.Addr))
		}
	}
	return notes
}
