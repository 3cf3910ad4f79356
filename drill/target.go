package drill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Target strikes faults. Run calls it from one goroutine: Fault, then
// Heal, then the next Fault; never two faults at once.
type Target interface {
	// Servers lists the names of the servers the target can strike; nil
	// means any name (CommandTarget passes it on to the user's command).
	Servers() []string
	// Fault strikes server with kind and returns once the fault is in
	// place. An error wrapping ErrFault means it may not be.
	Fault(ctx context.Context, kind FaultKind, server string) error
	// Heal undoes the fault struck last and returns once the server runs
	// again (started, resumed or reconnected), not necessarily serving:
	// Run waits for recovery itself. Heal without a fault does nothing.
	Heal(ctx context.Context) error
}

// Runner runs a command and returns its combined output. Targets run
// every command through one, so that tests can record the command lines
// instead.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs the command as a child process.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// CommandTarget strikes with the user's shell commands: FaultCmd at each
// fault, HealCmd at each heal, each run with sh -c. In both, "{server}" is
// replaced with the server's name, which is also $1 and $DRILL_SERVER; the
// fault kind is not theirs to choose (FaultKind Command).
type CommandTarget struct {
	FaultCmd, HealCmd string
	// Run runs the commands. Default ExecRunner.
	Run Runner

	struck string // the server of the fault in place, or ""
}

// Servers returns nil: the commands take any name.
func (t *CommandTarget) Servers() []string { return nil }

// Fault runs FaultCmd for server.
func (t *CommandTarget) Fault(ctx context.Context, _ FaultKind, server string) error {
	if err := t.sh(ctx, t.FaultCmd, server); err != nil {
		return fmt.Errorf("%w: %w", ErrFault, err)
	}
	t.struck = server
	return nil
}

// Heal runs HealCmd for the server of the last fault.
func (t *CommandTarget) Heal(ctx context.Context) error {
	if t.struck == "" {
		return nil
	}
	server := t.struck
	t.struck = ""
	if err := t.sh(ctx, t.HealCmd, server); err != nil {
		return fmt.Errorf("%w: heal: %w", ErrFault, err)
	}
	return nil
}

func (t *CommandTarget) sh(ctx context.Context, cmd, server string) error {
	if strings.TrimSpace(cmd) == "" {
		return nil
	}
	run := t.Run
	if run == nil {
		run = ExecRunner
	}
	cmd = strings.ReplaceAll(cmd, "{server}", server)
	_, err := run(ctx, "env", "DRILL_SERVER="+server, "sh", "-c", cmd, "drill", server)
	return err
}

// Member is a server as the region table names it.
type Member struct {
	ID   string `json:"id"`
	Addr string `json:"addr"` // RPC address, host:port
}

// Placement says where the drill's keys live.
type Placement struct {
	// Region maps each key to the region holding it.
	Region map[string]uint32
	// Hosts maps each region to the server hosting it (its leader).
	Hosts map[uint32]Member
}

// Locator finds the placement of keys (cellctl reads the region table
// and the servers' meganodes).
type Locator interface {
	Locate(ctx context.Context, keys []string) (Placement, error)
}

// Pick chooses the server to strike: PickLeader, PickRandom, or a
// server's name.
type Pick string

const (
	// PickLeader strikes the host (raft leader) of the region holding the
	// most drill keys, found again before each fault.
	PickLeader Pick = "leader"
	// PickRandom strikes one of the target's servers at random.
	PickRandom Pick = "random"
)

// choose returns the name, among the target's servers, to strike.
func choose(ctx context.Context, p Pick, t Target, loc Locator, keys []string, rng *rand.Rand) (string, error) {
	servers := t.Servers()
	switch p {
	case PickRandom:
		if len(servers) == 0 {
			return "", fmt.Errorf("%w: --target random: the target does not list its servers", ErrNoServer)
		}
		return servers[rng.IntN(len(servers))], nil
	case PickLeader:
		if loc == nil {
			return "", fmt.Errorf("%w: --target leader needs the region table", ErrNoServer)
		}
		pl, region, err := locateBusiest(ctx, loc, keys)
		if err != nil {
			return "", err
		}
		m := pl.Hosts[region]
		if servers == nil {
			return m.ID, nil
		}
		host, _, _ := net.SplitHostPort(m.Addr)
		for _, s := range servers {
			if s == m.ID || s == m.Addr || host != "" && s == host {
				return s, nil
			}
		}
		return "", fmt.Errorf("%w: region %d's host %s (%s) is none of %s", ErrNoServer, region, m.ID, m.Addr, strings.Join(servers, ", "))
	}
	if servers != nil && !slices.Contains(servers, string(p)) {
		return "", fmt.Errorf("%w: %q is none of %s", ErrNoServer, p, strings.Join(servers, ", "))
	}
	return string(p), nil
}

// leaderLookupTimeout bounds how long choose looks for the region holding
// the most drill keys. While a region changes hands (a takeover, or a
// leadership transfer: the old host stops serving the region before the
// new one takes it over) no server reports its meganodes, so a lookup at
// that moment finds no region holding the keys; that lasts a few
// heartbeat timeouts at most.
var leaderLookupTimeout = 15 * time.Second

// leaderLookupRetry is the pause between two lookups.
const leaderLookupRetry = 100 * time.Millisecond

// locateBusiest locates keys and returns the placement and the region
// holding the most of them, looking again every leaderLookupRetry for up
// to leaderLookupTimeout while the lookup fails or finds no such region.
func locateBusiest(ctx context.Context, loc Locator, keys []string) (Placement, uint32, error) {
	deadline := time.Now().Add(leaderLookupTimeout)
	for {
		pl, err := loc.Locate(ctx, keys)
		if err == nil {
			if region, ok := busiest(pl); ok {
				return pl, region, nil
			}
			err = fmt.Errorf("%w: no region holds a drill key", ErrNoServer)
		} else {
			err = fmt.Errorf("%w: find the leader: %w", ErrNoServer, err)
		}
		if !time.Now().Add(leaderLookupRetry).Before(deadline) {
			return Placement{}, 0, err
		}
		select {
		case <-ctx.Done():
			return Placement{}, 0, errors.Join(err, ctx.Err())
		case <-time.After(leaderLookupRetry):
		}
	}
}

// busiest returns the region holding the most keys (the lowest ID of a
// tie) that has a host.
func busiest(pl Placement) (uint32, bool) {
	n := map[uint32]int{}
	for _, r := range pl.Region {
		if _, ok := pl.Hosts[r]; ok {
			n[r]++
		}
	}
	var best uint32
	for r, c := range n {
		if c > n[best] || c == n[best] && r < best {
			best = r
		}
	}
	return best, n[best] > 0
}
