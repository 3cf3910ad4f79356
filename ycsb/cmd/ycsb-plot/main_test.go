package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTablesAndPlots reads testdata (store x: two repeats, 1002 and 3000
// ops/s, two failed reads; store y: one repeat, 500 ops/s) and checks
// the tables' numbers and that the plots are written.
func TestTablesAndPlots(t *testing.T) {
	dir := t.TempDir()
	o := options{in: "testdata", stores: "testdata/stores.tsv", table: filepath.Join(dir, "t.md"), png: dir}
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.table)
	if err != nil {
		t.Fatal(err)
	}
	table := string(b)
	for _, want := range []string{
		"**x**: s1 label; **y**: s2 label",
		"| A | 2001 (1002 / 3000) [4 failed] | 500 (500) | 4.00 |", // median of two is their mean; 2 failed reads per repeat
		"| A | READ | 11 / 41 | 11 / 41 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	for _, f := range []string{"throughput.png", "latency-A.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestReadSpectrum(t *testing.T) {
	steps, err := readSpectrum("testdata/x__A__r1__READ-percentiles.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 4 || steps[1] != (cdfStep{us: 11, fraction: 0.5}) || steps[3].fraction != 1 {
		t.Fatalf("steps = %v", steps)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
