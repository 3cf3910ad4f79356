package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/server"
)

// TestMetricsReference keeps docs/metrics.md true: every metric the
// server and the client register is in its tables with its labels, every
// row names a registered metric, and the type written for a metric is the
// type a running server's /metrics (and a client's registry) reports.
func TestMetricsReference(t *testing.T) {
	doc := readMetricsDoc(t, filepath.Join("..", "docs", "metrics.md"))

	// What the code registers: names and labels from the collectors'
	// descriptions.
	srvReg := &recordingRegisterer{}
	if _, err := server.NewMetrics(srvReg); err != nil {
		t.Fatal(err)
	}
	registered := srvReg.described(t)

	srv := startServer(t, serverOptions{})
	cliReg := &recordingRegisterer{real: prometheus.NewRegistry()}
	c := srv.newClient(t, func(cfg *client.Config) { cfg.Registerer = cliReg })
	mustPut(t, c, "metrics-doc", "v")
	mustGet(t, c, "metrics-doc", "v")
	for name, labels := range cliReg.described(t) {
		registered[name] = labels
	}

	for name, labels := range registered {
		row, ok := doc[name]
		switch {
		case !ok:
			t.Errorf("docs/metrics.md: %s (labels %v) is registered but not documented", name, labels)
		case !slices.Equal(row.labels, labels):
			t.Errorf("docs/metrics.md: %s has labels %v, the code %v", name, row.labels, labels)
		}
	}
	for name := range doc {
		if _, ok := registered[name]; !ok {
			t.Errorf("docs/metrics.md: %s is documented but not registered", name)
		}
	}

	// Types, from what a running server and client export.
	types := scrapeTypes(t, "http://"+srv.metrics+"/metrics")
	families, err := cliReg.real.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		types[f.GetName()] = strings.ToLower(dto.MetricType_name[int32(f.GetType())])
	}
	checked := 0
	for name, typ := range types {
		row, ok := doc[name]
		if !ok || !strings.HasPrefix(name, "cell_") {
			continue
		}
		checked++
		if row.typ != typ {
			t.Errorf("docs/metrics.md: %s is a %s, the server exports a %s", name, row.typ, typ)
		}
	}
	if checked < len(doc)/2 {
		t.Errorf("only %d of %d documented metrics were exported to check their types", checked, len(doc))
	}
}

// metricRow is one row of a table in docs/metrics.md.
type metricRow struct {
	typ    string
	labels []string // sorted
}

var metricRowRE = regexp.MustCompile("^\\| `(cell_[a-z_]+)` \\| (counter|gauge|histogram|summary) \\| ?([a-z_, ]*?) ?\\|")

// readMetricsDoc reads the metric tables of the reference.
func readMetricsDoc(t *testing.T, path string) map[string]metricRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]metricRow{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `cell_") {
			continue
		}
		m := metricRowRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s: row does not parse: %s", path, line)
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("%s: %s documented twice", path, m[1])
		}
		rows[m[1]] = metricRow{typ: m[2], labels: splitLabels(m[3])}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no metric rows", path)
	}
	return rows
}

func splitLabels(s string) []string {
	var out []string
	for _, l := range strings.Split(s, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// recordingRegisterer records the collectors registered with it and, if
// real is set, registers them there too.
type recordingRegisterer struct {
	real       *prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if r.real != nil {
		if err := r.real.Register(c); err != nil {
			return err
		}
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool {
	if r.real != nil {
		return r.real.Unregister(c)
	}
	return true
}

// descRE takes a metric's name and variable labels out of a Desc's
// String (the only way client_golang shows them).
var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// described returns the name and sorted variable labels of every metric
// the recorded collectors describe.
func (r *recordingRegisterer) described(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, c := range r.collectors {
		ch := make(chan *prometheus.Desc, 256)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("desc does not parse: %s", d)
			}
			out[m[1]] = splitLabels(m[2])
		}
	}
	return out
}

// scrapeTypes reads the # TYPE lines of a /metrics page.
func scrapeTypes(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	types := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var name, typ string
		if n, _ := fmt.Sscanf(sc.Text(), "# TYPE %s %s", &name, &typ); n == 2 {
			types[name] = typ
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return types
}

// TestGrafanaDashboard checks that deploy/grafana/cell-dashboard.json is
// valid JSON whose queries name only metrics in docs/metrics.md.
func TestGrafanaDashboard(t *testing.T) {
	doc := readMetricsDoc(t, filepath.Join("..", "docs", "metrics.md"))
	b, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "cell-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("cell-dashboard.json: %v", err)
	}
	metricRE := regexp.MustCompile(`cell_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, name := range metricRE.FindAllString(tg.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if row, ok := doc[strings.TrimSuffix(name, suffix)]; ok && row.typ == "histogram" {
						base = strings.TrimSuffix(name, suffix)
					}
				}
				if _, ok := doc[base]; !ok {
					t.Errorf("panel %q queries %s, which docs/metrics.md does not list", p.Title, name)
				}
			}
		}
	}
	if queries == 0 {
		t.Fatal("cell-dashboard.json has no queries")
	}
}
