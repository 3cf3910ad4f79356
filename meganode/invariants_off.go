//go:build !invariants

package meganode

// invariants is true in builds with the invariants tag: broken invariants
// that production code reports and survives panic instead.
const invariants = false
