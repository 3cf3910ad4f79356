//go:build !race

package blink

const raceEnabled = false
