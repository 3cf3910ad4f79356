package main

import (
	"fmt"
	"os"
	"path/filepath"
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
