package cell_test

import (
	"os"
	"testing"

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
}
