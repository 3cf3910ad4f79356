package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a drill.
type Options struct {
	Workload Workload
	Schedule Schedule
	// Fault is what each fault does. Required unless the schedule has no
	// fault.
	Fault FaultKind
	// Pick chooses the server of each fault. Default PickLeader when a
	// Locator is given, else PickRandom.
	Pick Pick
	// Target strikes the faults. Required unless the schedule has no
	// fault.
	Target Target
	// Locator finds where the keys live, for PickLeader and the figures
	// per region. Optional.
	Locator Locator
	// RecoveryTimeout bounds the wait, after the last heal and the end of
	// the load, until every key reads. Default 60 s.
	RecoveryTimeout time.Duration
	// CheckTimeout bounds porcupine's check. Default 60 s.
	CheckTimeout time.Duration
	// ArtifactDir receives porcupine's visualisation of an offending key.
	// "" writes none.
	ArtifactDir string
	// ClusterCheck, if set, runs after recovery and returns the cluster's
	// violations (cellctl check's).
	ClusterCheck func(ctx context.Context) ([]string, error)
	// Logger receives the drill's progress (faults, heals, recovery).
	// Default: discard.
	Logger *slog.Logger
}

// EnsureDefaults fills the zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	o.Workload.EnsureDefaults()
	o.Schedule.EnsureDefaults()
	if o.Pick == "" {
		o.Pick = PickRandom
		if o.Locator != nil {
			o.Pick = PickLeader
		}
	}
	if o.RecoveryTimeout == 0 {
		o.RecoveryTimeout = 60 * time.Second
	}
	if o.CheckTimeout == 0 {
		o.CheckTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the options (after EnsureDefaults).
func (o *Options) Validate() error {
	if err := o.Workload.Validate(); err != nil {
		return err
	}
	if err := o.Schedule.Validate(); err != nil {
		return err
	}
	if o.Schedule.Count > 0 && (o.Target == nil || o.Fault == 0) {
		return fmt.Errorf("%w: a schedule with faults needs a target and a fault kind", ErrInvalid)
	}
	if o.Schedule.Count > 0 && o.Pick != PickLeader && o.Pick != PickRandom {
		if ss := o.Target.Servers(); ss != nil && !slices.Contains(ss, string(o.Pick)) {
			return fmt.Errorf("%w: server %q to strike is none of %s", ErrNoServer, o.Pick, strings.Join(ss, ", "))
		}
	}
	if o.RecoveryTimeout < 0 || o.CheckTimeout <= 0 {
		return fmt.Errorf("%w: recovery timeout %v, check timeout %v", ErrInvalid, o.RecoveryTimeout, o.CheckTimeout)
	}
	return nil
}

// Run runs a drill against s (see the package comment) and returns its
// report. An error means the drill could not run to the end (invalid
// options, the preload failed, a fault could not be struck or healed,
// ctx ended); the report then holds what was found until then, if
// anything. A drill that ran and found a loss or a violation returns no
// error: Report.OK says.
func Run(ctx context.Context, s Store, o Options) (*Report, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	w, log := &o.Workload, o.Logger
	rec := NewRecorder()
	log.Info("drill: preload", "keys", w.Keys)
	if err := w.Preload(ctx, s, rec); err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	keys := w.AllKeys()
	var pl Placement
	if o.Locator != nil {
		var err error
		if pl, err = o.Locator.Locate(ctx, keys); err != nil {
			log.Warn("drill: placement of the keys unknown; figures for all keys together", "err", err)
			pl = Placement{}
		}
	}

	// The load, and the schedule beside it.
	loadStart := rec.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.Run(ctx, s, rec, stop)
	}()
	faults, ferr := runSchedule(ctx, &o, rec, loadStart, keys)
	if ferr == nil {
		ferr = sleepUntil(ctx, rec, loadStart+o.Schedule.Length())
	}
	close(stop)
	wg.Wait()
	loadEnd := rec.Now()

	// Recovery: every key reads.
	var rerr error
	if ferr == nil {
		rerr = readAll(ctx, s, rec, w, keys, o.RecoveryTimeout)
	}
	recovered := rec.Now()
	log.Info("drill: load over", "recovered", rerr == nil, "after", (recovered - loadEnd).Round(time.Millisecond))

	ops := rec.Ops()
	r := Summarize(ops, faults, loadStart, loadEnd, pl)
	r.Start, r.Workload, r.Schedule, r.Fault, r.History = rec.Start(), *w, o.Schedule, o.Fault, ops
	if r.Fault == 0 || o.Schedule.Count == 0 {
		r.Fault = 0
	}
	r.Recovery = recovered - loadEnd
	if err := errors.Join(ferr, rerr); err != nil {
		r.Errors = append(r.Errors, err.Error())
		if ferr != nil {
			return r, ferr
		}
	}

	// The checks.
	if r.Lost = CheckDurability(ops); r.Lost == nil {
		r.Lost = []Loss{}
	}
	lin, err := CheckLinearizable(ops, o.CheckTimeout, o.ArtifactDir)
	r.Linearizability = lin
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
	}
	if o.ClusterCheck != nil {
		vs, err := o.ClusterCheck(ctx)
		r.ClusterChecked = err == nil
		r.ClusterCheck = vs
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("cluster check: %v", err))
		}
	}
	return r, nil
}

// faultTimeout bounds the strike of one fault, and its heal.
const faultTimeout = time.Minute

// runSchedule strikes and heals the schedule's faults at their times
// after loadStart. A fault in place when something fails is healed before
// it returns.
func runSchedule(ctx context.Context, o *Options, rec *Recorder, loadStart time.Duration, keys []string) ([]FaultEvent, error) {
	rng := rand.New(rand.NewPCG(o.Workload.Seed, 1<<32))
	var events []FaultEvent
	for i, win := range o.Schedule.Windows() {
		if err := sleepUntil(ctx, rec, loadStart+win.Fault); err != nil {
			return events, err
		}
		server, err := choose(ctx, o.Pick, o.Target, o.Locator, keys, rng)
		if err != nil {
			return events, err
		}
		ev := FaultEvent{Kind: o.Fault, Server: server, Fault: rec.Now()}
		o.Logger.Info("drill: fault", "n", i+1, "kind", o.Fault, "server", server)
		// A fault command that hangs (a docker daemon swamped by other
		// work took minutes for a network disconnect) ends the drill with
		// an error that says so, not in silence at its caller's timeout.
		fctx, fcancel := context.WithTimeout(ctx, faultTimeout)
		err = o.Target.Fault(fctx, o.Fault, server)
		fcancel()
		if err != nil {
			err = fmt.Errorf("drill: fault %d (%s on %s): %w", i+1, o.Fault, server, err)
			// The fault may be in place: heal it.
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultTimeout)
			defer cancel()
			return events, errors.Join(err, o.Target.Heal(hctx))
		}
		serr := sleepUntil(ctx, rec, loadStart+win.Heal)
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultTimeout)
		herr := o.Target.Heal(hctx)
		cancel()
		ev.Heal = rec.Now()
		o.Logger.Info("drill: heal", "n", i+1, "server", server)
		events = append(events, ev)
		if err := errors.Join(serr, herr); err != nil {
			return events, err
		}
	}
	return events, nil
}

// sleepUntil waits until the recorder's clock reads t, or ctx ends.
func sleepUntil(ctx context.Context, rec *Recorder, t time.Duration) error {
	d := t - rec.Now()
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readAll reads every key (StageVerify), each until a read succeeds, with
// w.Clients readers, within timeout.
func readAll(ctx context.Context, s Store, rec *Recorder, w *Workload, keys []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unread []string
	for c := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < len(keys); i += w.Clients {
				for {
					op := w.Do(ctx, s, rec, Op{Client: w.Clients + c, Stage: StageVerify, Kind: Get, Key: keys[i]})
					if op.Outcome == OK {
						break
					}
					if ctx.Err() != nil {
						mu.Lock()
						unread = append(unread, keys[i])
						mu.Unlock()
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if len(unread) > 0 {
		return fmt.Errorf("%w: %d keys not read within %v (first %s)", ErrNotRecovered, len(unread), timeout, unread[0])
	}
	return nil
}
