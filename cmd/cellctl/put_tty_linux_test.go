package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: its controller and the terminal.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	return ptmx, tty
}

// put KEY on a terminal says that it reads the value there and how to end
// it, before it waits; from a pipe or a file it says nothing.
func TestPutSaysItReadsTheTerminal(t *testing.T) {
	ptmx, tty := openPTY(t)
	// The value typed, and Ctrl-D at the start of a line: end of input.
	if _, err := ptmx.Write([]byte("typed value\n\x04")); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runIO([]string{"put", "k", "--endpoints", deadAddr(t), "--dial-timeout", "200ms"}, tty, &out, &errb)
	lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
	if code != 1 || len(lines) != 2 || lines[0] != `cellctl: reading the value of "k" from standard input; end it with Ctrl-D (or give VALUE, or put KEY < FILE)` {
		t.Fatalf("put on a terminal: exit %d, stderr:\n%s\nwant the hint, then the error of the dead endpoint", code, errb.String())
	}
	code, _, errs := runCellctlIn("piped", "put", "k", "--endpoints", deadAddr(t), "--dial-timeout", "200ms")
	if code != 1 || strings.Contains(errs, "reading the value") {
		t.Errorf("put from a pipe: exit %d, stderr %q; want no hint", code, errs)
	}
}
