package regiontable

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestMemberFabricEndpoints: a member's libfabric endpoints survive its
// entry's JSON and stay comparable.
func TestMemberFabricEndpoints(t *testing.T) {
	eps := []FabricEndpoint{{"tcp;ofi_rxm", "fi_sockaddr_in://10.0.0.1:41234"}, {"shm", "fi_shm://123:0:0"}}
	m := Member{ID: "a", RPCAddr: "h:1", Fabric: FormatFabricEndpoints(eps)}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got Member
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got != m || !slices.Equal(got.FabricEndpoints(), eps) {
		t.Fatalf("round trip: %+v, endpoints %+v", got, got.FabricEndpoints())
	}
	if (&Member{}).FabricEndpoints() != nil {
		t.Fatal("a member without endpoints lists some")
	}
}
