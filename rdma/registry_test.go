package rdma

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestRegistry: providers are chosen by name from configuration, and a
// server and client made that way work together.
func TestRegistry(t *testing.T) {
	want := []string{ProviderSHM, ProviderTCP}
	if FabricBuilt {
		want = []string{ProviderFabric, ProviderSHM, ProviderTCP}
	}
	if got := Providers(); !slices.Equal(got, want) {
		t.Fatalf("Providers() = %v, want %v", got, want)
	}
	names := []string{"", ProviderTCP, ProviderSHM}
	if FabricBuilt {
		names = append(names, ProviderFabric)
	}
	for _, name := range names {
		srv, err := NewServer(ServerConfig{Provider: name, TCP: TCPOptions{Logger: testLogger(t)}, SHM: SHMOptions{Dir: t.TempDir(), Logger: testLogger(t)},
			Fabric: FabricOptions{Provider: "shm", Logger: testLogger(t)}})
		if err != nil {
			t.Fatalf("NewServer(%q): %v", name, err)
		}
		cl, err := NewClient(ClientConfig{Provider: name, TCP: TCPClientOptions{Logger: testLogger(t)}, Fabric: FabricClientOptions{Provider: "shm", Logger: testLogger(t)}})
		if err != nil {
			t.Fatalf("NewClient(%q): %v", name, err)
		}
		want := name
		if want == "" {
			want = DefaultProvider
		}
		if srv.Provider() != want || cl.Provider() != want {
			t.Fatalf("%q: got providers %q and %q", name, srv.Provider(), cl.Provider())
		}
		region := newFileRegion(t, 2)
		fillPattern(region.Bytes(), 42)
		rk := mustRegister(t, srv, region)
		dst := make([]byte, 256)
		if err := cl.Read(context.Background(), &rk, 1024, dst); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		checkPattern(t, 42, 1024, dst)
		cl.Close()
		srv.Close()
	}
	if _, err := NewServer(ServerConfig{Provider: "verbs"}); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("NewServer(verbs): %v", err)
	}
	if _, err := NewClient(ClientConfig{Provider: "verbs"}); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("NewClient(verbs): %v", err)
	}
}

// TestCapsString: every flag and the limits are named.
func TestCapsString(t *testing.T) {
	for _, c := range []struct {
		caps Caps
		want string
	}{
		{Caps{}, "none max-read=0B max-segments=0"},
		{shmCaps(Limits{MaxReadLen: 2 << 20, MaxSegments: 64}), "ordered-reads,vector-reads,spares-server-cpu,same-host-only,in-order-completion max-read=2MiB max-segments=64"},
		{tcpCaps(Limits{MaxReadLen: 1000, MaxSegments: 1}), "ordered-reads,vector-reads max-read=1000B max-segments=1"},
		{Caps{SparesServerCPU: true, MaxReadLen: 64 << 10}, "spares-server-cpu max-read=64KiB max-segments=0"},
	} {
		if got := c.caps.String(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

// TestRemoteKeyString names the provider, region and location.
func TestRemoteKeyString(t *testing.T) {
	rk := RemoteKey{Provider: ProviderTCP, Key: 0xabc, Region: 7, Len: 8 << 20, Addr: "10.0.0.1:7000"}
	if got, want := rk.String(), "tcp region 7 key 0x0000000000000abc (8MiB at 10.0.0.1:7000)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
