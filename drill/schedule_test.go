package drill

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestScheduleWindows(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name   string
		in     Schedule
		want   []Window
		length time.Duration
	}{
		{"defaults", Schedule{}, []Window{{5 * s, 10 * s}}, 20 * s},
		{"at and heal", Schedule{At: 10 * s, Duration: 15 * s}, []Window{{10 * s, 25 * s}}, 35 * s},
		{"repeated", Schedule{At: 2 * s, Duration: 4 * s, Count: 3, Every: 15 * s, Tail: 5 * s},
			[]Window{{2 * s, 6 * s}, {17 * s, 21 * s}, {32 * s, 36 * s}}, 41 * s},
		{"no fault", Schedule{NoFault: true, At: 3 * s, Tail: 4 * s}, []Window{}, 7 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.EnsureDefaults()
			if err := tc.in.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tc.in.Windows(); !slices.Equal(got, tc.want) {
				t.Errorf("windows %v, want %v", got, tc.want)
			}
			if got := tc.in.Length(); got != tc.length {
				t.Errorf("length %v, want %v", got, tc.length)
			}
		})
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, s := range []Schedule{
		{Count: 2, Duration: 5 * time.Second, Every: 5 * time.Second},
		{At: -time.Second},
		{Count: -1},
	} {
		s.EnsureDefaults()
		if err := s.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", s, err)
		}
	}
}

func TestParseMix(t *testing.T) {
	for in, want := range map[string]Mix{
		"ycsb-a":                  {Get: 50, Put: 50},
		"YCSB-B":                  {Get: 95, Put: 5},
		"get=60,put=30,delete=10": {Get: 60, Put: 30, Delete: 10},
		"read=50, update=50":      {Get: 50, Put: 50},
	} {
		got, err := ParseMix(in)
		if err != nil || got != want {
			t.Errorf("ParseMix(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"ycsb-z", "get=50", "get=50,put=60,delete=-10", "scan=100"} {
		if _, err := ParseMix(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseMix(%q): %v, want ErrInvalid", in, err)
		}
	}
}

func TestParseFaultKind(t *testing.T) {
	for _, k := range []FaultKind{Kill, Pause, Partition, Restart, Command} {
		got, err := ParseFaultKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseFaultKind(%q) = %v, %v", k, got, err)
		}
	}
	if _, err := ParseFaultKind("explode"); !errors.Is(err, ErrInvalid) {
		t.Errorf("explode: %v", err)
	}
}
