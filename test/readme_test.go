package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/testutil"
)

// TestReadme runs the README's quick start and many-servers recipe as a
// person would, literally: the commands of every ```sh block marked
// <!-- readme-test --> in README.md, in order, in one shell session (so
// `&` jobs and `%N` job specs work), from a copy of the repository, on the
// default ports of a network namespace of its own (its loopback is the
// test's alone). It checks each command's exit status and, where a line
// ends with a comment "# → TEXT", that its output contains TEXT.
//
// Each command runs once, as typed, with no pause before it that the
// README does not ask for: a command that needs the cluster to settle
// waits itself (cellctl members --wait, check --wait), and one whose
// output is not yet what the comment says fails the test. What a person
// does outside the shell, the test does too:
//   - A server started in the foreground (`go run ./cmd/cellserver` and
//     flags, without `&`) runs in "another terminal": a process
//     group of its own. Its "# → TEXT" is what the person waits to see
//     in that terminal before going on (the server's "server: serving"),
//     and the test waits for it too. <!-- readme-test: ctrl-c --> sends
//     that terminal SIGINT, as Ctrl-C does, and waits for it to exit.
//   - `make test` is not run: it is what runs this test.
func TestReadme(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the README's commands take a few minutes")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the README's commands run on their default ports in a network namespace of their own")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) for a network namespace")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := readmeSteps(t, string(readme))
	if len(steps) == 0 {
		t.Fatal("README.md has no <!-- readme-test --> blocks")
	}

	work := t.TempDir()
	copyRepo(t, root, work)
	shmBefore := shmFiles(t)
	defer checkShmLeftovers(t, shmBefore)
	ns := newNetns(t)
	sh := startSession(t, ns, work)
	warmBuild(t, sh, steps)

	var terminals []*terminal
	for _, st := range steps {
		switch {
		case st.ctrlC:
			for _, term := range terminals {
				term.interrupt(t)
			}
			terminals = nil
			continue
		case st.skip:
			t.Logf("README: not run here: %s", st.cmd)
			continue
		case st.terminal:
			t.Logf("README (another terminal): %s", st.cmd)
			term := startTerminal(t, ns, work, st.cmd)
			terminals = append(terminals, term)
			if st.want != "" {
				start := time.Now()
				term.waitFor(t, st.want, 5*time.Minute)
				t.Logf("the terminal shows %q after %v", st.want, time.Since(start).Round(100*time.Millisecond))
			}
			continue
		case strings.HasSuffix(strings.TrimSpace(st.cmd), "&"):
			t.Logf("README: %s", st.cmd)
			if rc, out := sh.run(t, st.cmd, time.Minute); rc != 0 {
				t.Fatalf("README line %d: %s\nexit status %d\n%s", st.line, st.cmd, rc, out)
			}
			continue
		}
		t.Logf("README: %s", st.cmd)
		start := time.Now()
		rc, out := sh.run(t, st.cmd, 5*time.Minute)
		if rc != 0 || !strings.Contains(out, st.want) {
			t.Fatalf("README line %d: %s\nexit status %d, want 0 and output containing %q; output:\n%s\n%s",
				st.line, st.cmd, rc, st.want, out, sh.logs(work))
		}
		t.Logf("exit 0 after %v:\n%s", time.Since(start).Round(100*time.Millisecond), indent(out))
	}
	for _, term := range terminals {
		term.interrupt(t)
	}
	sh.close(t)
}

// warmBuild compiles, in the session, every command the README's steps
// go run, before the first step: the two minutes a step is retried are
// for servers to start, not for the go command to build them. The
// binaries of TestMain do not help: they are built without cgo, and
// go run, with the machine's default, rebuilds everything that depends
// on it (about half a minute on two idle cores, minutes on loaded ones).
// A person on a fresh machine waits for that first go run too.
func warmBuild(t *testing.T, sh *session, steps []readmeStep) {
	t.Helper()
	var pkgs []string
	for _, st := range steps {
		f := strings.Fields(stripComment(st.cmd))
		if len(f) >= 3 && f[0] == "go" && f[1] == "run" && !slices.Contains(pkgs, f[2]) {
			pkgs = append(pkgs, f[2])
		}
	}
	if len(pkgs) == 0 {
		return
	}
	start := time.Now()
	cmd := fmt.Sprintf("go build -o %q %s", t.TempDir()+"/", strings.Join(pkgs, " "))
	if rc, out := sh.run(t, cmd, 15*time.Minute); rc != 0 {
		t.Fatalf("%s: exit status %d\n%s", cmd, rc, out)
	}
	t.Logf("built %s in %v", strings.Join(pkgs, " "), time.Since(start).Round(100*time.Millisecond))
}

// readmeStep is one command of the README to run, or a ctrl-c.
type readmeStep struct {
	line     int
	cmd      string // the command, continuation lines joined
	want     string // "# → TEXT": the output must contain TEXT
	ctrlC    bool   // <!-- readme-test: ctrl-c -->
	skip     bool   // make test
	terminal bool   // a server in the foreground: another terminal
}

var wantRE = regexp.MustCompile(`\s+#\s*→\s*(.*)$`)

// readmeSteps takes the marked blocks' commands out of the README.
func readmeSteps(t *testing.T, readme string) []readmeStep {
	t.Helper()
	var steps []readmeStep
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		switch strings.TrimSpace(lines[i]) {
		case "<!-- readme-test: ctrl-c -->":
			steps = append(steps, readmeStep{line: i + 1, ctrlC: true})
			continue
		case "<!-- readme-test -->":
		default:
			continue
		}
		i++
		if i >= len(lines) || strings.TrimSpace(lines[i]) != "```sh" {
			t.Fatalf("README line %d: <!-- readme-test --> is not followed by a ```sh block", i)
		}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			start := i
			line := lines[i]
			for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
				i++
				line += "\n" + lines[i]
			}
			if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			st := readmeStep{line: start + 1, cmd: line}
			if m := wantRE.FindStringSubmatchIndex(line); m != nil {
				st.want = strings.TrimSpace(line[m[2]:m[3]])
			}
			cmd := strings.TrimSpace(stripComment(line))
			switch {
			case cmd == "make test":
				st.skip = true
			case runsServer(cmd) && !strings.HasSuffix(cmd, "&"):
				st.terminal = true
				st.cmd = cmd
			}
			steps = append(steps, st)
		}
	}
	return steps
}

// runsServer reports whether cmd runs a server with go run (flags only,
// no subcommand such as wipe).
func runsServer(cmd string) bool {
	f := strings.Fields(cmd)
	return len(f) >= 3 && f[0] == "go" && f[1] == "run" && f[2] == "./cmd/cellserver" &&
		(len(f) == 3 || strings.HasPrefix(f[3], "-"))
}

// stripComment drops a trailing "# ..." comment (the README's lines have
// no # inside quotes).
func stripComment(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		return line[:i]
	}
	return line
}

// copyRepo copies the repository's files at root into dir, leaving out
// git's and the recipes' own state (data directories, binaries, logs).
func copyRepo(t *testing.T, root, dir string) {
	t.Helper()
	skip := regexp.MustCompile(`^(\.git|bin|build|cell-data|d[0-9]+)$`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			if !strings.Contains(rel, string(filepath.Separator)) && skip.MatchString(rel) {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, ".log") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copy the repository: %v", err)
	}
}

// newNetns makes a network namespace with its loopback up, deleted when
// the test ends.
func newNetns(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("cellreadme%d", os.Getpid())
	_ = exec.Command("ip", "netns", "del", ns).Run()
	for _, args := range [][]string{{"netns", "add", ns}, {"netns", "exec", ns, "ip", "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
		}
	})
	return ns
}

// readmeEnv is the environment of the README's commands: the test's,
// without settings of Cell's own that would change what they do.
func readmeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CELL_") || strings.HasPrefix(kv, "CELLCTL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// session is one bash reading commands from a pipe: the person's
// terminal. Each command's output goes to a file; a sentinel line on the
// shell's stdout reports its exit status.
type session struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	outDir string
	n      int
}

func startSession(t *testing.T, ns, dir string) *session {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "bash", "--norc", "--noprofile", "-s")
	cmd.Dir = dir
	cmd.Env = readmeEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &session{cmd: cmd, stdin: stdin, lines: make(chan string, 16), outDir: t.TempDir()}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() { s.kill(t, dir) })
	return s
}

// run runs one command in the session and returns its exit status and
// output (stdout then stderr).
func (s *session) run(t *testing.T, command string, timeout time.Duration) (int, string) {
	t.Helper()
	s.n++
	out := filepath.Join(s.outDir, fmt.Sprintf("%d.out", s.n))
	script := fmt.Sprintf("{ %s\n} >%q 2>&1 </dev/null; echo \"__CELL_RC__ %d $?\"\n", command, out, s.n)
	if _, err := io.WriteString(s.stdin, script); err != nil {
		t.Fatalf("shell: %v", err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("the shell exited running %s", command)
			}
			var n, rc int
			if _, err := fmt.Sscanf(line, "__CELL_RC__ %d %d", &n, &rc); err != nil || n != s.n {
				continue
			}
			b, _ := os.ReadFile(out)
			return rc, string(b)
		case <-timer.C:
			b, _ := os.ReadFile(out)
			t.Fatalf("%s did not finish within %v; output so far:\n%s", command, timeout, b)
		}
	}
}

// logs returns the tails of the *.log files the recipe's servers write,
// for a failure's report.
func (s *session) logs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", filepath.Base(f), len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// close ends the session: every job it started must have exited (the
// README stops what it starts).
func (s *session) close(t *testing.T) {
	t.Helper()
	if rc, out := s.run(t, "jobs -r", 10*time.Second); rc != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("the README's commands left jobs running:\n%s", out)
	}
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("the shell did not exit")
	}
}

// kill stops whatever the session left: SIGTERM to every process whose
// working directory is in dir (the servers of the recipe), then SIGKILL.
func (s *session) kill(t *testing.T, dir string) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids := processesIn(dir)
		if len(pids) == 0 {
			break
		}
		if sig == syscall.SIGKILL {
			t.Errorf("processes still running in %s after SIGTERM: %v", dir, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		waitGone(dir, 30*time.Second)
	}
	if s.cmd.ProcessState == nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
}

// processesIn lists the processes whose working directory is dir or
// below it.
func processesIn(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+string(filepath.Separator))) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitGone(dir string, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end) && len(processesIn(dir)) > 0; {
		time.Sleep(100 * time.Millisecond)
	}
}

// terminal is a command running in the foreground of another terminal: a
// process group of its own.
type terminal struct {
	cmd  *exec.Cmd
	out  testutil.SyncBuffer
	done chan error
}

func startTerminal(t *testing.T, ns, dir, command string) *terminal {
	t.Helper()
	term := &terminal{done: make(chan error, 1)}
	term.cmd = exec.Command("ip", "netns", "exec", ns, "bash", "-c", "exec "+command)
	term.cmd.Dir = dir
	term.cmd.Env = readmeEnv()
	term.cmd.Stdout, term.cmd.Stderr = &term.out, &term.out
	term.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := term.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { term.done <- term.cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-term.cmd.Process.Pid, syscall.SIGKILL)
	})
	return term
}

// waitFor waits until the terminal's output shows want, as a person
// watches it; the command exiting first, or timeout passing, fails the
// test.
func (term *terminal) waitFor(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(term.out.String(), want) {
		select {
		case err := <-term.done:
			term.done <- err // for interrupt
			t.Fatalf("%s exited (%v) before it showed %q:\n%s", term.cmd.Args, err, want, term.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not show %q within %v:\n%s", term.cmd.Args, want, timeout, term.out.String())
		}
	}
}

// interrupt is Ctrl-C: SIGINT to the terminal's process group; the
// command must exit within 30 s, and every process of the group with it.
func (term *terminal) interrupt(t *testing.T) {
	t.Helper()
	pgid := term.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("ctrl-c: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-term.done:
	case <-ctx.Done():
		t.Fatalf("ctrl-c: %s did not exit within 30 s", term.cmd.Args)
	}
	for syscall.Kill(-pgid, 0) == nil {
		select {
		case <-ctx.Done():
			t.Fatalf("ctrl-c: processes of %s are still running 30 s later", term.cmd.Args)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if len(s) > 4000 {
		s = s[:4000] + "\n..."
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// shmFiles lists the names in /dev/shm.
func shmFiles(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

// checkShmLeftovers fails the test if the README's commands left region
// files or one-sided registration tables in /dev/shm (each region file is
// up to 1 GiB of memory until removed), and removes them. Only Cell's
// files new since before are counted, and a registration table only when
// its process is gone (tests run one package at a time).
func checkShmLeftovers(t *testing.T, before map[string]bool) {
	t.Helper()
	for name := range shmFiles(t) {
		if before[name] || !strings.HasPrefix(name, "cell-") {
			continue
		}
		if rest, ok := strings.CutPrefix(name, "cell-rdma-"); ok {
			pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
			if err == nil && syscall.Kill(pid, 0) == nil {
				continue // a live process's
			}
		}
		t.Errorf("the README's commands left /dev/shm/%s behind", name)
		_ = os.Remove(filepath.Join("/dev/shm", name))
	}
}
