package drill

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeRunner records command lines and answers from a table.
type fakeRunner struct {
	lines   []string
	answers map[string]string // command line prefix -> output
	fail    string            // a command line prefix that fails
}

func (r *fakeRunner) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	r.lines = append(r.lines, line)
	if r.fail != "" && strings.HasPrefix(line, r.fail) {
		return nil, errors.New("exit status 1")
	}
	for p, out := range r.answers {
		if strings.HasPrefix(line, p) {
			return []byte(out), nil
		}
	}
	return nil, nil
}

func newFakeCompose(t *testing.T, r *fakeRunner, networks []string) *ComposeTarget {
	t.Helper()
	r.answers = map[string]string{
		"docker ps -aq --no-trunc --filter label=com.docker.compose.project=drill --filter label=com.docker.compose.service=cell1": "id1\n",
		"docker ps -aq --no-trunc --filter label=com.docker.compose.project=drill --filter label=com.docker.compose.service=cell2": "id2\n",
		"docker inspect": `{"drill_default":{"IPAMConfig":{"IPv4Address":"172.28.0.12"},"Aliases":["cell2","id2"]},"drill_raft":{"IPAMConfig":null,"Aliases":null}}`,
	}
	ct, err := NewComposeTarget(context.Background(), ComposeOptions{Project: "drill", Services: []string{"cell1", "cell2"}, Networks: networks, Run: r.run})
	if err != nil {
		t.Fatal(err)
	}
	r.lines = nil
	return ct
}

// The docker command lines of each fault and its heal.
func TestComposeTargetCommands(t *testing.T) {
	for _, tc := range []struct {
		kind FaultKind
		want []string
	}{
		{Kill, []string{"docker kill id2", "docker start id2"}},
		{Pause, []string{"docker pause id2", "docker unpause id2"}},
		{Partition, []string{"docker network disconnect drill_default id2", "docker network disconnect drill_raft id2",
			"docker network connect --ip 172.28.0.12 --alias cell2 drill_default id2", "docker network connect drill_raft id2"}},
		{Restart, []string{"docker restart id2"}},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			r := &fakeRunner{}
			ct := newFakeCompose(t, r, nil)
			ctx := context.Background()
			if err := ct.Fault(ctx, tc.kind, "cell2"); err != nil {
				t.Fatal(err)
			}
			if err := ct.Heal(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ct.Heal(ctx); err != nil { // nothing left to heal
				t.Fatal(err)
			}
			if !slices.Equal(r.lines, tc.want) {
				t.Errorf("commands\n%q\nwant\n%q", r.lines, tc.want)
			}
		})
	}
}

func TestComposeTargetResolve(t *testing.T) {
	r := &fakeRunner{}
	ct := newFakeCompose(t, r, []string{"net1"})
	if got := ct.Servers(); !slices.Equal(got, []string{"cell1", "cell2"}) {
		t.Errorf("servers %q", got)
	}
	if err := ct.Fault(context.Background(), Partition, "cell1"); err != nil || !slices.Equal(r.lines, []string{"docker network disconnect net1 id1"}) {
		t.Errorf("partition with --network: %q, %v", r.lines, err)
	}
	if err := ct.Fault(context.Background(), Kill, "cell9"); !errors.Is(err, ErrNoServer) {
		t.Errorf("unknown service: %v", err)
	}
	// A service without its one container is refused up front.
	r2 := &fakeRunner{answers: map[string]string{"docker ps": "id1\nid9\n"}}
	if _, err := NewComposeTarget(context.Background(), ComposeOptions{Project: "p", Services: []string{"s"}, Run: r2.run}); !errors.Is(err, ErrNoServer) {
		t.Errorf("two containers: %v", err)
	}
	r3 := &fakeRunner{fail: "docker kill"}
	ct3 := newFakeCompose(t, r3, nil)
	if err := ct3.Fault(context.Background(), Kill, "cell1"); !errors.Is(err, ErrFault) {
		t.Errorf("failing docker kill: %v", err)
	}
}

func TestCommandTarget(t *testing.T) {
	r := &fakeRunner{}
	ct := &CommandTarget{FaultCmd: "ssh {server} pkill -STOP cellserver", HealCmd: "ssh {server} pkill -CONT cellserver", Run: r.run}
	ctx := context.Background()
	if err := ct.Fault(ctx, Command, "host3"); err != nil {
		t.Fatal(err)
	}
	if err := ct.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"env DRILL_SERVER=host3 sh -c ssh host3 pkill -STOP cellserver drill host3",
		"env DRILL_SERVER=host3 sh -c ssh host3 pkill -CONT cellserver drill host3",
	}
	if !slices.Equal(r.lines, want) {
		t.Errorf("commands\n%q\nwant\n%q", r.lines, want)
	}
	// The real shell: $1 and $DRILL_SERVER name the server.
	out, err := ExecRunner(ctx, "env", "DRILL_SERVER=s1", "sh", "-c", `echo "$1 $DRILL_SERVER"`, "drill", "s1")
	if err != nil || strings.TrimSpace(string(out)) != "s1 s1" {
		t.Errorf("sh: %q, %v", out, err)
	}
}

// Choosing the server: the host of the busiest region, matched by ID,
// address or host name; random; named.
func TestChoose(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c", "d", "e", "f"}
	ft := &fakeTarget{}
	if got, err := choose(ctx, PickLeader, ft, fakeLocator{}, keys, rng); err != nil || got != "a" {
		t.Errorf("leader: %q, %v", got, err)
	}
	ct := &CommandTarget{}
	if got, err := choose(ctx, PickLeader, ct, fakeLocator{}, keys, rng); err != nil || got != "a" {
		t.Errorf("leader of a command target: %q, %v", got, err)
	}
	if got, err := choose(ctx, PickRandom, ft, nil, keys, rng); err != nil || !slices.Contains(ft.Servers(), got) {
		t.Errorf("random: %q, %v", got, err)
	}
	if got, err := choose(ctx, "c", ft, nil, keys, rng); err != nil || got != "c" {
		t.Errorf("named: %q, %v", got, err)
	}
	if _, err := choose(ctx, "z", ft, nil, keys, rng); !errors.Is(err, ErrNoServer) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := choose(ctx, PickLeader, ft, nil, keys, rng); !errors.Is(err, ErrNoServer) {
		t.Errorf("leader without a locator: %v", err)
	}
}

// handoverLocator finds no region holding the keys for its first misses
// lookups, as while a region changes hands (the old host stopped serving
// it, the new one has not taken it over yet), then fakeLocator's
// placement.
type handoverLocator struct {
	misses, calls int
}

func (l *handoverLocator) Locate(ctx context.Context, keys []string) (Placement, error) {
	l.calls++
	if l.calls <= l.misses {
		return Placement{Region: map[string]uint32{}, Hosts: map[uint32]Member{1: {ID: "a", Addr: "a:1"}}}, nil
	}
	return fakeLocator{}.Locate(ctx, keys)
}

// A leader lookup during a handover looks again instead of failing the
// drill; one that finds no region for longer than leaderLookupTimeout
// fails.
func TestChooseLeaderDuringHandover(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	loc := &handoverLocator{misses: 3}
	if got, err := choose(ctx, PickLeader, &fakeTarget{}, loc, keys, rng); err != nil || got != "a" {
		t.Errorf("leader after a handover: %q, %v (%d lookups)", got, err, loc.calls)
	}
	if loc.calls != 4 {
		t.Errorf("%d lookups, want 4", loc.calls)
	}
	defer func(d time.Duration) { leaderLookupTimeout = d }(leaderLookupTimeout)
	leaderLookupTimeout = 300 * time.Millisecond
	loc = &handoverLocator{misses: 1 << 30}
	if _, err := choose(ctx, PickLeader, &fakeTarget{}, loc, keys, rng); !errors.Is(err, ErrNoServer) || loc.calls < 2 {
		t.Errorf("no region for good: %v after %d lookups", err, loc.calls)
	}
}
