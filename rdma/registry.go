package rdma

import (
	"fmt"
	"slices"
	"strings"
)

// Names of the built-in providers.
const (
	// ProviderTCP is the software provider over TCP: a passive responder
	// copies on the server's behalf.
	ProviderTCP = "tcp"
	// ProviderSHM is the same-host provider: the client maps the region
	// file read-only and copies by itself.
	ProviderSHM = "shm"
)

// DefaultProvider is used when a configuration names none.
const DefaultProvider = ProviderTCP

// ServerConfig selects and configures the server side of a provider (from
// flags or a configuration file).
type ServerConfig struct {
	// Provider is the provider's name. Default DefaultProvider.
	Provider string
	// Addr is the tcp responder's listen address. Default "127.0.0.1:0".
	Addr string
	// TCP configures the tcp responder.
	TCP TCPOptions
	// SHM configures the shm server.
	SHM SHMOptions
	// Fabric configures the fabric server (builds with the libfabric
	// tag).
	Fabric FabricOptions
}

// ClientConfig selects and configures the client side of a provider.
type ClientConfig struct {
	// Provider is the provider's name. Default DefaultProvider.
	Provider string
	// TCP configures the tcp client.
	TCP TCPClientOptions
	// SHM configures the shm client.
	SHM SHMClientOptions
	// Fabric configures the fabric client (builds with the libfabric
	// tag).
	Fabric FabricClientOptions
}

// provider constructs one provider's two sides.
type provider struct {
	newServer func(ServerConfig) (Server, error)
	newClient func(ClientConfig) (Client, error)
}

// providers holds the built-in providers. A provider built only under a
// build tag (libfabric, cgo) adds itself from an init function in its own
// file of this package.
var providers = map[string]provider{
	ProviderTCP: {
		newServer: func(c ServerConfig) (Server, error) {
			addr := c.Addr
			if addr == "" {
				addr = "127.0.0.1:0"
			}
			return Listen(addr, c.TCP)
		},
		newClient: func(c ClientConfig) (Client, error) { return NewTCPClient(c.TCP) },
	},
	ProviderSHM: {
		newServer: func(c ServerConfig) (Server, error) { return NewSHMServer(c.SHM) },
		newClient: func(c ClientConfig) (Client, error) { return NewSHMClient(c.SHM) },
	},
}

// Providers returns the names of the providers built in, sorted.
func Providers() []string {
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func lookupProvider(name string) (provider, error) {
	if name == "" {
		name = DefaultProvider
	}
	p, ok := providers[name]
	if !ok {
		hint := ""
		if name == ProviderFabric {
			hint = "; the fabric provider needs a build with -tags libfabric and libfabric installed"
		}
		return provider{}, fmt.Errorf("rdma: provider %q (have %s%s): %w", name, strings.Join(Providers(), ", "), hint, ErrUnknownProvider)
	}
	return p, nil
}

// NewServer starts the server side of the configured provider.
func NewServer(cfg ServerConfig) (Server, error) {
	p, err := lookupProvider(cfg.Provider)
	if err != nil {
		return nil, err
	}
	return p.newServer(cfg)
}

// NewClient returns the client side of the configured provider.
func NewClient(cfg ClientConfig) (Client, error) {
	p, err := lookupProvider(cfg.Provider)
	if err != nil {
		return nil, err
	}
	return p.newClient(cfg)
}
