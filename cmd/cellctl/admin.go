package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// The operator's commands that move replicas and leaderships. Each asks
// the host of a region (as the region table names it) and, with --wait,
// asks again every askInterval until the region table shows the change
// done: a move goes on in the background on the host (a snapshot is
// installed on the new replica before the old one is removed), and the
// host may change on the way.

// askInterval is how often the admin commands ask again while they wait.
const askInterval = time.Second

func newMoveReplicaCommand(g *globals) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "move-replica REGION FROM TO",
		Short: "Move a region's replica from one server to another",
		Long: `Move the replica of REGION on server FROM to server TO. The region's
host adds TO to the region's raft group as a nonvoter, which receives a
snapshot and the log; once it caught up it becomes a voter, and FROM is
removed. If FROM is the host itself, it first hands its leadership to
another replica. With --wait (the default) the command returns when the
region table shows the move done, or fails at --command-timeout (raise
it for large regions).`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseRegionArg(args[0])
			if err != nil {
				return err
			}
			from, to := args[1], args[2]
			return g.withTable(func(ctx context.Context, store regiontable.Store) error {
				req := &wire.MoveReplicaRequest{Region: id, From: from, To: to}
				done := func(r regiontable.Region) bool {
					return !holds(r, from) && slices.Contains(r.Replicas, to)
				}
				start := time.Now()
				if err := g.askUntil(ctx, store, id, wire.OpMoveReplica, req, wait, done); err != nil {
					return fmt.Errorf("move region %d's replica from %s to %s: %w", id, from, to, err)
				}
				return g.reportAdmin(wait, fmt.Sprintf("region %d: replica moved from %s to %s", id, from, to), start)
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until the region table shows the move done")
	return cmd
}

func newTransferLeaderCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transfer-leader REGION [TO]",
		Short: "Hand a region's leadership to another of its replicas",
		Long: `Hand the leadership of REGION's raft group, and so the region, to its
replica on server TO (without TO: to another live replica). The host
stops serving the region and drops its read lease first; the new leader
takes the region over. The command returns when the region table names
the new host.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseRegionArg(args[0])
			if err != nil {
				return err
			}
			to := ""
			if len(args) == 2 {
				to = args[1]
			}
			return g.withTable(func(ctx context.Context, store regiontable.Store) error {
				before, err := store.Region(ctx, id)
				if err != nil {
					return fmt.Errorf("region %d: %w", id, err)
				}
				done := func(r regiontable.Region) bool {
					return r.Host != before.Host && (to == "" || r.Host == to)
				}
				start := time.Now()
				if err := g.askUntil(ctx, store, id, wire.OpTransferLeader, &wire.TransferLeaderRequest{Region: id, To: to}, true, done); err != nil {
					return fmt.Errorf("transfer region %d's leadership: %w", id, err)
				}
				r, err := store.Region(ctx, id)
				if err != nil {
					return err
				}
				return g.reportAdmin(true, fmt.Sprintf("region %d: leader %s (was %s)", id, r.Host, before.Host), start)
			})
		},
	}
	return cmd
}

func newDrainCommand(g *globals) *cobra.Command {
	var undo, wait bool
	cmd := &cobra.Command{
		Use:   "drain SERVER",
		Short: "Move every replica and leadership off a server, for a planned stop",
		Long: `Mark SERVER draining in the region table: the coordinator moves every
replica it holds to other servers (one region at a time per host, at
most two regions at once), its leaderships first, and places no new
replica on it. With --wait (the default) the command returns when no
region lists SERVER; it can then be stopped without any region losing
a replica. --undo clears the mark (replicas come back only as new
regions are placed or leaders balanced).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := regiontable.ValidServerID(id); err != nil {
				return err
			}
			return g.withTable(func(ctx context.Context, store regiontable.Store) error {
				if err := store.SetDraining(ctx, id, !undo); err != nil {
					return err
				}
				if undo {
					return g.reportAdmin(false, fmt.Sprintf("%s: no longer draining", id), time.Now())
				}
				start := time.Now()
				if wait {
					if err := waitDrained(ctx, store, id); err != nil {
						return fmt.Errorf("drain %s: %w (it stays marked draining; cellctl drain --undo %s clears the mark)", id, err, id)
					}
				}
				return g.reportAdmin(wait, fmt.Sprintf("%s: drained", id), start)
			})
		},
	}
	cmd.Flags().BoolVar(&undo, "undo", false, "clear the draining mark")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until no region has a replica on the server")
	return cmd
}

// withTable runs fn with the region table and the command's context.
func (g *globals) withTable(fn func(ctx context.Context, store regiontable.Store) error) error {
	ctx, cancel := g.commandContext()
	defer cancel()
	store, err := g.openTable()
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(ctx, store)
}

// askUntil sends req to region id's host, and with wait asks again every
// askInterval (the host may have changed) until done holds for the
// region's table entry.
func (g *globals) askUntil(ctx context.Context, store regiontable.Store, id uint32, op wire.Op, req wire.Message, wait bool, done func(regiontable.Region) bool) error {
	var lastErr error
	for {
		st, err := store.Load(ctx)
		if err != nil {
			return err
		}
		r, ok := findRegion(st, id)
		if !ok {
			return fmt.Errorf("region %d is not in the region table: %w", id, regiontable.ErrNotFound)
		}
		if done(r) {
			return nil
		}
		host, live := findMember(st, r.Host)
		if !live {
			lastErr = fmt.Errorf("its host %s is not a live member", r.Host)
		} else {
			err := g.callServer(ctx, host.RPCAddr, op, req, &wire.EmptyMessage{})
			switch {
			case err == nil:
				if !wait {
					return nil
				}
			case wire.StatusOf(err) == wire.StatusBadRequest:
				return err // the host refused: asking again will not help
			default:
				lastErr = err // a new host, a lost connection: ask again
			}
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("not done within --command-timeout (last: %w)", lastErr)
			}
			return errors.New("not done within --command-timeout")
		case <-time.After(askInterval):
		}
	}
}

// waitDrained waits until no region lists server id.
func waitDrained(ctx context.Context, store regiontable.Store, id string) error {
	for {
		st, err := store.Load(ctx)
		if err != nil {
			return err
		}
		left := 0
		for _, r := range st.Regions {
			if r.Host == id || holds(r, id) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s a replica still on it at --command-timeout", regionsHave(left))
		case <-time.After(askInterval):
		}
	}
}

// adminResult is the JSON output of move-replica, transfer-leader and
// drain.
type adminResult struct {
	Result  string  `json:"result"`
	Seconds float64 `json:"seconds"`
	Waited  bool    `json:"waited"`
}

func (g *globals) reportAdmin(waited bool, what string, start time.Time) error {
	res := adminResult{Result: what, Seconds: time.Since(start).Seconds(), Waited: waited}
	if waited {
		what += fmt.Sprintf(" (%.1fs)", res.Seconds)
	} else {
		what += " (asked)"
	}
	return g.printLine(res, what)
}

func parseRegionArg(s string) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("region %q: want a region ID (cellctl regions lists them)", s)
	}
	return uint32(id), nil
}

func findRegion(st regiontable.State, id uint32) (regiontable.Region, bool) {
	for _, r := range st.Regions {
		if r.ID == id {
			return r, true
		}
	}
	return regiontable.Region{}, false
}

func findMember(st regiontable.State, id string) (regiontable.Member, bool) {
	for _, m := range st.Members {
		if m.ID == id {
			return m, true
		}
	}
	return regiontable.Member{}, false
}

func holds(r regiontable.Region, id string) bool {
	return slices.Contains(r.Replicas, id) || slices.Contains(r.Learners, id)
}
