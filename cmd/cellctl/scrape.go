package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// serverMetrics are the counters cellctl status reads from a server's
// Prometheus endpoint (--metrics): the region metadata does not carry them.
type serverMetrics struct {
	Addr     string            `json:"addr"`
	Region   uint32            `json:"region"`
	Backing  string            `json:"backing,omitempty"`
	Ops      map[string]uint64 `json:"ops"`       // answered OK (NotFound included), by op
	Errors   uint64            `json:"errors"`    // answered with any other status
	OneSided uint64            `json:"one_sided"` // tcp one-sided read requests served
}

// scrapeMetrics fetches and parses http://addr/metrics.
func scrapeMetrics(ctx context.Context, addr string) (*serverMetrics, error) {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/")
	if !strings.HasSuffix(url, "/metrics") {
		url += "/metrics"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--metrics %s: %s", addr, resp.Status)
	}
	m, err := parseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	m.Addr = addr
	return m, nil
}

// parseMetrics reads the few samples status shows from Prometheus' text
// exposition format.
func parseMetrics(r io.Reader) (*serverMetrics, error) {
	m := &serverMetrics{Ops: map[string]uint64{}}
	sawRegion := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		switch name {
		case "cell_server_ops_total":
			if st := labels["status"]; st == "OK" || st == "NotFound" {
				m.Ops[labels["op"]] += uint64(value)
			} else {
				m.Errors += uint64(value)
			}
		case "cell_server_region_bytes":
			id, err := strconv.ParseUint(labels["region"], 10, 32)
			if err == nil {
				m.Region, m.Backing, sawRegion = uint32(id), labels["backing"], true
			}
		case "cell_server_onesided_reads_total":
			m.OneSided += uint64(value)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !sawRegion {
		return nil, fmt.Errorf("not a cellserver's metrics (no cell_server_region_bytes)")
	}
	return m, nil
}

// parseSample splits `name{a="x",b="y"} value [timestamp]`.
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	labels = map[string]string{}
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", nil, 0, false
		}
		name, rest = line[:i], line[j+1:]
		for _, kv := range splitLabels(line[i+1 : j]) {
			k, v, found := strings.Cut(kv, "=")
			if !found {
				continue
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			labels[strings.TrimSpace(k)] = v
		}
	} else {
		var found bool
		name, rest, found = strings.Cut(line, " ")
		if !found {
			return "", nil, 0, false
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQuote, esc, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
