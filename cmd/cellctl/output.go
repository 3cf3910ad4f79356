package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// outputFormat is the value of -w/--write-out. It implements pflag.Value.
type outputFormat string

const (
	formatTable outputFormat = "table"
	formatJSON  outputFormat = "json"
)

func (f *outputFormat) String() string { return string(*f) }

// Set accepts "table" or "json".
func (f *outputFormat) Set(s string) error {
	switch v := outputFormat(strings.ToLower(s)); v {
	case formatTable, formatJSON:
		*f = v
		return nil
	}
	return fmt.Errorf("unknown output format %q (want table or json)", s)
}

// Type names the value in help.
func (f *outputFormat) Type() string { return "format" }

// table is a titled grid of text cells printed with aligned columns.
type table struct {
	title  string
	header []string // none when empty
	rows   [][]string
	notes  []string // lines printed under the table
	left   bool     // align cells left (text); default right (numbers)
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// write prints the table: title, header, rows, notes.
func (t *table) write(w io.Writer) error {
	if t.title != "" {
		if _, err := fmt.Fprintln(w, t.title); err != nil {
			return err
		}
	}
	var flags uint = tabwriter.AlignRight
	if t.left {
		flags = 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', flags)
	rows := t.rows
	if len(t.header) > 0 {
		rows = append([][]string{t.header}, rows...)
	}
	for _, cells := range rows {
		// Right-aligned cells must end with a tab; left-aligned, the last
		// cell of a line is left unpadded.
		end := "\t\n"
		if t.left {
			end = "\n"
		}
		if _, err := fmt.Fprint(tw, strings.Join(cells, "\t")+end); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range t.notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// print writes v as indented JSON with -w json, or else the tables that
// tables builds, separated by blank lines.
func (g *globals) print(v any, tables func() []*table) error {
	if g.output == formatJSON {
		return g.printJSON(v)
	}
	for i, t := range tables() {
		if i > 0 {
			if _, err := fmt.Fprintln(g.stdout); err != nil {
				return err
			}
		}
		if err := t.write(g.stdout); err != nil {
			return err
		}
	}
	return nil
}

// printJSON writes v as indented JSON.
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printLine writes v as JSON with -w json, or else line.
func (g *globals) printLine(v any, line string) error {
	if g.output == formatJSON {
		return g.printJSON(v)
	}
	_, err := fmt.Fprintln(g.stdout, line)
	return err
}

// fmtRate formats operations per second in thousands, as the paper does
// ("1842K").
func fmtRate(perSec float64) string {
	return fmt.Sprintf("%.0fK", perSec/1000)
}

// fmtPercent formats a fraction as a whole percentage.
func fmtPercent(f float64) string {
	return fmt.Sprintf("%.0f%%", 100*f)
}

// fmtRatio formats a ratio with three decimals.
func fmtRatio(f float64) string {
	return fmt.Sprintf("%.3f", f)
}

// fmtLatency formats a latency in the unit that suits it: 21.3µs, 1.88ms,
// 1.250s.
func fmtLatency(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
}
