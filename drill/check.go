package drill

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Loss is a key whose final read the history does not allow: an
// acknowledged write was lost, or the key holds a value never written.
type Loss struct {
	Key string `json:"key"`
	// Got is what the final read returned ("" and Found false: absent).
	Got   string `json:"got,omitempty"`
	Found bool   `json:"found"`
	// Allowed lists what the history allows the key to hold ("<absent>"
	// for a delete or the initial state).
	Allowed []string `json:"allowed"`
}

func (l Loss) String() string {
	got := "<absent>"
	if l.Found {
		got = fmt.Sprintf("%q", l.Got)
	}
	return fmt.Sprintf("%s = %s, want one of %s", l.Key, got, strings.Join(l.Allowed, ", "))
}

// absentValue names the absent state in Loss.Allowed.
const absentValue = "<absent>"

// CheckDurability checks the final read of every key (the last OK get of
// StageVerify) against the writes before it (see the package comment) and
// returns the keys whose read the history does not allow, by key. Keys
// without a final read are not checked: Run fails before when a key cannot
// be read.
func CheckDurability(ops []Op) []Loss {
	type write struct {
		call, ret time.Duration
		found     bool // a put: the key holds value afterwards
		value     string
		acked     bool
	}
	writes := map[string][]write{}
	final := map[string]Op{}
	for _, op := range ops {
		switch {
		case op.Stage == StageVerify && op.Kind == Get && op.Outcome == OK:
			if f, ok := final[op.Key]; !ok || f.Call < op.Call {
				final[op.Key] = op
			}
		case op.writes() && op.Outcome != Failed:
			writes[op.Key] = append(writes[op.Key], write{call: op.Call, ret: op.Return, found: op.Kind == Put, value: op.Value, acked: op.Outcome == OK})
		}
	}
	var out []Loss
	for key, f := range final {
		ws := writes[key]
		// A write is superseded when an acknowledged write was invoked
		// after it returned and returned before the read was invoked:
		// that one is linearized between the two. An unknown write never
		// returned, so it is never superseded. The initial state (absent)
		// is superseded by any acknowledged write before the read.
		lastAckCall := time.Duration(-1)
		for _, w := range ws {
			if w.acked && w.ret < f.Call {
				lastAckCall = max(lastAckCall, w.call)
			}
		}
		var allowed []string
		ok := false
		allow := func(found bool, value string) {
			v := absentValue
			if found {
				v = fmt.Sprintf("%q", value)
			}
			if !slices.Contains(allowed, v) {
				allowed = append(allowed, v)
			}
			if found == f.Found && (!found || value == f.Value) {
				ok = true
			}
		}
		if lastAckCall < 0 {
			allow(false, "")
		}
		for _, w := range ws {
			if w.call > f.Return {
				continue // invoked after the read returned
			}
			if !w.acked || w.ret >= lastAckCall {
				allow(w.found, w.value)
			}
		}
		if !ok {
			out = append(out, Loss{Key: key, Got: f.Value, Found: f.Found, Allowed: allowed})
		}
	}
	slices.SortFunc(out, func(a, b Loss) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Verdict is porcupine's answer on a history.
type Verdict string

const (
	Linearizable    Verdict = "linearizable"
	NotLinearizable Verdict = "not linearizable"
	// CheckTimedOut: porcupine's Unknown; it counts as a failure.
	CheckTimedOut Verdict = "unknown (check timed out)"
)

// Linearizability is the result of CheckLinearizable.
type Linearizability struct {
	Verdict Verdict `json:"verdict"`
	// Keys are the offending keys (not linearizable, or not decided in
	// time), at most 20.
	Keys []string `json:"keys,omitempty"`
	// Visualization is the file holding porcupine's HTML visualisation of
	// the first offending key's history, if one was written.
	Visualization string `json:"visualization,omitempty"`
	// Took is the time the check took.
	Took time.Duration `json:"took_ns"`
}

// OK reports whether the history is linearizable.
func (l Linearizability) OK() bool { return l.Verdict == Linearizable }

// maxOffending bounds Linearizability.Keys.
const maxOffending = 20

// CheckLinearizable checks ops per key with porcupine within timeout.
// When the history is not linearizable (or the check does not finish), it
// finds the offending keys, one check per key, and writes the HTML
// visualisation of the first into dir (when dir is not ""), as
// drill-<key>.html.
func CheckLinearizable(ops []Op, timeout time.Duration, dir string) (Linearizability, error) {
	start := time.Now()
	history := porcupineHistory(ops)
	res, _ := porcupine.CheckOperationsVerbose(Model, history, timeout)
	out := Linearizability{Verdict: verdict(res)}
	if res == porcupine.Ok {
		out.Took = time.Since(start)
		return out, nil
	}
	// Find the offending keys, each checked alone within what is left of
	// the timeout (at least a second each).
	single := Model
	single.Partition = nil
	deadline := start.Add(2 * timeout)
	var first porcupine.LinearizationInfo
	for _, part := range partitionByKey(history) {
		left := max(time.Until(deadline), time.Second)
		r, info := porcupine.CheckOperationsVerbose(single, part, left)
		if r == porcupine.Ok {
			continue
		}
		if len(out.Keys) == 0 {
			first = info
		}
		out.Keys = append(out.Keys, part[0].Input.(modelInput).Key)
		if len(out.Keys) == maxOffending {
			break
		}
	}
	if len(out.Keys) > 0 && dir != "" {
		path := filepath.Join(dir, "drill-"+fileSafe(out.Keys[0])+".html")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return out, fmt.Errorf("drill: visualisation: %w", err)
		}
		if err := porcupine.VisualizePath(single, first, path); err != nil {
			return out, fmt.Errorf("drill: visualisation: %w", err)
		}
		out.Visualization = path
	}
	out.Took = time.Since(start)
	return out, nil
}

func verdict(r porcupine.CheckResult) Verdict {
	switch r {
	case porcupine.Ok:
		return Linearizable
	case porcupine.Illegal:
		return NotLinearizable
	}
	return CheckTimedOut
}

// fileSafe replaces the characters of s that do not belong in a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ':' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}
