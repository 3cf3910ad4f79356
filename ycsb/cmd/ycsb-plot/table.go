package main

import (
	"fmt"
	"io"
	"strings"
)

// writeTables writes the throughput table and the latency table.
func writeTables(w io.Writer, r *results) error {
	var b strings.Builder
	b.WriteString("Stores: ")
	for i, s := range r.stores {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "**%s**: %s", s.name, s.label)
	}
	b.WriteString(".\n\n")
	throughputTable(&b, r)
	b.WriteString("\n")
	latencyTable(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

// throughputTable: per workload, each store's ops/s (median and every
// repeat), failed operations, and the first store's median over each
// other's.
func throughputTable(b *strings.Builder, r *results) {
	b.WriteString("Throughput, operations/s: median (each repeat); failed operations in brackets when any.\n\n| workload |")
	for _, s := range r.stores {
		fmt.Fprintf(b, " %s |", s.name)
	}
	first := r.stores[0].name
	for _, s := range r.stores[1:] {
		fmt.Fprintf(b, " %s ÷ %s |", first, s.name)
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---:|", 2*len(r.stores)-1))
	b.WriteString("\n")
	for _, wl := range r.workloads {
		fmt.Fprintf(b, "| %s |", wl)
		for _, s := range r.stores {
			vs := r.values(s.name, wl, "TOTAL", func(o opStats) float64 { return o.ops })
			if len(vs) == 0 {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(b, " %.0f (%s)", median(vs), join(vs, "%.0f"))
			if n := r.errorsOf(s.name, wl); n > 0 {
				fmt.Fprintf(b, " [%d failed]", n)
			}
			b.WriteString(" |")
		}
		base := median(r.values(first, wl, "TOTAL", func(o opStats) float64 { return o.ops }))
		for _, s := range r.stores[1:] {
			other := median(r.values(s.name, wl, "TOTAL", func(o opStats) float64 { return o.ops }))
			if base == 0 || other == 0 {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(b, " %.2f |", base/other)
		}
		b.WriteString("\n")
	}
}

// latencyTable: per workload and operation kind, each store's p50 and
// p99 in µs (medians over the repeats).
func latencyTable(b *strings.Builder, r *results) {
	b.WriteString("Latency, µs: p50 / p99 of each operation kind (medians over the repeats).\n\n| workload | operation |")
	for _, s := range r.stores {
		fmt.Fprintf(b, " %s |", s.name)
	}
	b.WriteString("\n|---|---|")
	b.WriteString(strings.Repeat("---:|", len(r.stores)))
	b.WriteString("\n")
	for _, wl := range r.workloads {
		for _, op := range r.opsOf(wl) {
			fmt.Fprintf(b, "| %s | %s |", wl, op)
			for _, s := range r.stores {
				p50 := r.values(s.name, wl, op, func(o opStats) float64 { return o.p50 })
				p99 := r.values(s.name, wl, op, func(o opStats) float64 { return o.p99 })
				if len(p50) == 0 {
					b.WriteString(" – |")
					continue
				}
				fmt.Fprintf(b, " %.0f / %.0f |", median(p50), median(p99))
			}
			b.WriteString("\n")
		}
	}
}

// join formats vs with format, separated by " / ".
func join(vs []float64, format string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(parts, " / ")
}
