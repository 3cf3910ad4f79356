//go:build race

package rdma

const raceEnabled = true
