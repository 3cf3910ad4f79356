package failpoint

import (
	"errors"
	"sync"
	"testing"
)

func TestDisabledIsNil(t *testing.T) {
	if err := Eval("failpoint/test/none"); err != nil {
		t.Fatal(err)
	}
	if Enabled("failpoint/test/none") {
		t.Fatal("enabled without Enable")
	}
}

func TestEnableDisable(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	disable := Enable("failpoint/test/a", func() error { calls++; return boom })
	if err := Eval("failpoint/test/a"); !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("Eval = %v after %d calls", err, calls)
	}
	if err := Eval("failpoint/test/b"); err != nil {
		t.Fatalf("other point: %v", err)
	}
	// Replacing a hook keeps one enabled point.
	disable2 := Enable("failpoint/test/a", func() error { return nil })
	if err := Eval("failpoint/test/a"); err != nil || enabled.Load() != 1 {
		t.Fatalf("replaced hook: %v, %d enabled", err, enabled.Load())
	}
	disable()
	disable()
	disable2()
	if err := Eval("failpoint/test/a"); err != nil || enabled.Load() != 0 {
		t.Fatalf("after disable: %v, %d enabled", err, enabled.Load())
	}
}

// A hook may block: the code stays paused at the point until released.
func TestPause(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	defer Enable("failpoint/test/pause", func() error {
		reached <- struct{}{}
		<-release
		return nil
	})()
	var wg sync.WaitGroup
	wg.Add(1)
	passed := false
	go func() {
		defer wg.Done()
		_ = Eval("failpoint/test/pause")
		passed = true
	}()
	<-reached
	close(release)
	wg.Wait()
	if !passed {
		t.Fatal("code did not go on")
	}
}
