//go:build !linux

package main

import (
	"fmt"
	"time"
)

func processCPU(int) (time.Duration, error) {
	return 0, fmt.Errorf("process CPU time is read from /proc (Linux only)")
}

func selfCPU() (time.Duration, error) { return 0, fmt.Errorf("CPU time: Linux only") }

func threadsCPU(int) (time.Duration, error) {
	return 0, fmt.Errorf("thread CPU times are read from /proc (Linux only)")
}
