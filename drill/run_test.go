package drill

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func drillOptions(t *testing.T, target Target) Options {
	return Options{
		Workload:    Workload{Keys: 20, Clients: 4, Mix: Mix{Get: 50, Put: 40, Delete: 10}, Rate: 2000},
		Schedule:    Schedule{At: 100 * time.Millisecond, Duration: 100 * time.Millisecond, Count: 2, Every: 200 * time.Millisecond, Tail: 100 * time.Millisecond},
		Fault:       Kill,
		Target:      target,
		Locator:     fakeLocator{},
		ArtifactDir: t.TempDir(),
	}
}

// A store that keeps what it acknowledged passes every check; the faults
// are struck on the busiest region's host at the scheduled times.
func TestRunCorrectStore(t *testing.T) {
	s := newFakeStore(correct)
	target := &fakeTarget{s: s}
	r, err := Run(context.Background(), s, drillOptions(t, target))
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("a correct store fails the drill: lost %v, %+v, errors %v", r.Lost, r.Linearizability, r.Errors)
	}
	if want := []string{"kill a", "heal", "kill a", "heal"}; !slices.Equal(target.calls, want) {
		t.Errorf("target calls %q, want %q", target.calls, want)
	}
	if len(r.Faults) != 2 || len(r.Regions) != 2 || r.Operations.OK == 0 || r.Latency.P99 == 0 {
		t.Errorf("report: %d faults, %d regions, %+v operations, latency %+v", len(r.Faults), len(r.Regions), r.Operations, r.Latency)
	}
	for i, w := range r.Schedule.Windows() {
		f := r.Faults[i]
		if f.Fault < r.LoadStart+w.Fault || f.Heal < r.LoadStart+w.Heal {
			t.Errorf("fault %+v struck or healed before its window %+v (load from %v)", f.FaultEvent, w, r.LoadStart)
		}
	}
}

// A store that forgets acknowledged writes at a fault is caught: its
// final reads return what the history does not allow.
func TestRunForgetfulStore(t *testing.T) {
	s := newFakeStore(forgetful)
	o := drillOptions(t, &fakeTarget{s: s})
	o.Workload.Mix = Mix{Get: 50, Put: 50}
	o.Workload.Keys = 500 // most keys written only by the preload
	r, err := Run(context.Background(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Lost) == 0 || r.OK() {
		t.Fatalf("a store that forgot everything lost nothing: %+v", r.Linearizability)
	}
	t.Logf("%d keys lost, first %v", len(r.Lost), r.Lost[0])
}

// A store that serves stale reads during a fault is not linearizable,
// and the offending key's visualisation is written.
func TestRunStaleReads(t *testing.T) {
	s := newFakeStore(staleReads)
	o := drillOptions(t, &fakeTarget{s: s})
	o.Workload.Keys = 5 // every key written during the fault
	r, err := Run(context.Background(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	lin := r.Linearizability
	if lin.OK() || r.OK() || len(lin.Keys) == 0 {
		t.Fatalf("stale reads pass: %+v", lin)
	}
	if lin.Visualization == "" || filepath.Dir(lin.Visualization) != o.ArtifactDir {
		t.Fatalf("visualisation %q, want a file in %s", lin.Visualization, o.ArtifactDir)
	}
	if fi, err := os.Stat(lin.Visualization); err != nil || fi.Size() == 0 {
		t.Fatalf("visualisation: %v", err)
	}
	if len(r.Lost) != 0 {
		t.Errorf("stale reads lost writes: %v", r.Lost)
	}
}

// Without faults, a target is not needed and the report has one phase.
func TestRunBaseline(t *testing.T) {
	s := newFakeStore(correct)
	o := Options{Workload: Workload{Keys: 10, Clients: 2, Rate: 500}, Schedule: Schedule{NoFault: true, At: 100 * time.Millisecond, Tail: 100 * time.Millisecond}}
	r, err := Run(context.Background(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || len(r.Faults) != 0 || len(r.Phases) != 1 || r.Phases[0].Name != PhaseBefore {
		t.Fatalf("baseline: ok %v, faults %v, phases %+v", r.OK(), r.Faults, r.Phases)
	}
	// The rate holds within a margin: 500/s for 0.2 s.
	if n := r.Phases[0].Counts.OK; n < 50 || n > 150 {
		t.Errorf("%d operations at 500/s in 0.2 s", n)
	}
}

// A named server the target does not have is refused before anything
// runs.
func TestRunUnknownServer(t *testing.T) {
	s := newFakeStore(correct)
	o := drillOptions(t, &fakeTarget{s: s})
	o.Pick = "z"
	if _, err := Run(context.Background(), s, o); !errors.Is(err, ErrNoServer) {
		t.Fatalf("err %v, want ErrNoServer", err)
	}
	if len(s.data) != 0 {
		t.Error("the drill wrote before it failed")
	}
}
