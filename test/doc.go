// Package test holds Cell's multi-process integration tests: they build
// cellserver and cellctl once (go build into a temporary directory), run
// cellserver as a subprocess with its embedded etcd (or joined to an etcd
// of the test) on free loopback ports, and drive it through package
// client, cellctl and raw connections.
//
//   - cluster_test.go: the harness (building, starting, readiness, stop).
//   - multicluster_test.go: clusters of several cellservers joined to an
//     etcd that the test runs in process (regiontable/embedded) and can
//     stop and restart on the same ports and data directory: servers
//     joining a cluster, and an etcd restart survived by servers and
//     clients under load.
//   - linearizability_test.go: concurrent writers and readers in every
//     search mode with both one-sided providers, checked against a model
//     and, per key, for linearizability with porcupine; again with small
//     meganodes that keep splitting during the run.
//   - etcdcluster_test.go: three cellservers that each embed a member of
//     one etcd cluster (--etcd-initial-cluster), surviving SIGKILL of the
//     first.
//   - compose_test.go: the docker-compose cluster of docker-compose.yml
//     (images built offline, up, cellctl in the client container and from
//     the host, a server container killed, down -v); its harness,
//     composeUp, is in composecluster_test.go. Skipped without docker,
//     docker-compose or a reachable engine.
//   - cellctl_test.go: cellctl end to end against the running server.
//   - badinput_test.go: oversized keys and values, malformed and oversized
//     frames, one-sided reads with a wrong key or out of bounds.
//   - quietlogs_test.go: a healthy single server and a healthy start of
//     three replicating servers log nothing at WARN or ERROR.
//
// Everything binds 127.0.0.1 only (compose publishes its ports there), and
// every process a test starts is stopped in its cleanup (SIGTERM, then
// SIGKILL after a timeout); a compose project is taken down with its
// volumes, and one left behind by a killed test process is removed by the
// next composeUp. On a
// linearizability failure the history is saved as porcupine's HTML
// visualization under the test's temporary directory, or under
// $CELL_TEST_ARTIFACTS when set (t.TempDir is removed when the test ends).
//
// fig4.sh (the paper's Fig. 4) and redis.sh (one server core against
// redis-server) run the benchmarks recorded in BENCH_NOTES.md; they are
// scripts, not tests. The commands under test/ (netfloor: the CPU floor of
// a request/reply in Go, with Go's poller and with an event loop of our
// own, run by netfloor.sh; netpollstarve: replies a busy Go client picks
// up late; memload: the paper's workload loaded into Cell, Redis, etcd or
// google/btree, run by memory-compare.sh) are measurements for
// BENCHMARKS.md, not tests.
package test
