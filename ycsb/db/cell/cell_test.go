package cell_test

import (
	"os"
	"strings"
	"testing"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/cellstore/cell/ycsb/db/cell"
	"github.com/cellstore/cell/ycsb/internal/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	storetest.Cleanup()
	os.Exit(code)
}

// TestWorkloadsAE loads and runs workloads A and E against one
// cellserver, server-side and client-side over tcp.
func TestWorkloadsAE(t *testing.T) {
	etcd := storetest.StartCell(t)
	for _, mode := range []string{"server", "client"} {
		t.Run(mode, func(t *testing.T) {
			props := map[string]string{cell.PropEndpoints: etcd, cell.PropMode: mode, cell.PropProvider: "tcp"}
			storetest.RunWorkload(t, cell.Name, "workloada", "a"+mode, props)
			storetest.RunWorkload(t, cell.Name, "workloade", "e"+mode, props)
		})
	}
	// Adaptive over shm, client-side work bounded to one slot while a
	// call waits (client.Config.CPUSlots).
	t.Run("adaptive-shm-cpuslots", func(t *testing.T) {
		props := map[string]string{cell.PropEndpoints: etcd, cell.PropMode: "adaptive", cell.PropProvider: "shm", cell.PropCPUSlots: "1"}
		storetest.RunWorkload(t, cell.Name, "workloade", "eslots", props)
	})
}

// TestBadCPUSlots: a cell.cpuslots that is not a count is refused before
// connecting, naming the property.
func TestBadCPUSlots(t *testing.T) {
	for _, v := range []string{"-1", "two"} {
		p := properties.NewProperties()
		p.Set(cell.PropEndpoints, "127.0.0.1:1")
		p.Set(cell.PropCPUSlots, v)
		_, err := ycsb.GetDBCreator(cell.Name).Create(p)
		if err == nil || !strings.Contains(err.Error(), cell.PropCPUSlots) {
			t.Errorf("cell.cpuslots=%s: %v, want an error naming the property", v, err)
		}
	}
}
