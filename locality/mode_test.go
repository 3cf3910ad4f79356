package locality

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParseMode(t *testing.T) {
	tests := []struct {
		in   string
		want Mode
		str  string
	}{
		{"adaptive", Mode{Kind: Adaptive}, "adaptive"},
		{"server", Mode{Kind: ServerOnly}, "server"},
		{"client", Mode{Kind: ClientOnly}, "client"},
		{" Server ", Mode{Kind: ServerOnly}, "server"},
		{"ratio=40", RatioMode(40), "ratio=40"},
		{"ratio=12.5", RatioMode(12.5), "ratio=12.5"},
		{"ratio=0", RatioMode(0), "ratio=0"},
		{"ratio=100%", RatioMode(100), "ratio=100"},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseMode(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.str {
			t.Errorf("ParseMode(%q).String() = %q, want %q", tt.in, s, tt.str)
		}
		if back, err := ParseMode(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %+v, %v", tt.in, back, err)
		}
	}
	for _, bad := range []string{"", "fast", "ratio", "ratio=", "ratio=x", "ratio=-1", "ratio=100.5", "ratio=NaN", "server=1"} {
		if m, err := ParseMode(bad); !errors.Is(err, ErrInvalidMode) {
			t.Errorf("ParseMode(%q) = %+v, %v; want ErrInvalidMode", bad, m, err)
		}
	}
}

func TestModeText(t *testing.T) {
	var cfg struct{ Mode Mode }
	if err := json.Unmarshal([]byte(`{"Mode":"ratio=35"}`), &cfg); err != nil || cfg.Mode != RatioMode(35) {
		t.Fatalf("unmarshal: %+v, %v", cfg, err)
	}
	b, err := json.Marshal(cfg)
	if err != nil || string(b) != `{"Mode":"ratio=35"}` {
		t.Fatalf("marshal: %s, %v", b, err)
	}
	if _, err := json.Marshal(struct{ M Mode }{RatioMode(101)}); !errors.Is(err, ErrInvalidMode) {
		t.Errorf("marshal of an invalid mode: %v, want ErrInvalidMode", err)
	}
}

func TestEnumStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{ServerSide.String(), "server"},
		{ClientSide.String(), "client"},
		{Method(7).String(), "Method(7)"},
		{Adaptive.String(), "adaptive"},
		{Ratio.String(), "ratio"},
		{ModeKind(9).String(), "ModeKind(9)"},
	} {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestFixedModes(t *testing.T) {
	const n = 100_000
	tests := []struct {
		mode           Mode
		minSrv, maxSrv int // bounds on server-side choices out of n
	}{
		{Mode{Kind: ServerOnly}, n, n},
		{Mode{Kind: ClientOnly}, 0, 0},
		{RatioMode(0), 0, 0},
		{RatioMode(100), n, n},
		// Exactly the ratio, whatever the starting phase.
		{RatioMode(30), 30_000, 30_000},
		{RatioMode(12.5), 12_500, 12_500},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			s, _ := mustSelector(t, Options{Mode: tt.mode})
			e := s.Estimator(3)
			// Estimates that favour the other method must not matter.
			e.ObserveRead(10 * us)
			fillRead(e, 11*us, 20)
			fillServer(e, 12*us, 20)
			d := countChoices(e, n)
			if int(d.Server) < tt.minSrv || int(d.Server) > tt.maxSrv || d.Explore != 0 {
				t.Errorf("%v: %+v, want server in [%d, %d], no exploration", tt.mode, d, tt.minSrv, tt.maxSrv)
			}
			if snap := e.Snapshot(); snap.LS.Samples != 20 {
				t.Errorf("estimates not kept in fixed mode: %+v", snap.LS)
			}
		})
	}
}
