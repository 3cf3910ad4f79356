// Command cellctl is Cell's operator and benchmark CLI, in the manner of
// etcdctl: one root command with global flags for the cluster's etcd
// endpoints (--endpoints, default 127.0.0.1:2379) and the output format
// (-w/--write-out table|json), and one subcommand per task.
//
// Errors print as a single line on stderr, prefixed "cellctl: ", and make
// cellctl exit with status 1; usage is printed only with --help.
//
// # Layout
//
//   - main.go: the root command and its global flags. A new subcommand is
//     one constructor, newXCommand(g *globals) *cobra.Command, in its own
//     file, added in newRootCommand.
//   - output.go: table and JSON output (globals.print) and value
//     formatting shared by subcommands.
//   - sim.go: "cellctl sim table2" and "cellctl sim spike", the locality
//     selector's simulations (locality/sim).
package main
