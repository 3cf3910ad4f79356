package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellstore/cell/regiontable"
)

func main() {
	os.Exit(runIO(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes cellctl with args and an empty standard input, and returns
// the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runIO(args, strings.NewReader(""), stdout, stderr)
}

// runIO executes cellctl with args and standard input stdin (put KEY
// reads its value there) and returns the process exit status.
func runIO(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetIn(stdin)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "cellctl: %s\n", oneLine(err.Error()))
		return 1
	}
	return 0
}

// globals are the flags every subcommand shares.
type globals struct {
	endpoints   []string
	etcdPrefix  string // --etcd-prefix: the region table's key prefix
	output      outputFormat
	timeout     time.Duration // --command-timeout
	dialTimeout time.Duration // --dial-timeout
	stdout      io.Writer
	stderr      io.Writer
	// --cacert, --cert, --key: TLS to Cell's servers, and the
	// configuration built from them (serverTLS).
	cacert, cert, key string
	tlsOnce           sync.Once
	tls               *tls.Config
	tlsErr            error
}

// newRootCommand builds the command tree. Subcommands are added here, one
// constructor each, and receive the shared globals.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{output: formatSimple, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "cellctl",
		Short: "Operate, inspect and measure a Cell cluster",
		Long: `Operate, inspect and measure a Cell cluster.

Every flag, global or of a command, can be set in the environment as
CELLCTL_ and its name in upper case with underscores: --endpoints is
CELLCTL_ENDPOINTS, -w/--write-out CELLCTL_WRITE_OUT, bench's --in-flight
CELLCTL_IN_FLIGHT. The command line wins; an empty variable counts as
unset. --endpoints also falls back on CELL_ENDPOINTS (the compose
cluster's client container sets it), below CELLCTL_ENDPOINTS.`,
		// Errors are printed once, by run, on one line; usage is printed
		// only on request (--help).
		SilenceErrors: true,
		SilenceUsage:  true,
		// Flags not on the command line come from the environment.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) },
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", defaultEndpoints(), "etcd endpoints of the cluster, comma-separated (env CELLCTL_ENDPOINTS, else CELL_ENDPOINTS)")
	pf.StringVar(&g.etcdPrefix, "etcd-prefix", regiontable.DefaultPrefix, "key prefix of the region table in etcd (cellserver's --etcd-prefix)")
	pf.VarP(&g.output, "write-out", "w", "output format: simple (plain values, aligned tables), table (bordered), json or fields (etcdctl's \"name\" : value lines)")
	pf.DurationVar(&g.timeout, "command-timeout", 15*time.Second, "time limit of a command (bench: of its connection and preload)")
	pf.DurationVar(&g.dialTimeout, "dial-timeout", 5*time.Second, "time limit of connecting to etcd and to a server")
	pf.StringVar(&g.cacert, "cacert", "", "CA file that verifies Cell's servers' certificates: connect to them over TLS (and to etcd at https:// endpoints, as etcdctl)")
	pf.StringVar(&g.cert, "cert", "", "certificate file presented to Cell's servers and an https:// etcd (needs --key); its role (cellctl certs: client, admin) decides what the servers allow")
	pf.StringVar(&g.key, "key", "", "key file of --cert")

	root.AddCommand(
		newPutCommand(g), newGetCommand(g), newDelCommand(g), newRangeCommand(g),
		newStatusCommand(g), newMembersCommand(g), newRegionsCommand(g), newMeganodesCommand(g),
		newCheckCommand(g), newDumpCommand(g), newBenchCommand(g),
		newSimCommand(g), newDrillCommand(g),
		newMoveReplicaCommand(g), newTransferLeaderCommand(g), newDrainCommand(g),
		newVersionCommand(g), newCertsCommand(g), newEtcdRolesCommand(g),
	)
	return root
}

// envName is the environment variable standing for a flag: --dial-timeout
// is CELLCTL_DIAL_TIMEOUT.
func envName(flag string) string {
	return "CELLCTL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag of cmd (its own and those it inherits) that the
// command line left alone from its environment variable, when that is set
// and not empty. A bad value is an error naming the variable.
func applyEnv(cmd *cobra.Command) error {
	fs := cmd.Flags()
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v := os.Getenv(name)
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("$%s=%q (--%s): %w", name, v, f.Name, serr)
		}
	})
	return err
}

// defaultEndpoints is the default of --endpoints: $CELL_ENDPOINTS when set
// (the compose cluster's client container sets it), else 127.0.0.1:2379.
func defaultEndpoints() []string {
	if v := strings.TrimSpace(os.Getenv("CELL_ENDPOINTS")); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"127.0.0.1:2379"}
}

// etcdEndpoints returns the --endpoints list, trimmed, or an error if it is
// empty or has an empty entry.
func (g *globals) etcdEndpoints() ([]string, error) {
	if len(g.endpoints) == 0 {
		return nil, fmt.Errorf("--endpoints: no endpoint given")
	}
	eps := make([]string, len(g.endpoints))
	for i, ep := range g.endpoints {
		if eps[i] = strings.TrimSpace(ep); eps[i] == "" {
			return nil, fmt.Errorf("--endpoints: empty endpoint in %q", strings.Join(g.endpoints, ","))
		}
	}
	return eps, nil
}

// oneLine folds a message onto one line (cobra's suggestions span several).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
