package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// outputFormat is the value of -w/--write-out. It implements pflag.Value.
//
// simple (the default) is cellctl's plain output: a value, OK, or tables
// with aligned columns; table draws those tables with borders; json is
// indented JSON with snake_case field names; fields is etcdctl's
// "name" : value lines, one per JSON leaf (nested names joined with dots,
// list elements numbered: "servers[0].id" : "s1").
type outputFormat string

const (
	formatSimple outputFormat = "simple"
	formatTable  outputFormat = "table"
	formatJSON   outputFormat = "json"
	formatFields outputFormat = "fields"
)

// outputFormats lists the formats -w accepts.
var outputFormats = []outputFormat{formatSimple, formatTable, formatJSON, formatFields}

func (f *outputFormat) String() string { return string(*f) }

// Set accepts simple, table, json or fields.
func (f *outputFormat) Set(s string) error {
	v := outputFormat(strings.ToLower(strings.TrimSpace(s)))
	if slices.Contains(outputFormats, v) {
		*f = v
		return nil
	}
	return fmt.Errorf("unknown output format %q (want simple, table, json or fields)", s)
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
	// list: the simple output leaves the header out (a list of keys or
	// values, one a line, for a pipe); the bordered one keeps it.
	list bool
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
	if len(t.header) > 0 && !t.list {
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

// print writes v as JSON (-w json) or as fields (-w fields), or else the
// tables that tables builds, separated by blank lines: with aligned
// columns (simple) or with borders (table).
func (g *globals) print(v any, tables func() []*table) error {
	switch g.output {
	case formatJSON:
		return g.printJSON(v)
	case formatFields:
		return g.printFields(v)
	}
	for i, t := range tables() {
		if i > 0 {
			if _, err := fmt.Fprintln(g.stdout); err != nil {
				return err
			}
		}
		write := t.write
		if g.output == formatTable {
			write = t.writeBordered
		}
		if err := write(g.stdout); err != nil {
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

// printFields writes v as etcdctl's fields output: one "name" : value line
// per leaf of its JSON.
func (g *globals) printFields(v any) error {
	fields, err := jsonFields(v)
	if err != nil {
		return err
	}
	var sb strings.Builder
	for _, f := range fields {
		fmt.Fprintf(&sb, "%s : %s\n", strconv.Quote(f.name), f.value)
	}
	_, err = io.WriteString(g.stdout, sb.String())
	return err
}

// printLine writes line (simple), or v: as JSON, as fields, or as a
// bordered table of its fields, one column each (table).
func (g *globals) printLine(v any, line string) error {
	switch g.output {
	case formatJSON:
		return g.printJSON(v)
	case formatFields:
		return g.printFields(v)
	case formatTable:
		fields, err := jsonFields(v)
		if err != nil {
			return err
		}
		t := &table{left: true}
		var row []string
		for _, f := range fields {
			t.header = append(t.header, strings.ToUpper(f.name))
			row = append(row, f.text)
		}
		t.add(row...)
		return t.writeBordered(g.stdout)
	}
	_, err := fmt.Fprintln(g.stdout, line)
	return err
}

// jsonField is one leaf of a JSON document: its path, its value as JSON
// prints it (strings quoted) and as text (strings bare).
type jsonField struct{ name, value, text string }

// jsonFields flattens v's JSON into its leaves, in the document's order:
// object members joined with dots, array elements numbered ("a.b[2].c");
// empty objects and arrays are leaves ({} and []).
func jsonFields(v any) ([]jsonField, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []jsonField
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			empty, close := "{}", "}"
			if t == '[' {
				empty, close = "[]", "]"
			}
			n := 0
			for ; dec.More(); n++ {
				p := fmt.Sprintf("%s[%d]", path, n)
				if t == '{' {
					kt, err := dec.Token()
					if err != nil {
						return err
					}
					if p = kt.(string); path != "" {
						p = path + "." + p
					}
				}
				if err := walk(p); err != nil {
					return err
				}
			}
			if end, err := dec.Token(); err != nil || end != json.Delim(close[0]) {
				return fmt.Errorf("fields: bad JSON end %v: %v", end, err)
			}
			if n == 0 {
				out = append(out, jsonField{path, empty, empty})
			}
		case string:
			out = append(out, jsonField{path, strconv.Quote(t), t})
		case nil:
			out = append(out, jsonField{path, "null", "null"})
		default:
			s := fmt.Sprint(t)
			out = append(out, jsonField{path, s, s})
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	return out, nil
}

// writeBordered prints the table with borders: title, then the header and
// rows boxed in, then the notes.
func (t *table) writeBordered(w io.Writer) error {
	var sb strings.Builder
	if t.title != "" {
		sb.WriteString(t.title + "\n")
	}
	cols := len(t.header)
	for _, r := range t.rows {
		cols = max(cols, len(r))
	}
	widths := make([]int, cols)
	measure := func(cells []string) {
		for i, c := range cells {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	measure(t.header)
	for _, r := range t.rows {
		measure(r)
	}
	rule := func() {
		for _, w := range widths {
			sb.WriteString("+" + strings.Repeat("-", w+2))
		}
		sb.WriteString("+\n")
	}
	line := func(cells []string, left bool) {
		for i, w := range widths {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", w-utf8.RuneCountInString(c))
			if left {
				sb.WriteString("| " + c + pad + " ")
			} else {
				sb.WriteString("| " + pad + c + " ")
			}
		}
		sb.WriteString("|\n")
	}
	if cols > 0 {
		rule()
		if len(t.header) > 0 {
			line(t.header, true)
			rule()
		}
		for _, r := range t.rows {
			line(r, t.left)
		}
		if len(t.rows) > 0 {
			rule()
		}
	}
	for _, n := range t.notes {
		sb.WriteString(n + "\n")
	}
	_, err := io.WriteString(w, sb.String())
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

// plural is n and the noun, in the plural unless n is 1: "1 level",
// "3 levels". The nouns cellctl counts all take an s.
func plural[N ~int | ~int64 | ~uint64 | ~uint32](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// regionsHave is "1 region has" or "N regions have".
func regionsHave(n int) string {
	if n == 1 {
		return "1 region has"
	}
	return fmt.Sprintf("%d regions have", n)
}
