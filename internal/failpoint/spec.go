package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// EnableSpec enables the failpoints a spec names, for tests that strike a
// process they started (cellserver reads the environment variable
// CELL_TESTING_FAILPOINTS). A spec is a list of name=action separated by
// semicolons:
//
//	server/split/copied=kill;server/split/target/began=sleep(2s)
//
// Actions:
//
//	kill        SIGKILL this process when the point is reached (a kill -9
//	            at exactly that step: nothing after it runs, no clean-up)
//	kill(PATH)  the same, once among all processes given PATH: the first
//	            to reach the point creates PATH and dies; the others, and
//	            that one restarted, go on
//	sleep(DUR)  pause there for DUR (time.ParseDuration), then go on
//	error(TEXT) fail there with TEXT
//
// It returns the function that disables them again.
func EnableSpec(spec string) (disable func(), err error) {
	var disables []func()
	disableAll := func() {
		for _, d := range disables {
			d()
		}
	}
	for item := range strings.SplitSeq(spec, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			disableAll()
			return nil, fmt.Errorf("failpoint: %q: want name=action", item)
		}
		hook, err := parseAction(action)
		if err != nil {
			disableAll()
			return nil, fmt.Errorf("failpoint: %s: %w", name, err)
		}
		disables = append(disables, Enable(strings.TrimSpace(name), hook))
	}
	return disableAll, nil
}

// parseAction returns the hook of one action of a spec.
func parseAction(action string) (Hook, error) {
	action = strings.TrimSpace(action)
	verb, arg, hasArg := action, "", false
	if i := strings.IndexByte(action, '('); i >= 0 {
		if !strings.HasSuffix(action, ")") {
			return nil, fmt.Errorf("action %q: unbalanced parenthesis", action)
		}
		verb, arg, hasArg = action[:i], action[i+1:len(action)-1], true
	}
	switch verb {
	case "kill":
		if !hasArg {
			return func() error { killSelf(); return nil }, nil
		}
		if arg == "" {
			return nil, errors.New("kill(): want a path")
		}
		return func() error {
			f, err := os.OpenFile(arg, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return nil // another process (or this one, before a restart) took the kill
			}
			f.Close()
			killSelf()
			return nil
		}, nil
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("sleep(%s): want a duration", arg)
		}
		return func() error { time.Sleep(d); return nil }, nil
	case "error":
		if arg == "" {
			arg = "failpoint"
		}
		err := errors.New(arg)
		return func() error { return err }, nil
	}
	return nil, fmt.Errorf("unknown action %q (want kill, kill(PATH), sleep(DUR), error(TEXT))", action)
}

// killSelf sends SIGKILL to this process and waits for it to land.
func killSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	select {}
}
