package locality

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Method is how one meganode hop of a search is performed.
type Method uint8

const (
	// ServerSide sends the search to the server that holds the meganode
	// (one RPC, served by the server's CPU).
	ServerSide Method = iota
	// ClientSide traverses the meganode with one-sided reads (m reads,
	// served by the server's NIC only).
	ClientSide
)

// String returns "server" or "client".
func (m Method) String() string {
	switch m {
	case ServerSide:
		return "server"
	case ClientSide:
		return "client"
	default:
		return fmt.Sprintf("Method(%d)", uint8(m))
	}
}

// other returns the method that is not m.
func (m Method) other() Method {
	if m == ServerSide {
		return ClientSide
	}
	return ServerSide
}

// Choice is the decision for one meganode hop.
type Choice struct {
	// Method is the method to use.
	Method Method
	// Explore is set when the adaptive rule picked Method although it
	// estimated it to be the worse one (randomised exploration).
	Explore bool
}

// ModeKind is the policy of a Mode.
type ModeKind uint8

const (
	// Adaptive is the paper's rule (the default).
	Adaptive ModeKind = iota
	// ServerOnly always chooses ServerSide.
	ServerOnly
	// ClientOnly always chooses ClientSide.
	ClientOnly
	// Ratio sends a fixed percentage of the searches server-side, spread
	// evenly over each connection's searches.
	Ratio
)

// String returns the kind's name as ParseMode accepts it ("ratio" for Ratio).
func (k ModeKind) String() string {
	switch k {
	case Adaptive:
		return "adaptive"
	case ServerOnly:
		return "server"
	case ClientOnly:
		return "client"
	case Ratio:
		return "ratio"
	default:
		return fmt.Sprintf("ModeKind(%d)", uint8(k))
	}
}

// Mode is the selector's policy. The zero value is Adaptive.
type Mode struct {
	Kind ModeKind
	// ServerPercent is, for Ratio, the percentage of searches done
	// server-side, in [0, 100]. Ignored by the other kinds.
	ServerPercent float64
}

// RatioMode returns the fixed-ratio mode with p percent server-side.
func RatioMode(p float64) Mode { return Mode{Kind: Ratio, ServerPercent: p} }

// ParseMode parses "adaptive", "server", "client" or "ratio=P", where P is
// the percentage of server-side searches, a decimal number in [0, 100]
// ("ratio=40", "ratio=12.5"). Case and surrounding space are ignored.
func ParseMode(s string) (Mode, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "adaptive":
		return Mode{Kind: Adaptive}, nil
	case "server":
		return Mode{Kind: ServerOnly}, nil
	case "client":
		return Mode{Kind: ClientOnly}, nil
	}
	p, ok := strings.CutPrefix(t, "ratio=")
	if !ok {
		return Mode{}, fmt.Errorf("%w: %q (want adaptive, server, client or ratio=P)", ErrInvalidMode, s)
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(p), "%"), 64)
	if err != nil {
		return Mode{}, fmt.Errorf("%w: %q: percentage is not a number", ErrInvalidMode, s)
	}
	m := RatioMode(v)
	if err := m.Validate(); err != nil {
		return Mode{}, err
	}
	return m, nil
}

// String returns the form ParseMode accepts.
func (m Mode) String() string {
	if m.Kind == Ratio {
		return "ratio=" + strconv.FormatFloat(m.ServerPercent, 'f', -1, 64)
	}
	return m.Kind.String()
}

// Validate reports whether m is a known kind with a percentage in range.
func (m Mode) Validate() error {
	switch m.Kind {
	case Adaptive, ServerOnly, ClientOnly:
		return nil
	case Ratio:
		if math.IsNaN(m.ServerPercent) || m.ServerPercent < 0 || m.ServerPercent > 100 {
			return fmt.Errorf("%w: ratio %v%% not in [0, 100]", ErrInvalidMode, m.ServerPercent)
		}
		return nil
	default:
		return fmt.Errorf("%w: kind %d", ErrInvalidMode, uint8(m.Kind))
	}
}

// MarshalText implements encoding.TextMarshaler (flags, JSON, config).
func (m Mode) MarshalText() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseMode.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
