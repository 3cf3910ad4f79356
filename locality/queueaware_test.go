package locality

import (
	"testing"
	"time"
)

// The queue-aware estimate of l_s ("Queue-aware estimate" in doc.go): a
// server that was busy (its replies reported 100µs of queueing) and is idle
// again (its replies report none) is chosen again after a few replies,
// while the paper's estimate (IgnoreServerTimes) still averages the busy
// period's latencies; and a server reporting more queueing than its window
// did is not judged by the report (only ever lower).
func TestQueueAwareEstimate(t *testing.T) {
	const rtt = 11 * us
	// One-sided reads of 11 and 15µs (RTT 11µs, l_r 13µs), m = 5: a
	// client-side search costs m·(l_r − RTT) = 10µs beyond a round trip;
	// an idle server's search nothing, a busy one's 100µs of queueing.
	setup := func(ignore bool) *Estimator {
		s, _ := mustSelector(t, Options{Explore: -1, OutlierK: -1, IgnoreServerTimes: ignore})
		s.ObserveHeight(5)
		e := s.Estimator(1)
		fillReads(e)
		for range 100 {
			e.ObserveServer(rtt+100*us, 100*us, 0)
		}
		return e
	}
	for _, ignore := range []bool{false, true} {
		e := setup(ignore)
		if c := e.Choose(); c.Method != ClientSide {
			t.Fatalf("ignore=%v: a busy server chosen: %+v", ignore, c)
		}
		for range 16 {
			e.ObserveServer(rtt, 0, 0)
		}
		got := e.Choose().Method
		want := ServerSide
		if ignore {
			want = ClientSide // 16 idle replies among 84 busy ones: l_s still ~99µs
		}
		if got != want {
			t.Errorf("ignore=%v: after 16 idle replies %v, want %v", ignore, got, want)
		}
	}

	// Only ever lower: fresh reports of more queueing than the window's do
	// not raise the estimate (the latencies will, through the window).
	s, _ := mustSelector(t, Options{Explore: -1, OutlierK: -1})
	s.ObserveHeight(5)
	e := s.Estimator(1)
	fillReads(e)
	for range 100 {
		e.ObserveServer(rtt, 0, 0)
	}
	e.ObserveServer(rtt, time.Millisecond, 0) // a report out of line with its latency
	if c := e.Choose(); c.Method != ServerSide {
		t.Errorf("one report of queueing above the window's moved an idle server's searches: %+v", c)
	}
}

// fillReads gives e 50 one-sided reads alternating 11 and 15µs.
func fillReads(e *Estimator) {
	for i := range 50 {
		e.ObserveRead(11*us + time.Duration(i%2)*4*us)
	}
}
