//go:build libfabric && cgo

package rdma

func init() {
	providers[ProviderFabric] = provider{
		newServer: func(c ServerConfig) (Server, error) { return NewFabricServer(c.Fabric) },
		newClient: func(c ClientConfig) (Client, error) { return NewFabricClient(c.Fabric) },
	}
}

// FabricBuilt reports whether this build has the fabric provider.
const FabricBuilt = true
