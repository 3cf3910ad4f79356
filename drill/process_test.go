package drill

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeServer is a stand-in for cellserver: it says it serves, records
// its arguments, and exits cleanly on SIGTERM. Like cellserver, it takes
// SIGTERM before it says it serves: a trap set after the marker left a
// window in which a SIGTERM (the restart fault's, right after a pause's
// SIGCONT) killed the shell by default action.
const fakeServer = `#!/bin/sh
trap 'exit 0' TERM
echo "$@" > "$(dirname "$0")/args-$$"
echo 'time=now level=INFO msg="server: serving"'
while :; do sleep 0.05; done
`

// procState returns the state letter of /proc/<pid>/stat (R, S, T...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return "gone"
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func itoa(n int) string { return strconv.Itoa(n) }

// The signals of each fault and heal, on processes the target started.
func TestProcessTarget(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "cellserver")
	if err := os.WriteFile(bin, []byte(fakeServer), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pt, err := StartProcesses(ctx, ProcessOptions{Binary: bin, Servers: 2, Etcd: "http://127.0.0.1:1", Flags: []string{"--replicas", "3"}, Dir: dir, ReadyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pt.Close()
	if got := pt.Servers(); !slices.Equal(got, []string{"drill-1", "drill-2"}) {
		t.Fatalf("servers %q", got)
	}
	p := pt.servers[1]
	args, _ := os.ReadFile(filepath.Join(dir, "args-"+itoa(p.cmd.Process.Pid)))
	for _, want := range []string{"--server-id drill-2", "--etcd-endpoints http://127.0.0.1:1", "--listen " + p.addr, "--replicas 3"} {
		if !strings.Contains(string(args), want) {
			t.Errorf("arguments %q lack %q", args, want)
		}
	}

	// kill: the process is gone; heal starts it again with the same
	// arguments.
	pid := p.cmd.Process.Pid
	if err := pt.Fault(ctx, Kill, "drill-2"); err != nil {
		t.Fatal(err)
	}
	if p.alive() {
		t.Fatal("killed server still alive")
	}
	if err := pt.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pt.WaitServing(ctx); err != nil {
		t.Fatal(err)
	}
	if p.cmd.Process.Pid == pid {
		t.Fatal("heal of a kill did not start a new process")
	}
	again, _ := os.ReadFile(filepath.Join(dir, "args-"+itoa(p.cmd.Process.Pid)))
	if string(again) != string(args) {
		t.Errorf("restarted with %q, was %q", again, args)
	}

	// pause: stopped (T) until the heal.
	pid = p.cmd.Process.Pid
	if err := pt.Fault(ctx, Pause, "drill-2"); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "T")
	if err := pt.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "S", "R")

	// restart: a new process, serving, before Fault returns.
	if err := pt.Fault(ctx, Restart, "drill-2"); err != nil {
		t.Fatal(err)
	}
	if p.cmd.Process.Pid == pid || !p.alive() {
		t.Fatal("restart did not start a new process")
	}
	if err := pt.Heal(ctx); err != nil {
		t.Fatal(err)
	}

	if err := pt.Fault(ctx, Partition, "drill-1"); err == nil {
		t.Error("a local partition was accepted")
	}
	if err := pt.Fault(ctx, Kill, "drill-9"); err == nil {
		t.Error("an unknown server was accepted")
	}
	// Close stops a paused server too.
	if err := pt.Fault(ctx, Pause, "drill-1"); err != nil {
		t.Fatal(err)
	}
	if err := pt.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range pt.servers {
		if p.alive() {
			t.Errorf("%s alive after Close", p.id)
		}
	}
}

func waitState(t *testing.T, pid int, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := procState(t, pid)
		if slices.Contains(want, st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d in state %s, want %v", pid, st, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
