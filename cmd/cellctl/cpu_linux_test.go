package main

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	line := "1234 (cell server (x)) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 12 0 100 0 0\n"
	d, err := parseProcStat(line)
	if err != nil || d != 3250*time.Millisecond {
		t.Errorf("parseProcStat = %v, %v; want 3.25s", d, err)
	}
	for _, bad := range []string{"", "1234 x S 1", "1 (a) S 1 2 3", "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 1 0"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) succeeded", bad)
		}
	}
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Errorf("own CPU time: %v", err)
	}
	if _, err := selfCPU(); err != nil {
		t.Error(err)
	}
}
