package drill

import (
	"fmt"
	"strings"
	"time"
)

// FaultKind is what a fault does to a server.
type FaultKind uint8

const (
	// Kill: SIGKILL (docker kill); healed by starting the server again
	// with the same flags and data.
	Kill FaultKind = iota + 1
	// Pause: SIGSTOP (docker pause); healed by SIGCONT (docker unpause).
	Pause
	// Partition: the server is cut off the network (docker network
	// disconnect); healed by reconnecting it.
	Partition
	// Restart: a clean stop (SIGTERM) and a start again at once (docker
	// restart); the heal has nothing to undo.
	Restart
	// Command: the user's commands (CommandTarget).
	Command
)

var faultNames = [...]string{Kill: "kill", Pause: "pause", Partition: "partition", Restart: "restart", Command: "command"}

func (k FaultKind) String() string {
	if int(k) < len(faultNames) && faultNames[k] != "" {
		return faultNames[k]
	}
	return fmt.Sprintf("fault(%d)", k)
}

// MarshalText writes the fault's name.
func (k FaultKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ParseFaultKind reads kill, pause, partition, restart or command.
func ParseFaultKind(s string) (FaultKind, error) {
	for k, n := range faultNames {
		if n != "" && strings.EqualFold(strings.TrimSpace(s), n) {
			return FaultKind(k), nil
		}
	}
	return 0, fmt.Errorf("%w: fault %q: want kill, pause, partition, restart or command", ErrInvalid, s)
}

// Schedule says when faults strike and heal, as offsets from the start of
// the load: the first at At, healed Duration later; Count faults in all,
// one every Every; the load goes on for Tail after the last heal.
type Schedule struct {
	// At is the time of the first fault. Default 5 s.
	At time.Duration `json:"at_ns"`
	// Duration is the time from each fault to its heal. Default 5 s.
	Duration time.Duration `json:"duration_ns"`
	// Count is the number of faults; 0 runs the load without a fault
	// (a baseline) for At+Tail. Default 1: set NoFault for 0.
	Count int `json:"count"`
	// NoFault runs no fault (Count 0).
	NoFault bool `json:"no_fault,omitempty"`
	// Every is the time from one fault to the next; it exceeds Duration.
	// Default Duration + 10 s.
	Every time.Duration `json:"every_ns"`
	// Tail is the load after the last heal. Default 10 s.
	Tail time.Duration `json:"tail_ns"`
}

// Window is one fault: struck at Fault, healed at Heal (offsets from the
// start of the load).
type Window struct {
	Fault time.Duration `json:"fault_ns"`
	Heal  time.Duration `json:"heal_ns"`
}

// EnsureDefaults fills the zero fields with their defaults.
func (s *Schedule) EnsureDefaults() {
	if s.At == 0 {
		s.At = 5 * time.Second
	}
	if s.Duration == 0 {
		s.Duration = 5 * time.Second
	}
	if s.Count == 0 && !s.NoFault {
		s.Count = 1
	}
	if s.NoFault {
		s.Count = 0
	}
	if s.Every == 0 {
		s.Every = s.Duration + 10*time.Second
	}
	if s.Tail == 0 {
		s.Tail = 10 * time.Second
	}
}

// Validate checks the fields (after EnsureDefaults).
func (s *Schedule) Validate() error {
	switch {
	case s.At < 0:
		return fmt.Errorf("%w: fault at %v: want 0 or more", ErrInvalid, s.At)
	case s.Duration < 0:
		return fmt.Errorf("%w: fault duration %v: want 0 or more", ErrInvalid, s.Duration)
	case s.Count < 0:
		return fmt.Errorf("%w: faults %d: want 0 or more", ErrInvalid, s.Count)
	case s.Count > 1 && s.Every <= s.Duration:
		return fmt.Errorf("%w: fault every %v: want more than the fault duration %v", ErrInvalid, s.Every, s.Duration)
	case s.Tail < 0:
		return fmt.Errorf("%w: tail %v: want 0 or more", ErrInvalid, s.Tail)
	}
	return nil
}

// Windows returns the faults in time order.
func (s *Schedule) Windows() []Window {
	out := make([]Window, s.Count)
	for i := range out {
		f := s.At + time.Duration(i)*s.Every
		out[i] = Window{Fault: f, Heal: f + s.Duration}
	}
	return out
}

// Length is the length of the load: to the last heal, plus Tail.
func (s *Schedule) Length() time.Duration {
	ws := s.Windows()
	if len(ws) == 0 {
		return s.At + s.Tail
	}
	return ws[len(ws)-1].Heal + s.Tail
}
