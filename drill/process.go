package drill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessTarget runs cellserver processes itself and strikes them with
// signals:
//
//	kill       SIGKILL                      heal: start it again (same flags, ports, data)
//	pause      SIGSTOP                      heal: SIGCONT
//	restart    SIGTERM, wait, start again   heal: nothing
//
// Partition needs the network of a container or iptables: use a
// ComposeTarget or a CommandTarget.
type ProcessTarget struct {
	o       ProcessOptions
	servers []*process

	struck struct {
		kind FaultKind
		p    *process
	}
}

// ProcessOptions configure StartProcesses.
type ProcessOptions struct {
	// Binary is the cellserver executable. Required.
	Binary string
	// Servers is the number of servers. Required.
	Servers int
	// Etcd is the region table's etcd (--etcd-endpoints). Required.
	Etcd string
	// Flags are added to every server's command line (--replicas 3, say).
	Flags []string
	// Dir holds each server's data directory and log (<Dir>/<id>/data,
	// <Dir>/<id>.log). Required.
	Dir string
	// IDPrefix starts the servers' IDs (then 1, 2, ...). Default "drill-".
	IDPrefix string
	// ReadyTimeout bounds the wait for a server to serve. Default 60 s.
	ReadyTimeout time.Duration
}

// servingMarker is what cellserver logs once it serves.
const servingMarker = `msg="server: serving"`

// process is one cellserver.
type process struct {
	id, addr string
	args     []string
	log      string // the log file's path

	cmd    *exec.Cmd
	out    *markerWriter
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// StartProcesses starts the servers on free loopback ports and waits
// until each logs that it serves. On error, the servers started are
// stopped.
func StartProcesses(ctx context.Context, o ProcessOptions) (*ProcessTarget, error) {
	if o.IDPrefix == "" {
		o.IDPrefix = "drill-"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.Binary == "" || o.Servers < 1 || o.Etcd == "" || o.Dir == "" {
		return nil, fmt.Errorf("%w: processes: want a binary, servers, etcd and a directory", ErrInvalid)
	}
	t := &ProcessTarget{o: o}
	for i := 1; i <= o.Servers; i++ {
		p, err := t.startOne(ctx, fmt.Sprintf("%s%d", o.IDPrefix, i))
		if err != nil {
			_ = t.Close()
			return nil, err
		}
		t.servers = append(t.servers, p)
	}
	return t, nil
}

func (t *ProcessTarget) startOne(ctx context.Context, id string) (*process, error) {
	data := filepath.Join(t.o.Dir, id, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(4)
		if err != nil {
			return nil, err
		}
		p := &process{id: id, addr: ports[0], log: filepath.Join(t.o.Dir, id+".log")}
		p.args = append([]string{"--server-id", id, "--data-dir", data, "--etcd-endpoints", t.o.Etcd,
			"--listen", ports[0], "--rdma-listen", ports[1], "--metrics-listen", ports[2], "--raft-listen", ports[3]},
			t.o.Flags...)
		err = t.launch(ctx, p)
		if err == nil {
			return p, nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
}

// launch starts p's process and waits until it serves.
func (t *ProcessTarget) launch(ctx context.Context, p *process) error {
	if err := t.start(p); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.o.ReadyTimeout)
	defer cancel()
	select {
	case <-p.out.seen:
		return nil
	case <-p.exited:
		return fmt.Errorf("drill: cellserver %s exited while starting (%v): %s", p.id, p.err, tail(p.log))
	case <-ctx.Done():
		p.signal(syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("drill: cellserver %s not serving: %w: %s", p.id, ctx.Err(), tail(p.log))
	}
}

// start starts p's process, its output appended to its log.
func (t *ProcessTarget) start(p *process) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.out = newMarkerWriter(f, servingMarker)
	p.cmd = exec.Command(t.o.Binary, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("drill: start %s: %w", t.o.Binary, err)
	}
	p.exited = make(chan struct{})
	exited := p.exited
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		removeShm(p.cmd.Process.Pid)
		close(exited)
	}()
	return nil
}

// Servers returns the servers' IDs.
func (t *ProcessTarget) Servers() []string {
	ids := make([]string, len(t.servers))
	for i, p := range t.servers {
		ids[i] = p.id
	}
	return ids
}

// Members returns the servers' IDs and RPC addresses.
func (t *ProcessTarget) Members() []Member {
	ms := make([]Member, len(t.servers))
	for i, p := range t.servers {
		ms[i] = Member{ID: p.id, Addr: p.addr}
	}
	return ms
}

func (t *ProcessTarget) find(id string) (*process, error) {
	i := slices.IndexFunc(t.servers, func(p *process) bool { return p.id == id })
	if i < 0 {
		return nil, fmt.Errorf("%w: no server %q", ErrNoServer, id)
	}
	return t.servers[i], nil
}

// Fault strikes the server id.
func (t *ProcessTarget) Fault(ctx context.Context, kind FaultKind, id string) error {
	p, err := t.find(id)
	if err != nil {
		return err
	}
	if !p.alive() {
		return fmt.Errorf("%w: server %s is not running (%v)", ErrFault, id, p.err)
	}
	switch kind {
	case Kill:
		p.signal(syscall.SIGKILL)
		<-p.exited
	case Pause:
		p.signal(syscall.SIGSTOP)
	case Restart:
		if err := p.stop(); err != nil {
			return fmt.Errorf("%w: restart %s: %w", ErrFault, id, err)
		}
		if err := t.relaunch(ctx, p); err != nil {
			return fmt.Errorf("%w: restart %s: %w", ErrFault, id, err)
		}
	default:
		return fmt.Errorf("%w: local servers cannot %s (use a compose or command target)", ErrInvalid, kind)
	}
	t.struck.kind, t.struck.p = kind, p
	return nil
}

// Heal undoes the last fault: starts a killed server again (without
// waiting for it to serve), resumes a paused one.
func (t *ProcessTarget) Heal(ctx context.Context) error {
	kind, p := t.struck.kind, t.struck.p
	if p == nil {
		return nil
	}
	t.struck.kind, t.struck.p = 0, nil
	switch kind {
	case Kill:
		if err := t.restartSoon(p); err != nil {
			return fmt.Errorf("%w: heal %s: %w", ErrFault, p.id, err)
		}
	case Pause:
		p.signal(syscall.SIGCONT)
	}
	return nil
}

// relaunch starts p again on its ports, waiting until it serves, trying
// again for 5 s while a port is still held.
func (t *ProcessTarget) relaunch(ctx context.Context, p *process) error {
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := t.launch(ctx, p)
		if err == nil || !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restartSoon starts p again without waiting for it to serve; a start
// that fails at once is reported.
func (t *ProcessTarget) restartSoon(p *process) error {
	if err := t.start(p); err != nil {
		return err
	}
	select {
	case <-p.exited:
		return fmt.Errorf("cellserver %s exited at once (%v): %s", p.id, p.err, tail(p.log))
	case <-p.out.seen:
	case <-time.After(200 * time.Millisecond):
	}
	return nil
}

// WaitServing waits until every server serves (after a heal that did not
// wait).
func (t *ProcessTarget) WaitServing(ctx context.Context) error {
	for _, p := range t.servers {
		select {
		case <-p.out.seen:
		case <-p.exited:
			return fmt.Errorf("drill: cellserver %s exited (%v): %s", p.id, p.err, tail(p.log))
		case <-ctx.Done():
			return fmt.Errorf("drill: cellserver %s not serving: %w", p.id, ctx.Err())
		}
	}
	return nil
}

// Close stops every server (a paused one is resumed first): SIGTERM, and
// SIGQUIT then SIGKILL after 20 s. It reports the servers that did not exit cleanly.
func (t *ProcessTarget) Close() error {
	var errs []error
	for _, p := range t.servers {
		if !p.alive() {
			continue
		}
		p.signal(syscall.SIGCONT)
		if err := p.stop(); err != nil {
			errs = append(errs, fmt.Errorf("cellserver %s: %w", p.id, err))
		}
	}
	return errors.Join(errs...)
}

func (p *process) alive() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *process) signal(s syscall.Signal) { _ = p.cmd.Process.Signal(s) }

// stop sends SIGTERM and waits for the exit; after 20 s it quits (a
// goroutine dump) and then kills.
func (p *process) stop() error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("exit after SIGTERM: %w", p.err)
		}
		return nil
	case <-time.After(20 * time.Second):
	}
	// SIGQUIT makes a Go program write its goroutines to its log before
	// it exits: what it was stuck on.
	p.signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
	return fmt.Errorf("still running 20 s after SIGTERM: stopped with SIGQUIT (goroutines in %s)", p.log)
}

// removeShm removes the shared-memory registration table a killed
// server could not remove.
func removeShm(pid int) {
	files, _ := filepath.Glob(fmt.Sprintf("/dev/shm/cell-rdma-%d-*", pid))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

// freePorts returns n loopback addresses free a moment ago.
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]string, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out[i] = l.Addr().String()
	}
	return out, nil
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// markerWriter passes output on to w and closes seen once marker went
// through.
type markerWriter struct {
	w      io.Writer
	marker []byte
	mu     sync.Mutex
	tail   []byte // the last bytes, to find a marker split across writes
	seen   chan struct{}
	found  bool
}

func newMarkerWriter(w io.Writer, marker string) *markerWriter {
	return &markerWriter{w: w, marker: []byte(marker), seen: make(chan struct{})}
}

func (m *markerWriter) Write(b []byte) (int, error) {
	m.mu.Lock()
	if !m.found {
		m.tail = append(m.tail, b...)
		if bytes.Contains(m.tail, m.marker) {
			m.found = true
			close(m.seen)
			m.tail = nil
		} else if keep := len(m.marker); len(m.tail) > keep {
			m.tail = append(m.tail[:0], m.tail[len(m.tail)-keep:]...)
		}
	}
	m.mu.Unlock()
	return m.w.Write(b)
}
