package etcd_test

import (
	"testing"

	"github.com/cellstore/cell/ycsb/db/etcd"
	"github.com/cellstore/cell/ycsb/internal/storetest"
)

// TestWorkloadsAE loads and runs workloads A and E against a one-member
// etcd.
func TestWorkloadsAE(t *testing.T) {
	endpoint := storetest.StartEtcd(t)
	props := map[string]string{etcd.PropEndpoints: endpoint}
	storetest.RunWorkload(t, etcd.Name, "workloada", "a", props)
	storetest.RunWorkload(t, etcd.Name, "workloade", "e", props)
}
