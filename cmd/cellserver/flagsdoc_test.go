package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/cellstore/cell/internal/testutil"
)

// flagsDocPath is the reference of every flag.
var flagsDocPath = filepath.Join("..", "..", "docs", "flags.md")

// The markers around the generated part of docs/flags.md; the prose
// around them is written by hand.
const (
	flagsDocBegin = "<!-- Made from cmd/cellserver/options.go by: go test ./cmd/cellserver -run TestFlagsDoc -update -->\n"
	flagsDocEnd   = "<!-- End of the tables made from options.go. -->\n"
)

// flagsDoc renders the table of options as docs/flags.md's sections: per
// group, each flag with its environment variable, default, the
// server.Options field it sets, and its help.
func flagsDoc() string {
	var c config
	var b strings.Builder
	for _, g := range c.options() {
		fmt.Fprintf(&b, "\n## %s\n\n", g.title)
		if g.about != "" {
			fmt.Fprintf(&b, "%s\n\n", markdownText(g.about))
		}
		if g.doc != "" {
			fmt.Fprintf(&b, "More in [%s](%s).\n\n", g.doc, g.doc)
		}
		b.WriteString("| flag | environment | default | `server.Options` | meaning |\n|---|---|---|---|---|\n")
		for _, o := range g.options {
			def := "—"
			if o.def != "" {
				def = "`" + o.def + "`"
			}
			field := "—"
			if f := serverField(&c, o); f != "" {
				field = "`" + f + "`"
				if o.serverDefault != "" {
					field += ", default " + o.serverDefault
				}
			}
			fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s | %s |\n", o.name, envName(o.name), def, field, markdownText(o.help))
		}
	}
	b.WriteString("\n")
	return b.String()
}

var flagRef = regexp.MustCompile(`--[a-z][a-z0-9-]*[a-z0-9]`)

// markdownText is help text for a table cell: '|' and '<' escaped, flags
// as code.
func markdownText(s string) string {
	s = strings.NewReplacer("|", `\|`, "<", `\<`).Replace(s)
	return flagRef.ReplaceAllString(s, "`$0`")
}

// docs/flags.md's tables are the table of options.go; -update rewrites
// them (the prose around them stays).
func TestFlagsDoc(t *testing.T) {
	b, err := os.ReadFile(flagsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, flagsDocBegin), strings.Index(doc, flagsDocEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated tables between %q and %q", flagsDocPath, flagsDocBegin, flagsDocEnd)
	}
	got, want := doc[i+len(flagsDocBegin):j], flagsDoc()
	if got == want {
		return
	}
	if testutil.Update() {
		doc = doc[:i+len(flagsDocBegin)] + want + doc[j:]
		if err := os.WriteFile(flagsDocPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", flagsDocPath)
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for k := 0; k < len(gl) || k < len(wl); k++ {
		var g, w string
		if k < len(gl) {
			g = gl[k]
		}
		if k < len(wl) {
			w = wl[k]
		}
		if g != w {
			t.Fatalf("%s differs from the table of options.go (go test ./cmd/cellserver -run TestFlagsDoc -update rewrites it); first at line %d of the tables:\n doc:   %s\n table: %s",
				flagsDocPath, k+1, g, w)
		}
	}
}

// The documents of the table's groups agree with it: each names every
// flag of its group, and in their tables of flags (a first column headed
// "flag") every flag named is a flag of the table, its environment
// variable (an "env" column) is the flag's, and its default (a "default"
// column: the flags' defaults in order, as code) is the table's, for the
// flags whose table default is not empty (an empty one is derived or off,
// which documents say in words).
func TestOptionDocs(t *testing.T) {
	var c config
	byName := map[string]option{}
	for _, o := range flatten(c.options()) {
		byName[o.name] = o
	}
	rows := 0
	for _, g := range c.options() {
		if g.doc == "" {
			continue
		}
		path := filepath.Join("..", "..", "docs", g.doc)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		for _, o := range g.options {
			if !regexp.MustCompile(`--` + regexp.QuoteMeta(o.name) + `([^a-z0-9-]|$)`).MatchString(doc) {
				t.Errorf("%s does not name --%s (group %q)", path, o.name, g.title)
			}
		}
		for _, tab := range markdownTables(doc) {
			head := tab[0]
			if !strings.EqualFold(head[0], "flag") {
				continue
			}
			env, def := -1, -1
			for i, h := range head {
				switch strings.ToLower(h) {
				case "env", "environment":
					env = i
				case "default":
					def = i
				}
			}
			for _, row := range tab[1:] {
				var flags []option
				for _, s := range codeSpans(row[0]) {
					name, ok := strings.CutPrefix(s, "--")
					if !ok {
						continue
					}
					o, ok := byName[name]
					if !ok {
						t.Errorf("%s: %q names --%s, which cellserver does not have", path, row[0], name)
						continue
					}
					flags = append(flags, o)
				}
				if len(flags) == 0 {
					continue
				}
				rows++
				if env >= 0 && env < len(row) {
					spans := codeSpans(row[env])
					for i, o := range flags {
						if i >= len(spans) || spans[i] != envName(o.name) {
							t.Errorf("%s: --%s: environment %q, want `%s`", path, o.name, row[env], envName(o.name))
						}
					}
				}
				if def >= 0 && def < len(row) {
					spans := codeSpans(row[def])
					for i, o := range flags {
						if o.def == "" {
							continue
						}
						if i >= len(spans) {
							t.Errorf("%s: --%s: default %q names no value, want `%s`", path, o.name, row[def], o.def)
							continue
						}
						got, err := valueOf(t, o.name, spans[i])
						want, _ := valueOf(t, o.name, o.def)
						if err != nil || !reflect.DeepEqual(got, want) {
							t.Errorf("%s: --%s: default `%s` (%v), the table's is `%s`", path, o.name, spans[i], err, o.def)
						}
					}
				}
			}
		}
	}
	if rows < 8 {
		t.Errorf("%d rows of flags in the groups' documents, want docs/limits.md's 8 at least", rows)
	}
}

// markdownTables returns the tables of a markdown document, each as rows
// of cells (the header first, the delimiter row left out).
func markdownTables(doc string) [][][]string {
	var tables [][][]string
	var cur [][]string
	for _, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if len(cur) > 0 {
				tables = append(tables, cur)
			}
			cur = nil
			continue
		}
		cells := tableCells(line)
		if len(cur) == 1 && strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // the delimiter row
		}
		cur = append(cur, cells)
	}
	if len(cur) > 0 {
		tables = append(tables, cur)
	}
	return tables
}

// tableCells splits a table row at the '|' outside code spans and not
// escaped.
func tableCells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cell strings.Builder
	code := false
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\\' && i+1 < len(line):
			cell.WriteByte(ch)
			cell.WriteByte(line[i+1])
			i++
		case ch == '`':
			code = !code
			cell.WriteByte(ch)
		case ch == '|' && !code:
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(ch)
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// codeSpans are the texts of the code spans of s, in order.
func codeSpans(s string) []string {
	var spans []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		spans = append(spans, m[1])
	}
	return spans
}
