package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrNoResults is returned when -in holds no run output of the stores.
var ErrNoResults = errors.New("no run outputs")

// store is one column of the comparison.
type store struct {
	name, label string
}

// opStats are go-ycsb's measurements of one operation kind in one run.
type opStats struct {
	count         int64
	ops, p50, p99 float64 // ops/s; µs
}

// runResult is one cell-ycsb run: a store, a workload, a repeat.
type runResult struct {
	ops map[string]opStats   // by go-ycsb's operation name (READ, TOTAL, ...)
	cdf map[string][]cdfStep // latency spectra by operation name
}

// cdfStep is one line of an HdrHistogram percentile spectrum.
type cdfStep struct {
	us, fraction float64
}

// results are every run read, by store, workload and repeat.
type results struct {
	stores    []store
	workloads []string                           // sorted
	runs      map[string]map[string][]*runResult // store → workload → repeats in order
}

// readStores reads the -stores file.
func readStores(path string) ([]store, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []store
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		name, label, ok := strings.Cut(line, "\t")
		if !ok {
			return nil, fmt.Errorf("%s: %q: want name<TAB>label", path, line)
		}
		out = append(out, store{name: name, label: label})
	}
	return out, nil
}

// runName matches a run output's file name.
var runName = regexp.MustCompile(`^(.+)__(.+)__r(\d+)\.txt$`)

// readResults reads every run output of the stores in dir.
func readResults(dir string, stores []store) (*results, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	res := &results{stores: stores, runs: map[string]map[string][]*runResult{}}
	known := map[string]bool{}
	for _, s := range stores {
		known[s.name] = true
	}
	type found struct {
		store, workload string
		rep             int
		path            string
	}
	var files []found
	for _, e := range entries {
		m := runName.FindStringSubmatch(e.Name())
		if m == nil || !known[m[1]] {
			continue
		}
		rep, _ := strconv.Atoi(m[3])
		files = append(files, found{m[1], m[2], rep, filepath.Join(dir, e.Name())})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoResults)
	}
	slices.SortFunc(files, func(a, b found) int { return a.rep - b.rep })
	for _, f := range files {
		r, err := readRun(f.path)
		if err != nil {
			return nil, err
		}
		if res.runs[f.store] == nil {
			res.runs[f.store] = map[string][]*runResult{}
		}
		res.runs[f.store][f.workload] = append(res.runs[f.store][f.workload], r)
		if !slices.Contains(res.workloads, f.workload) {
			res.workloads = append(res.workloads, f.workload)
		}
	}
	slices.Sort(res.workloads)
	return res, nil
}

// readRun reads one run output and its percentile files.
func readRun(path string) (*runResult, error) {
	ops, err := readMeasurements(path)
	if err != nil {
		return nil, err
	}
	r := &runResult{ops: ops, cdf: map[string][]cdfStep{}}
	prefix := strings.TrimSuffix(path, ".txt") + "__"
	for op := range ops {
		steps, err := readSpectrum(prefix + op + "-percentiles.txt")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r.cdf[op] = steps
	}
	return r, nil
}

// readMeasurements parses the last JSON line of a run output: go-ycsb's
// final measurements, one object per operation kind with string fields.
func readMeasurements(path string) (map[string]opStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "[{") {
			last = line
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if last == "" {
		return nil, fmt.Errorf("%s: no measurements (did the run fail?)", path)
	}
	var rows []map[string]string
	if err := json.Unmarshal([]byte(last), &rows); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]opStats, len(rows))
	for _, row := range rows {
		var s opStats
		var perr error
		num := func(k string) float64 {
			v, err := strconv.ParseFloat(row[k], 64)
			if err != nil && perr == nil {
				perr = fmt.Errorf("%s: %s %s=%q: %w", path, row["Operation"], k, row[k], err)
			}
			return v
		}
		s.count = int64(num("Count"))
		s.ops, s.p50, s.p99 = num("OPS"), num("50th(us)"), num("99th(us)")
		if perr != nil {
			return nil, perr
		}
		out[row["Operation"]] = s
	}
	return out, nil
}

// readSpectrum parses an HdrHistogram percentile spectrum: "value
// percentile count 1/(1-percentile)" lines, a header and a footer.
func readSpectrum(path string) ([]cdfStep, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var steps []cdfStep
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		us, err1 := strconv.ParseFloat(f[0], 64)
		frac, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil {
			continue // the header
		}
		steps = append(steps, cdfStep{us: us, fraction: frac})
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%s: no percentile lines", path)
	}
	return steps, nil
}

// median returns the median of vs (the mean of the middle two for an
// even count), 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// values returns f of op's stats in each repeat of store's workload
// where op was measured.
func (r *results) values(store, workload, op string, f func(opStats) float64) []float64 {
	var out []float64
	for _, rn := range r.runs[store][workload] {
		if s, ok := rn.ops[op]; ok {
			out = append(out, f(s))
		}
	}
	return out
}

// opsOf returns the operation kinds measured in workload by any store,
// sorted, TOTAL and error kinds left out.
func (r *results) opsOf(workload string) []string {
	var ops []string
	for _, s := range r.stores {
		for _, rn := range r.runs[s.name][workload] {
			for op := range rn.ops {
				if op != "TOTAL" && !strings.HasSuffix(op, "_ERROR") && !slices.Contains(ops, op) {
					ops = append(ops, op)
				}
			}
		}
	}
	slices.Sort(ops)
	return ops
}

// errorsOf returns the operations that failed in store's workload,
// summed over the repeats.
func (r *results) errorsOf(store, workload string) int64 {
	var n int64
	for _, rn := range r.runs[store][workload] {
		for op, s := range rn.ops {
			if strings.HasSuffix(op, "_ERROR") {
				n += s.count
			}
		}
	}
	return n
}
