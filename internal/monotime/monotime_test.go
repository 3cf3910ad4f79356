package monotime

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Now is CLOCK_MONOTONIC, the clock other processes on the host read: it
// lies between two readings of the system call.
func TestNowIsClockMonotonic(t *testing.T) {
	var a, b unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &a); err != nil {
		t.Fatal(err)
	}
	n := Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &b); err != nil {
		t.Fatal(err)
	}
	if n < a.Nano() || n > b.Nano() {
		t.Fatalf("Now() = %d, not within CLOCK_MONOTONIC readings [%d, %d]", n, a.Nano(), b.Nano())
	}
	t0 := Now()
	time.Sleep(10 * time.Millisecond)
	if d := time.Duration(Now() - t0); d < 10*time.Millisecond {
		t.Fatalf("10 ms of sleep measured %v", d)
	}
}

func BenchmarkNow(b *testing.B) {
	for b.Loop() {
		_ = Now()
	}
}
