//go:build race

package blink

// raceEnabled: the race detector is on (sync.Pool then drops items at random).
const raceEnabled = true
