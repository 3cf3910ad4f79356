// Package failpoint lets tests stop or fail code at named points.
//
// Code marks a point with Eval(name) and acts on the error it returns
// (usually by returning it). A point does nothing until a test enables it
// with Enable, which installs a hook: the hook runs every time the point is
// reached, may block (to pause the code there while the test looks around)
// and returns the error Eval passes on (nil to let the code go on).
//
// Disabled points cost one atomic load. Names are package-qualified
// strings, declared as constants next to the code that evaluates them
// ("server/split/froze"), so that tests and code agree on them.
//
// Failpoints are process-wide: tests that enable them must not run in
// parallel with other tests reaching the same points.
package failpoint

import (
	"sync"
	"sync/atomic"
)

// Hook runs when an enabled failpoint is reached; its error is what Eval
// returns.
type Hook func() error

var (
	enabled atomic.Int32 // number of enabled points: Eval's fast path
	mu      sync.RWMutex
	hooks   = map[string]Hook{}
)

// Eval runs the hook of the failpoint name if a test enabled it and
// returns its error; it returns nil at once when the point is disabled.
func Eval(name string) error {
	if enabled.Load() == 0 {
		return nil
	}
	mu.RLock()
	h := hooks[name]
	mu.RUnlock()
	if h == nil {
		return nil
	}
	return h()
}

// Enable installs hook at the failpoint name, replacing any hook there, and
// returns the function that disables it again (idempotent).
func Enable(name string, hook Hook) (disable func()) {
	mu.Lock()
	if _, ok := hooks[name]; !ok {
		enabled.Add(1)
	}
	hooks[name] = hook
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			if _, ok := hooks[name]; ok {
				delete(hooks, name)
				enabled.Add(-1)
			}
			mu.Unlock()
		})
	}
}

// Enabled reports whether the failpoint name has a hook.
func Enabled(name string) bool {
	if enabled.Load() == 0 {
		return false
	}
	mu.RLock()
	defer mu.RUnlock()
	_, ok := hooks[name]
	return ok
}
