package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/cellstore/cell/drill"
)

// drillTables are cellctl drill's tables: the load by phase, the faults,
// unavailability per region, and the verdict.
func drillTables(r *drill.Report) []*table {
	w := r.Workload
	title := fmt.Sprintf("drill: %s, %s (%s), %s", w.Mix, plural(w.Keys, "key"), w.Distribution, plural(w.Clients, "client"))
	if w.Rate > 0 {
		title += fmt.Sprintf(", %.0f ops/s", w.Rate)
	}
	if n := len(r.Faults); n > 0 {
		title += fmt.Sprintf("; %d × %s", n, r.Fault)
	} else {
		title += "; no fault"
	}
	phases := &table{title: title, header: []string{"PHASE", "SECONDS", "OPS/S", "ERRORS/S", "P50", "P99"}}
	for _, p := range r.Phases {
		phases.add(p.Name, fmt.Sprintf("%.1f", p.Seconds), fmt.Sprintf("%.0f", p.OpsPS), fmt.Sprintf("%.1f", p.ErrPS),
			fmtLatency(p.Latency.P50), fmtLatency(p.Latency.P99))
	}
	tables := []*table{phases}

	if len(r.Faults) > 0 {
		ft := &table{title: "faults", header: []string{"#", "SERVER", "AT", "HEALED", "UNAVAILABLE", "OPS/S BEFORE", "DURING", "AFTER"}}
		for i, f := range r.Faults {
			ft.add(fmt.Sprint(i+1), f.Server, fmtSeconds(f.Fault-r.LoadStart), fmtSeconds(f.Heal-r.LoadStart), fmtLatency(f.Unavailable),
				fmt.Sprintf("%.0f", f.Before), fmt.Sprintf("%.0f", f.During), fmt.Sprintf("%.0f", f.After))
		}
		tables = append(tables, ft)

		ut := &table{title: "unavailability over the faults", header: []string{"REGION", "KEYS", "P50", "P99", "MAX"}}
		for _, reg := range r.Regions {
			name := fmt.Sprint(reg.Region)
			if reg.Region == 0 {
				name = "all keys"
			}
			ut.add(name, fmt.Sprint(reg.Keys), fmtLatency(reg.Unavailable.P50), fmtLatency(reg.Unavailable.P99), fmtLatency(reg.Unavailable.Max))
		}
		u := r.Unavailability
		ut.add("any", "", fmtLatency(u.P50), fmtLatency(u.P99), fmtLatency(u.Max))
		tables = append(tables, ut)
	}

	v := &table{title: "verdict", left: true}
	c := r.Operations
	v.add("operations", fmt.Sprintf("%d ok, %d failed, %d unknown", c.OK, c.Failed, c.Unknown))
	v.add("latency", fmt.Sprintf("p50 %s, p99 %s", fmtLatency(r.Latency.P50), fmtLatency(r.Latency.P99)))
	v.add("recovery", fmtLatency(r.Recovery)+" after the load until every key read")
	lost := fmt.Sprint(len(r.Lost))
	for i, l := range r.Lost {
		if i == 5 {
			lost += fmt.Sprintf("; %d more", len(r.Lost)-5)
			break
		}
		lost += "; " + l.String()
	}
	v.add("lost writes", lost)
	lin := string(r.Linearizability.Verdict)
	if ks := r.Linearizability.Keys; len(ks) > 0 {
		lin += " (keys " + strings.Join(ks, ", ") + ")"
	}
	if f := r.Linearizability.Visualization; f != "" {
		lin += "; see " + f
	}
	v.add("linearizability", lin)
	switch {
	case !r.ClusterChecked && len(r.ClusterCheck) == 0:
		v.add("cluster check", "not run")
	case len(r.ClusterCheck) == 0:
		v.add("cluster check", "ok")
	default:
		v.add("cluster check", strings.Join(r.ClusterCheck, "; "))
	}
	for _, e := range r.Errors {
		v.add("error", oneLine(e))
	}
	result := "PASS"
	if !r.OK() {
		result = "FAIL"
	}
	v.add("result", result)
	for _, row := range v.rows {
		row[0] += ":"
	}
	return append(tables, v)
}

// fmtSeconds formats a time from the start of the load.
func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}
