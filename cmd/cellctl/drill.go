package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/drill"
)

// drillParams are the flags of cellctl drill.
type drillParams struct {
	mix, distribution         string
	pick                      string
	fault                     string
	faultCmd, healCmd         string
	composeProject            string
	composeServices           []string
	composeNetworks           []string
	local, replicas           int
	cellserver, serverFlags   string
	keepLocal                 bool
	healAt                    time.Duration
	artifacts, history        string
	noClusterCheck, quiet     bool
	workload                  drill.Workload
	schedule                  drill.Schedule
	recoveryTimeout, checkTmo time.Duration
}

func newDrillCommand(g *globals) *cobra.Command {
	var p drillParams
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Run a workload through faults, then check that nothing was lost and the history is linearizable",
		Long: `Run a fault drill (docs/drill.md).

A YCSB-style workload (--workload, --keys, --clients, --rate) runs while
faults strike a server on a schedule: the first at --fault-at, healed
--fault-duration later (or at --heal-at), --faults of them one every
--fault-every; the load goes on for --after past the last heal. Every
operation is recorded with its invoke and return times and its outcome
(ok, failed, or unknown: a write whose outcome the client does not know).

Faults: --fault kill, pause, partition or restart, on the cellservers the
drill started itself (--local N) or on docker compose services
(--compose-project, --compose-services); or the user's own commands
(--fault-cmd, --heal-cmd, with {server} replaced by the server's name).
--target picks the server: leader (the host of the region holding the
most drill keys), random, or a server's name.

After the last heal the drill waits until every key reads, then checks:
every key holds a value the history allows (no acknowledged write lost),
porcupine finds each key's history linearizable (unknown writes may have
happened; a check that times out fails), and cellctl check passes.

Prints ops and errors per second before, during and after the faults,
each fault's unavailability window (per region, p50/p99/max over the
faults), latency p50/p99, lost writes and the linearizability verdict
(-w json for all of it, with the per-second timeline). Exits with status 1
if anything was lost, the history is not linearizable, or the cluster
check failed; porcupine's visualisation of an offending key is written to
--artifacts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p.schedule.NoFault = p.schedule.Count == 0 && cmd.Flags().Changed("faults")
			if cmd.Flags().Changed("heal-at") {
				if cmd.Flags().Changed("fault-duration") {
					return fmt.Errorf("--heal-at and --fault-duration: give one")
				}
				if p.healAt <= p.schedule.At {
					return fmt.Errorf("--heal-at %v: want after --fault-at %v", p.healAt, p.schedule.At)
				}
				p.schedule.Duration = p.healAt - p.schedule.At
			}
			return runDrill(g, &p)
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.mix, "workload", "ycsb-a", "operation mix: ycsb-a, ycsb-b, ycsb-c, write, or get=N,put=N,delete=N (percent)")
	f.IntVar(&p.workload.Keys, "keys", 1000, "number of keys (each preloaded once)")
	f.IntVar(&p.workload.Clients, "clients", 8, "concurrent clients")
	f.StringVar(&p.distribution, "distribution", distUniform, "key choice: uniform, or zipfian (YCSB's scrambled zipfian)")
	f.Float64Var(&p.workload.Rate, "rate", 0, "operations per second of all clients together (0: as fast as they go)")
	f.StringVar(&p.workload.KeyPrefix, "key-prefix", "drill/", "prefix of the drill's keys")
	f.DurationVar(&p.workload.OpTimeout, "op-timeout", 5*time.Second, "time limit of each operation")
	f.Uint64Var(&p.workload.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the clients' and --target random's choices")

	f.StringVar(&p.fault, "fault", "kill", "fault: kill, pause, partition or restart (with --fault-cmd: the commands')")
	f.StringVar(&p.pick, "target", "leader", "server to strike: leader, random, or a server's (service's) name")
	f.StringVar(&p.faultCmd, "fault-cmd", "", "shell command that strikes a fault ({server}, $1, $DRILL_SERVER: the server)")
	f.StringVar(&p.healCmd, "heal-cmd", "", "shell command that heals the fault --fault-cmd struck")
	f.StringVar(&p.composeProject, "compose-project", "", "docker compose project whose services are struck")
	f.StringSliceVar(&p.composeServices, "compose-services", nil, "compose services that may be struck, comma-separated")
	f.StringSliceVar(&p.composeNetworks, "compose-network", nil, "networks a partition disconnects (default: all of the container's)")
	f.IntVar(&p.local, "local", 0, "start this many cellservers (and an etcd) on loopback for the drill, and strike them")
	f.IntVar(&p.replicas, "replicas", 3, "with --local: the servers' --replicas")
	f.StringVar(&p.cellserver, "cellserver", "", "with --local: the cellserver binary (default: next to cellctl, else on PATH)")
	f.StringVar(&p.serverFlags, "server-flags", "--hugepages=off --cores=1 --raft-heartbeat-timeout=300ms", "with --local: more flags for every cellserver")
	f.BoolVar(&p.keepLocal, "keep", false, "with --local: keep the servers' data directories and logs")

	f.DurationVar(&p.schedule.At, "fault-at", 5*time.Second, "time of the first fault, from the start of the load")
	f.DurationVar(&p.healAt, "heal-at", 0, "time of the first heal (instead of --fault-duration)")
	f.DurationVar(&p.schedule.Duration, "fault-duration", 5*time.Second, "time from each fault to its heal")
	f.IntVar(&p.schedule.Count, "faults", 1, "number of faults (0: a baseline run without faults)")
	f.DurationVar(&p.schedule.Every, "fault-every", 0, "time from one fault to the next (default: --fault-duration + 10s)")
	f.DurationVar(&p.schedule.Tail, "after", 10*time.Second, "load after the last heal")
	f.DurationVar(&p.recoveryTimeout, "recovery-timeout", 60*time.Second, "time after the load for every key to read again")
	f.DurationVar(&p.checkTmo, "check-timeout", 60*time.Second, "time limit of the linearizability check")
	f.StringVar(&p.artifacts, "artifacts", ".", "directory for porcupine's visualisation of an offending key")
	f.StringVar(&p.history, "history", "", "write every recorded operation to this file (JSON)")
	f.BoolVar(&p.noClusterCheck, "no-cluster-check", false, "skip cellctl check after the drill")
	f.BoolVar(&p.quiet, "quiet", false, "do not log the drill's progress on stderr")
	return cmd
}

// runDrill sets up the target, runs the drill and prints its report.
func runDrill(g *globals, p *drillParams) (err error) {
	kind, err := p.prepare()
	if err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if !p.quiet {
		logger = slog.New(slog.NewTextHandler(g.stderr, nil))
	}

	// A drill is stopped by SIGINT or SIGTERM, not by --command-timeout:
	// the fault in place is healed and local servers stopped.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	o := drill.Options{
		Workload: p.workload, Schedule: p.schedule, Fault: kind, Pick: drill.Pick(p.pick),
		RecoveryTimeout: p.recoveryTimeout, CheckTimeout: p.checkTmo, ArtifactDir: p.artifacts, Logger: logger,
		Locator: &clusterLocator{g: g},
	}
	target, local, err := drillTarget(ctx, g, p, logger)
	if err != nil {
		return err
	}
	if local != nil {
		defer func() { err = errors.Join(err, local.close()) }()
	}
	o.Target = target
	if !p.noClusterCheck {
		o.ClusterCheck = drillClusterCheck(g, local)
	}

	cctx, cancel := context.WithTimeout(ctx, max(g.timeout, 30*time.Second))
	c, err := g.openClient(cctx, nil)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := drill.Run(ctx, c, o)
	return reportDrill(g, p, r, err)
}

// prepare completes the workload and the schedule from the flags,
// validates them and the choice of target, and returns the fault kind.
func (p *drillParams) prepare() (drill.FaultKind, error) {
	mix, err := drill.ParseMix(p.mix)
	if err != nil {
		return 0, fmt.Errorf("--workload: %w", err)
	}
	p.workload.Mix = mix
	if p.workload.Keys > 0 {
		kc, err := newKeyChooser(p.distribution, p.workload.Keys)
		if err != nil {
			return 0, err
		}
		p.workload.Choose, p.workload.Distribution = drillChooser{kc}, strings.ToLower(p.distribution)
	}
	p.workload.EnsureDefaults()
	p.schedule.EnsureDefaults()
	if err := errors.Join(p.workload.Validate(), p.schedule.Validate()); err != nil {
		return 0, err
	}
	kind, err := drill.ParseFaultKind(p.fault)
	if err != nil {
		return 0, fmt.Errorf("--fault: %w", err)
	}
	if p.faultCmd != "" {
		kind = drill.Command
	}
	targets := 0
	for _, on := range []bool{p.local > 0, p.faultCmd != "", p.composeProject != ""} {
		if on {
			targets++
		}
	}
	switch {
	case targets > 1:
		return 0, fmt.Errorf("--local, --fault-cmd and --compose-project: give one")
	case p.local > 0 && kind == drill.Partition:
		return 0, fmt.Errorf("--fault partition: --local servers cannot be partitioned (use --compose-project, or --fault-cmd with iptables)")
	case targets == 0 && p.schedule.Count != 0:
		return 0, fmt.Errorf("no target to strike: give --local N, --fault-cmd, or --compose-project (or --faults 0)")
	}
	return kind, nil
}

// drillTarget is what the drill strikes: local servers it starts (also
// returned, for the caller to stop), a fault command, compose services,
// or nothing (--faults 0).
func drillTarget(ctx context.Context, g *globals, p *drillParams, logger *slog.Logger) (drill.Target, *localCluster, error) {
	switch {
	case p.local > 0:
		local, err := startLocal(ctx, g, p, logger)
		if err != nil {
			return nil, nil, err
		}
		return local.servers, local, nil
	case p.faultCmd != "":
		return &drill.CommandTarget{FaultCmd: p.faultCmd, HealCmd: p.healCmd}, nil, nil
	case p.composeProject != "":
		ct, err := drill.NewComposeTarget(ctx, drill.ComposeOptions{Project: p.composeProject, Services: p.composeServices, Networks: p.composeNetworks})
		if err != nil {
			return nil, nil, err
		}
		return ct, nil, nil
	}
	return nil, nil, nil
}

// drillClusterCheck is the drill's cellctl check, run once the local
// servers (if any) serve again.
func drillClusterCheck(g *globals, local *localCluster) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		ctx, cancel := context.WithTimeout(ctx, max(g.timeout, time.Minute))
		defer cancel()
		if local != nil {
			if err := local.servers.WaitServing(ctx); err != nil {
				return nil, err
			}
		}
		res, err := runCheck(ctx, g, 100, 3)
		return res.Violations, err
	}
}

// reportDrill writes the history (--history) and prints report r of a
// drill that ended with err; it fails unless the drill passed.
func reportDrill(g *globals, p *drillParams, r *drill.Report, err error) error {
	if r == nil {
		return err
	}
	if p.history != "" {
		if herr := writeHistory(p.history, r); herr != nil {
			return herr
		}
	}
	if perr := g.print(r, func() []*table { return drillTables(r) }); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	if !r.OK() {
		return errors.New(drillFailure(r))
	}
	return nil
}

// drillFailure says in one line why a drill failed.
func drillFailure(r *drill.Report) string {
	var why []string
	if n := len(r.Lost); n > 0 {
		why = append(why, fmt.Sprintf("%d keys lost a write", n))
	}
	if !r.Linearizability.OK() {
		why = append(why, "history "+string(r.Linearizability.Verdict))
	}
	if n := len(r.ClusterCheck); n > 0 {
		why = append(why, fmt.Sprintf("%d cluster check violations", n))
	}
	why = append(why, r.Errors...)
	return "drill failed: " + strings.Join(why, "; ")
}

// drillChooser is cellctl bench's key choice (--distribution) as a
// drill.Chooser.
type drillChooser struct{ keyChooser }

func (c drillChooser) Next(rng *rand.Rand) int { return c.next(rng) }
