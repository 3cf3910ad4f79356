package test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
)

// The docker-compose cluster of the repository's docker-compose.yml, run by
// a test under a project name of its own: the harness that compose_test.go
// uses, and that drills against containers (docker kill, pause, network
// disconnect by project and service name) can use too.
//
// It needs docker, docker-compose (v1, 1.29) and a reachable engine, and
// skips the test without them. Images are built offline (make images, into
// a temporary staging directory; nothing is pulled). The project gets a
// network of its own (CELL_NET: a /24 no docker network or local interface
// uses) and host ports docker picks on 127.0.0.1, so that it runs beside a
// developer's cluster and beside other tests. Its cleanup runs
// `docker-compose down -v`: containers, network and volumes go.

// Service names of docker-compose.yml.
var (
	composeEtcd  = []string{"etcd1", "etcd2", "etcd3"}
	composeCells = []string{"cell1", "cell2", "cell3", "cell4", "cell5"}
)

const composeClient = "client"

// composeCluster is a running docker-compose project.
type composeCluster struct {
	// Project is the compose project name (celltest<pid>x<test>): containers
	// are <Project>_<service>_1, the network <Project>_cellnet.
	Project string
	// File is the absolute path of docker-compose.yml.
	File string
	// Net is CELL_NET, the first three octets of the project's /24:
	// etcdN is Net.1N, cellN Net.2N, the client Net.30.
	Net string
	// Etcd, Cells and Client are the service names.
	Etcd, Cells []string
	Client      string
	// EtcdEndpoints are the etcd members' client ports as published on
	// the host's loopback (http://127.0.0.1:port), in Etcd's order.
	EtcdEndpoints []string
	// HostReachesServers reports whether this process reaches the
	// servers' advertised addresses (Net.2N:7070): true on a Linux host
	// of the Docker engine, false behind a VM (Docker Desktop). Clients on
	// the host need it; clients in the client container do not.
	HostReachesServers bool

	env []string // docker-compose's environment

	// Extra is a compose file used on top of File (the TLS variant), and
	// Certs the certificates it mounts; both "" without TLS.
	Extra, Certs string
}

// fileArgs are docker-compose's project and file arguments.
func (c *composeCluster) fileArgs() []string {
	a := []string{"-p", c.Project, "-f", c.File}
	if c.Extra != "" {
		a = append(a, "-f", c.Extra)
	}
	return a
}

// composeCerts writes development certificates valid for the compose
// cluster's containers on subnet net (their names, their addresses, and
// the host's loopback for the published ports) into a new directory.
func composeCerts(t *testing.T, net string) string {
	t.Helper()
	hosts := []string{"localhost", "127.0.0.1", "etcd1", "etcd2", "etcd3", "client"}
	for _, n := range []int{11, 12, 13, 21, 22, 23, 24, 25, 30} {
		hosts = append(hosts, fmt.Sprintf("%s.%d", net, n))
	}
	for i := range composeCells {
		hosts = append(hosts, fmt.Sprintf("cell%d", i+1))
	}
	dir := filepath.Join(t.TempDir(), "certs")
	if err := tlsconf.WriteDevCerts(dir, hosts, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// requireDocker skips the test unless docker, docker-compose and a
// reachable Docker engine are present.
func requireDocker(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("compose tests need %s on PATH: %v", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("compose tests need a reachable Docker engine: docker info: %v: %s", err, bytes.TrimSpace(out))
	}
}

// composeUp builds the images, brings the whole docker-compose.yml up under
// a new project and returns once every service is healthy (docker-compose
// up -d waits for the health checks its depends_on name: etcd, then the
// servers, then the client). The cluster is taken down, volumes and all,
// when the test ends.
//
// env is added to docker-compose's environment: the variables
// docker-compose.yml reads (CELL_DEAD_AFTER=8s, say).
func composeUp(t *testing.T, env ...string) *composeCluster {
	t.Helper()
	return composeUpWith(t, false, env...)
}

// composeUpTLS is composeUp of the TLS variant (docker-compose.tls.yml on
// top): certificates from `cellctl certs` for the project's subnet, every
// port on TLS with client certificates required. Certs is their
// directory; EtcdEndpoints are https:// URLs.
func composeUpTLS(t *testing.T, env ...string) *composeCluster {
	t.Helper()
	return composeUpWith(t, true, env...)
}

func composeUpWith(t *testing.T, withTLS bool, env ...string) *composeCluster {
	t.Helper()
	requireDocker(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, strings.ToLower(t.Name()))
	c := &composeCluster{
		Project: fmt.Sprintf("%s%dx%s", composeProjectPrefix, os.Getpid(), name),
		File:    filepath.Join(root, "docker-compose.yml"),
		Etcd:    composeEtcd, Cells: composeCells, Client: composeClient,
	}
	if len(c.Project) > 48 {
		c.Project = c.Project[:48]
	}
	if withTLS {
		c.Extra = filepath.Join(root, "docker-compose.tls.yml")
	}
	reapComposeProjects(t, c.File)
	start := time.Now()
	buildImages(t, root)
	t.Logf("images built in %v", time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	var out string
	for attempt := 1; ; attempt++ {
		c.Net = freeSubnet(t)
		c.env = append(append(os.Environ(), env...), "CELL_NET="+c.Net)
		if withTLS {
			c.Certs = composeCerts(t, c.Net)
			c.env = append(c.env, "CELL_CERTS_DIR="+c.Certs)
		}
		for i := range c.Etcd {
			c.env = append(c.env, fmt.Sprintf("CELL_ETCD%d_PORT=", i+1))
		}
		for i := range c.Cells {
			c.env = append(c.env, fmt.Sprintf("CELL_METRICS%d_PORT=", i+1))
		}
		if attempt == 1 {
			t.Cleanup(func() { c.down(t) })
		}
		out, err = c.composeErr(3*time.Minute, "up", "-d")
		if err == nil {
			break
		}
		// Another project took the subnet between freeSubnet and up.
		if attempt == 3 || !strings.Contains(out, "overlaps") {
			c.logs(t)
			t.Fatalf("docker-compose up: %v\n%s", err, out)
		}
		t.Logf("subnet %s.0/24 taken, trying another: %s", c.Net, out)
		c.down(t)
	}
	for _, svc := range c.Etcd {
		addr := strings.TrimSpace(c.compose(t, "port", svc, "2379"))
		if _, _, err := net.SplitHostPort(addr); err != nil {
			t.Fatalf("docker-compose port %s 2379: %q", svc, addr)
		}
		scheme := "http://"
		if withTLS {
			scheme = "https://"
		}
		c.EtcdEndpoints = append(c.EtcdEndpoints, scheme+addr)
	}
	conn, err := net.DialTimeout("tcp", c.Net+".21:7070", 2*time.Second)
	if err == nil {
		conn.Close()
		c.HostReachesServers = true
	}
	t.Logf("compose project %s up in %v: network %s.0/24, etcd at %v, servers reachable from the host: %v",
		c.Project, time.Since(start).Round(100*time.Millisecond), c.Net, c.EtcdEndpoints, c.HostReachesServers)
	return c
}

// composeProjectPrefix starts the name of every project composeUp makes,
// followed by the test process's pid and "x".
const composeProjectPrefix = "celltest"

// reapComposeProjects takes down the projects that test processes which
// no longer run left behind (a test binary killed by -timeout runs no
// cleanup): their containers, networks and volumes.
func reapComposeProjects(t *testing.T, file string) {
	t.Helper()
	projects := map[string]bool{}
	for _, what := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
		out, err := exec.Command("docker", append(what, "--filter", "label=com.docker.compose.project",
			"--format", `{{.Label "com.docker.compose.project"}}`)...).Output()
		if err != nil {
			continue
		}
		for _, p := range strings.Fields(string(out)) {
			projects[p] = true
		}
	}
	for p := range projects {
		rest, ok := strings.CutPrefix(p, composeProjectPrefix)
		pidStr, _, ok2 := strings.Cut(rest, "x")
		pid, err := strconv.Atoi(pidStr)
		if !ok || !ok2 || err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // not ours, or its test process still runs
		}
		t.Logf("removing compose project %s, left behind by test process %d", p, pid)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, "docker-compose", "-p", p, "-f", file, "down", "-v", "--remove-orphans", "--timeout", "5").CombinedOutput()
		cancel()
		if err != nil {
			t.Logf("docker-compose -p %s down -v: %v\n%s", p, err, out)
		}
	}
}

// buildImages runs make images with a staging directory of the test's.
func buildImages(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-C", root, "images", "IMAGE_DIR="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make images: %v\n%s", err, out)
	}
}

// freeSubnet returns the first three octets of a 172.28.X.0/24 that no
// docker network and no local interface uses.
func freeSubnet(t *testing.T) string {
	t.Helper()
	var used []*net.IPNet
	ids, err := exec.Command("docker", "network", "ls", "-q").Output()
	if err != nil {
		t.Fatalf("docker network ls: %v", err)
	}
	if f := strings.Fields(string(ids)); len(f) > 0 {
		out, err := exec.Command("docker", append([]string{"network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}"}, f...)...).Output()
		if err != nil {
			t.Fatalf("docker network inspect: %v", err)
		}
		for _, s := range strings.Fields(string(out)) {
			if _, n, err := net.ParseCIDR(s); err == nil {
				used = append(used, n)
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				used = append(used, n)
			}
		}
	}
	first := 100 + rand.IntN(150)
	for i := range 150 {
		x := 100 + (first-100+i)%150
		_, mine, _ := net.ParseCIDR(fmt.Sprintf("172.28.%d.0/24", x))
		if !slices.ContainsFunc(used, func(n *net.IPNet) bool { return n.Contains(mine.IP) || mine.Contains(n.IP) }) {
			return fmt.Sprintf("172.28.%d", x)
		}
	}
	t.Fatal("no free 172.28.X.0/24 for the compose network")
	return ""
}

// composeErr runs docker-compose with the project's name, file and
// environment, and returns its combined output.
func (c *composeCluster) composeErr(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-compose", append(c.fileArgs(), args...)...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// compose runs docker-compose and fails the test on error.
func (c *composeCluster) compose(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.composeErr(2*time.Minute, args...)
	if err != nil {
		t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Exec runs a command in a service's container (docker-compose exec -T)
// and returns its exit status and output.
func (c *composeCluster) Exec(t testing.TB, service string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-compose", append(c.fileArgs(), append([]string{"exec", "-T", service}, args...)...)...)
	cmd.Env = c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatalf("docker-compose exec %s %q: %v", service, args, err)
	}
	return 0, out.String(), errb.String()
}

// Cellctl runs cellctl in the client container (which finds the cluster
// through $CELL_ENDPOINTS) and fails the test unless it exits 0.
func (c *composeCluster) Cellctl(t testing.TB, args ...string) string {
	t.Helper()
	code, out, errOut := c.Exec(t, c.Client, append([]string{"cellctl"}, args...)...)
	if code != 0 {
		t.Fatalf("client: cellctl %s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// Container returns the ID of a service's container.
func (c *composeCluster) Container(t testing.TB, service string) string {
	t.Helper()
	id := strings.TrimSpace(c.compose(t, "ps", "-q", service))
	if id == "" {
		t.Fatalf("no container for service %s", service)
	}
	return id
}

// Kill sends SIGKILL to a service's container. Docker's restart policy
// leaves a killed container stopped; Start brings it back.
func (c *composeCluster) Kill(t testing.TB, service string) {
	t.Helper()
	c.compose(t, "kill", "-s", "SIGKILL", service)
}

// Start starts a stopped service's container again (same address, same
// volume) and waits until it is healthy.
func (c *composeCluster) Start(t testing.TB, service string) {
	t.Helper()
	c.compose(t, "start", service)
	c.WaitHealthy(t, service, 90*time.Second)
}

// WaitHealthy polls the health of a service's container until docker
// reports it healthy.
func (c *composeCluster) WaitHealthy(t testing.TB, service string, timeout time.Duration) {
	t.Helper()
	id := c.Container(t, service)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		out, err := exec.Command("docker", "inspect", "-f", "{{.State.Status}}/{{.State.Health.Status}}", id).CombinedOutput()
		last = strings.TrimSpace(string(out))
		if err == nil && last == "running/healthy" {
			return
		}
		if time.Now().After(deadline) {
			c.logs(t, service)
			t.Fatalf("%s not healthy after %v: %s (%v)", service, timeout, last, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Table opens the region table through the published etcd ports; closed
// when the test ends.
func (c *composeCluster) Table(t testing.TB) *regiontable.Etcd {
	t.Helper()
	var tc *tls.Config
	if c.Certs != "" {
		src, err := tlsconf.NewSource(tlsconf.Files{CertFile: filepath.Join(c.Certs, tlsconf.AdminCertFile),
			KeyFile: filepath.Join(c.Certs, tlsconf.AdminKeyFile), TrustedCAFile: filepath.Join(c.Certs, tlsconf.CAFile)})
		if err != nil {
			t.Fatal(err)
		}
		tc = src.ClientConfig("")
	}
	st, err := regiontable.OpenEtcd(c.EtcdEndpoints, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler), TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// logs writes to the test log the servers' own lines (not raft's nor
// etcd's chatter; other errors and lines outside the log format
// included) of the services (all: none named), in time order, the
// last failureLogLines of them: what a reader of a failed run needs to
// follow regions, moves and takeovers.
func (c *composeCluster) logs(t testing.TB, services ...string) {
	// Every line, filtered here: a --tail per service ends where raft's
	// and etcd's chatter filled it, often before the moments a failure
	// needs (a kill late in a drill).
	out, _ := c.composeErr(3*time.Minute, append([]string{"logs", "--no-color", "--timestamps"}, services...)...)
	type line struct{ at, text string }
	var lines []line
	for _, l := range strings.Split(out, "\n") {
		service, rest, ok := strings.Cut(l, "|")
		if !ok {
			continue
		}
		at, text, _ := strings.Cut(strings.TrimSpace(rest), " ")
		slogLine, etcdLine := strings.HasPrefix(text, "time="), strings.HasPrefix(text, "{")
		serverLine := strings.Contains(text, `msg="server:`)
		otherError := strings.Contains(text, "level=ERROR") && !strings.Contains(text, `msg="raft:`)
		if !(serverLine || otherError || !slogLine && !etcdLine) {
			continue
		}
		lines = append(lines, line{at, strings.TrimSpace(service) + " " + text})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at < lines[j].at })
	lines = lines[max(0, len(lines)-failureLogLines):]
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	t.Logf("servers' logs, last %d lines (CELL_COMPOSE_LOGS=dir keeps all):\n%s", len(lines), b.String())
}

// failureLogLines bounds the log lines a failed compose test prints.
const failureLogLines = 600

// down removes the project: containers, network, volumes. It is the
// cleanup of composeUp, and checks that nothing of the project is left.
func (c *composeCluster) down(t testing.TB) {
	if t.Failed() {
		c.logs(t)
	}
	if dir := os.Getenv("CELL_COMPOSE_LOGS"); dir != "" {
		// Every line of every service, for a reader of a failed run.
		out, _ := c.composeErr(3*time.Minute, "logs", "--no-color", "--timestamps")
		name := filepath.Join(dir, c.Project+".log")
		if err := os.WriteFile(name, []byte(out), 0o644); err != nil {
			t.Errorf("CELL_COMPOSE_LOGS: %v", err)
		} else {
			t.Logf("docker-compose logs written to %s", name)
		}
	}
	if out, err := c.composeErr(3*time.Minute, "down", "-v", "--remove-orphans", "--timeout", "20"); err != nil {
		t.Errorf("docker-compose down -v: %v\n%s", err, out)
	}
	label := "label=com.docker.compose.project=" + c.Project
	for _, what := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}, {"network", "ls", "-q"}} {
		out, err := exec.Command("docker", append(what, "--filter", label)...).Output()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("docker %s --filter %s after down: %q, %v", strings.Join(what, " "), label, out, err)
		}
	}
}
