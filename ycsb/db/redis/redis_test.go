package redis_test

import (
	"testing"

	"github.com/cellstore/cell/ycsb/db/redis"
	"github.com/cellstore/cell/ycsb/internal/storetest"
)

// TestWorkloadsAE loads and runs workloads A and E against redis-server.
func TestWorkloadsAE(t *testing.T) {
	addr := storetest.StartRedis(t)
	props := map[string]string{redis.PropAddr: addr}
	storetest.RunWorkload(t, redis.Name, "workloada", "a", props)
	storetest.RunWorkload(t, redis.Name, "workloade", "e", props)
}
