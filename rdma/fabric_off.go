//go:build !libfabric || !cgo

package rdma

// FabricBuilt reports whether this build has the fabric provider (build
// with -tags libfabric, cgo and libfabric-dev installed).
const FabricBuilt = false
