package failpoint

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestEnableSpec(t *testing.T) {
	disable, err := EnableSpec(" failpoint/spec/a=error(boom) ; failpoint/spec/b=sleep(20ms)")
	if err != nil {
		t.Fatal(err)
	}
	if err := Eval("failpoint/spec/a"); err == nil || err.Error() != "boom" {
		t.Fatalf("a: %v", err)
	}
	began := time.Now()
	if err := Eval("failpoint/spec/b"); err != nil || time.Since(began) < 20*time.Millisecond {
		t.Fatalf("b: %v after %v", err, time.Since(began))
	}
	disable()
	if Enabled("failpoint/spec/a") || Enabled("failpoint/spec/b") {
		t.Fatal("still enabled after disable")
	}
}

func TestEnableSpecRejects(t *testing.T) {
	for _, spec := range []string{"noaction", "=kill", "a=explode", "a=sleep(soon)", "a=kill(", "a=kill()", "a=error(x);b=sleep(-1s)"} {
		if _, err := EnableSpec(spec); err == nil {
			t.Errorf("%q accepted", spec)
		}
		if Enabled("a") {
			t.Errorf("%q left a enabled", spec)
		}
	}
}

// The kill actions run in a child process (this test binary again): kill
// ends it with SIGKILL at the point; kill(PATH) does so only for the
// first process to reach it.
func TestKillAction(t *testing.T) {
	if spec := os.Getenv("FAILPOINT_TEST_SPEC"); spec != "" {
		if _, err := EnableSpec(spec); err != nil {
			os.Exit(3)
		}
		_ = Eval("failpoint/spec/kill")
		os.Exit(0)
	}
	once := filepath.Join(t.TempDir(), "once")
	run := func(spec string) error {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillAction$")
		cmd.Env = append(os.Environ(), "FAILPOINT_TEST_SPEC="+spec)
		return cmd.Run()
	}
	killed := func(err error) bool {
		ee, ok := err.(*exec.ExitError)
		return ok && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	}
	if err := run("failpoint/spec/kill=kill"); !killed(err) {
		t.Fatalf("kill: %v, want SIGKILL", err)
	}
	if err := run("failpoint/spec/kill=kill(" + once + ")"); !killed(err) {
		t.Fatalf("first kill(PATH): %v, want SIGKILL", err)
	}
	if err := run("failpoint/spec/kill=kill(" + once + ")"); err != nil {
		t.Fatalf("second kill(PATH): %v, want a clean exit", err)
	}
	if err := run("failpoint/spec/kill=explode"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("bad spec: %v", err)
	}
}
