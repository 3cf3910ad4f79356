package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
)

func TestSeriesEnds(t *testing.T) {
	p := benchParams{Duration: time.Second, Interval: 300 * time.Millisecond, phases: []phase{{"a", 400 * time.Millisecond}, {"b", 600 * time.Millisecond}}}
	iv, ph := newSeries(&p)
	ms := time.Millisecond
	if want := []time.Duration{300 * ms, 600 * ms, 900 * ms, 1000 * ms}; !slices.Equal(iv.ends, want) {
		t.Errorf("interval ends %v, want %v", iv.ends, want)
	}
	if want := []time.Duration{400 * ms, 1000 * ms}; !slices.Equal(ph.ends, want) || !slices.Equal(ph.names, []string{"a", "b"}) {
		t.Errorf("phase ends %v %v", ph.ends, ph.names)
	}
	if iv, ph := newSeries(&benchParams{Duration: time.Second}); iv != nil || ph != nil {
		t.Error("series without --interval and --phases")
	}
}

// A window takes what the workers recorded since the last one (and
// resets it), and the clients' counters' change.
func TestCloseWindow(t *testing.T) {
	workers := []*benchWorker{{}, {}}
	for _, w := range workers {
		w.win.counts = make([]windowCounts, 1)
	}
	start := time.Unix(100, 0)
	s := &windowSeries{ends: []time.Duration{time.Second, 2 * time.Second}, names: []string{"before", "during"},
		lastAt: start, lastStats: []client.Stats{{ServerHops: 10, ClientHops: 10, Retries: map[string]uint64{"torn": 1}}}}
	for i := range 100 {
		workers[i%2].win.record(time.Duration(i+1)*time.Microsecond, i == 7)
	}
	s.closeWindow(0, workers, start.Add(time.Second), start, []client.Stats{{ServerHops: 40, ClientHops: 20, Retries: map[string]uint64{"torn": 3, "crc": 0}}})
	workers[1].win.record(5*time.Millisecond, false)
	s.closeWindow(0, workers, start.Add(2*time.Second), start, []client.Stats{{ServerHops: 40, ClientHops: 20}})

	if len(s.out) != 2 {
		t.Fatalf("%d windows", len(s.out))
	}
	a, b := s.out[0], s.out[1]
	if a.Name != "before" || a.Start != 0 || a.End != 1 || a.Ops != 100 || a.Errors != 1 || a.Throughput != 100 ||
		a.ServerSide != 0.75 || a.Retries["torn"] != 2 || len(a.Retries) != 1 {
		t.Errorf("first window %+v", a)
	}
	if p50 := a.P50; p50 < 49*time.Microsecond || p50 > 51*time.Microsecond || a.Max != 100*time.Microsecond {
		t.Errorf("first window p50 %v, max %v", p50, a.Max)
	}
	if b.Name != "during" || b.Start != 1 || b.End != 2 || b.Ops != 1 || b.Errors != 0 || b.ServerSide != -1 || b.Retries != nil ||
		b.P99 < 4900*time.Microsecond || b.P99 > 5100*time.Microsecond {
		t.Errorf("second window %+v", b)
	}
	out := squeeze(render(t, []*table{windowTable("Phases", s.out)}))
	for _, want := range []string{"WINDOW  FROM  TO  OPS  THROUGHPUT  P50  P90  P99  MAX  SERVER-SIDE  ERRORS  RETRIES",
		"before  0.00s  1.00s  100  100/s", "75.0%  1  torn=2", "during  1.00s  2.00s  1  1/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("window table lacks %q:\n%s", want, out)
		}
	}
}
