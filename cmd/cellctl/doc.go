// Command cellctl is Cell's operator and benchmark CLI, in the manner of
// etcdctl: one root command with global flags for the cluster's etcd
// endpoints (--endpoints, default 127.0.0.1:2379) and the region table's
// prefix there (--etcd-prefix, default /cell), the output format
// (-w/--write-out), time limits (--command-timeout, --dial-timeout) and
// TLS to Cell's servers (--cacert, --cert, --key, as etcdctl's; not to
// etcd; docs/tls.md), and one subcommand per task.
//
// Output formats, as etcdctl's: simple (the default: a value, OK, or
// tables with aligned columns), table (the same tables with borders;
// dumps stay text), json (indented, snake_case field names only) and
// fields (one "name" : value line per JSON leaf, nested names joined with
// dots: "servers[0].id" : "s1"). Every command accepts all four.
//
// Every flag, global or a command's, can come from the environment:
// CELLCTL_ and the flag's name in upper case with underscores
// (CELLCTL_ENDPOINTS, CELLCTL_WRITE_OUT, CELLCTL_IN_FLIGHT). The command
// line wins; an empty variable counts as unset; a bad value is an error
// naming the variable. --endpoints falls back on CELL_ENDPOINTS (the
// compose cluster's client container sets it) after CELLCTL_ENDPOINTS.
//
// Nothing listening at every --endpoints (no server started) is said at
// once ("etcd at 127.0.0.1:2379: connection refused: is a cellserver
// running?"), not after --dial-timeout.
//
// Errors print as a single line on stderr, prefixed "cellctl: ", and make
// cellctl exit with status 1 ("key not found" included; with -w json a
// missing key also prints {"error": "key not found", "code": "not_found",
// "key": ...} on stdout); usage is printed only with --help.
//
// # Commands
//
//	put KEY [VALUE|-]         store a value; without VALUE or with -, read from stdin
//	                          (on a terminal it says so; --hex: hexadecimal arguments)
//	get KEY                   print a value, byte for byte (--hex, --print-value-only)
//	del KEY                   delete a key
//	range START [END]         list pairs (--limit, --prefix, --reverse, --keys-only,
//	                          --print-value-only, --hex); START after END is an error
//	status                    the root and levels; every server's region, meganodes, fill,
//	                          height, selector hints (--metrics host:port,...: operation counters too)
//	members                   the live servers of the region table (--wait N: until there
//	                          are exactly N, servers started or a dead one's lease lapsed)
//	regions                   the region table's regions, whether their hosts are live, and
//	                          each replica's raft state (LAG ? until it heard its leader)
//	meganodes                 the tree of meganodes: range, level, height, fill, host, right link
//	check                     every server's invariants (OpCheck) and the links between
//	                          meganodes across servers, every region's replicas byte-identical;
//	                          exit 1 on any violation (--wait: until restarted replicas caught up)
//	dump node PTR|root        one node, decoded (--hex: annotated hex dump)
//	dump meganode PTR|root    a meganode's header and every node, level by level
//	bench                     closed-loop throughput and latency: mean, p50, p99, p99.9, max
//	                          (see cellctl bench --help);
//	                          exit 1 when operations or preload writes failed
//	sim table2|spike          the locality selector's simulations
//	drill                     a recorded load, faults, and the durability and
//	                          linearizability checks (see cellctl drill --help)
//	move-replica, transfer-leader, drain
//	                          move a region's replica, its leadership, a server's replicas
//	version                   cellctl's version and VCS revision (internal/buildinfo)
//	certs --dir D             a development CA and server, admin, client and etcd root
//	                          certificates (--hosts, --valid-for); never overwrites a CA
//	etcd-roles                etcd's roles and users for Cell's certificates, then etcd's
//	                          auth on (--user CN=role; root only once auth is on)
//
// Data commands go through package client (the region table in etcd at
// --endpoints finds the servers); members and regions read the region
// table; status, meganodes, check and dump read it and talk to the servers
// with wire's Metadata, Check and NodeDump calls.
//
// # Layout
//
//   - main.go: the root command, its global flags and the CELLCTL_
//     environment. version.go: cellctl version. A new subcommand is
//     one constructor, newXCommand(g *globals) *cobra.Command, in its own
//     file, added in newRootCommand.
//   - conn.go: connecting (client, region table, servers) and the parsing
//     and printing of keys, values and pointers shared by subcommands.
//   - output.go: the -w formats (globals.print, printLine; bordered
//     tables, fields) and value formatting; progress.go: the progress
//     bar.
//   - refused.go: an etcd endpoint that refuses connections, said at once.
//   - put.go, get.go, del.go, range.go, status.go (+ scrape.go, the
//     metrics it reads), dump.go: one command each; members.go (members
//     and regions), meganodes.go, check.go (+ clustercheck.go, the
//     cluster checks as a pure function, its rules written there);
//     cluster.go: the region table and every server's metadata, collected
//     in parallel, shared by meganodes and check.
//   - bench.go (flags, result, table), benchrun.go (the runner),
//     benchtarget.go (what is measured: Cell, or with --target etcd an
//     etcd cluster's KV API, for side-by-side runs), benchwindow.go (--interval and --phases: figures of parts of the
//     measured time), keygen.go (key choice: uniform, YCSB's scrambled
//     zipfian), ycsb.go (YCSB D, E and F: inserts, latest keys, scans,
//     read-modify-writes), histogram.go (latency percentiles), cpu_linux.go (CPU
//     time of this process and of --server-pid).
//   - sim.go: "cellctl sim table2" and "cellctl sim spike", the locality
//     selector's simulations (locality/sim).
package main
