package test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestBenchmarksReport keeps BENCHMARKS.md a report whose summary matches
// its sections: the contents list names every numbered section, in order;
// every summary row links to one of them, and every number in a row's
// figure column appears in that section, so that a figure changed in its
// section and not in the summary (or the other way round) fails here.
func TestBenchmarksReport(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)

	// The numbered sections, and their text up to the next one.
	headRE := regexp.MustCompile(`(?m)^## (\d+)\. (.+)$`)
	heads := headRE.FindAllStringSubmatchIndex(doc, -1)
	if len(heads) == 0 {
		t.Fatal("BENCHMARKS.md has no numbered sections (## N. Title)")
	}
	type section struct{ num, title, anchor, text string }
	var sections []section
	byAnchor := map[string]section{}
	for i, h := range heads {
		end := len(doc)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		s := section{num: doc[h[2]:h[3]], title: doc[h[4]:h[5]], text: doc[h[1]:end]}
		s.anchor = githubAnchor(s.num + ". " + s.title)
		if want := i + 1; s.num != strconv.Itoa(want) {
			t.Errorf("section %q is numbered %s, want %d (numbers follow each other)", s.title, s.num, want)
		}
		sections = append(sections, s)
		byAnchor[s.anchor] = s
	}

	// The contents list: "N. [Title](#anchor)", one per section, in order.
	contents := regexp.MustCompile(`(?m)^(\d+)\. \[(.+)\]\(#([^)]+)\)$`).FindAllStringSubmatch(doc, -1)
	if len(contents) != len(sections) {
		t.Errorf("the contents list has %d entries, the document %d numbered sections", len(contents), len(sections))
	}
	for i := 0; i < len(contents) && i < len(sections); i++ {
		c, s := contents[i], sections[i]
		if c[1] != s.num || c[2] != s.title || c[3] != s.anchor {
			t.Errorf("contents entry %q links %q; section %s is %q (#%s)", c[2], c[3], s.num, s.title, s.anchor)
		}
	}

	// The summary table: its rows up to the first blank line after its
	// header; the figure column and the section link.
	_, after, ok := strings.Cut(doc, "\n## Summary\n")
	if !ok {
		t.Fatal("BENCHMARKS.md has no ## Summary")
	}
	var header []string
	rows := 0
	numRE := regexp.MustCompile(`\d+(?:[.,]\d+)*`)
	linkRE := regexp.MustCompile(`\]\(#([^)]+)\)`)
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if header != nil {
				break
			}
			continue
		}
		cells := splitRow(line)
		switch {
		case header == nil:
			header = cells
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		}
		figure := column(t, header, cells, "figure")
		link := linkRE.FindStringSubmatch(column(t, header, cells, "§"))
		if link == nil {
			t.Errorf("summary row %q links to no section", line)
			continue
		}
		s, ok := byAnchor[link[1]]
		if !ok {
			t.Errorf("summary row %q links #%s, which is no section's heading", line, link[1])
			continue
		}
		rows++
		// The figure's own numbers: those in bold, or all of them when
		// nothing is bold.
		bold := regexp.MustCompile(`\*\*(.+?)\*\*`).FindAllStringSubmatch(figure, -1)
		text := figure
		if bold != nil {
			text = ""
			for _, m := range bold {
				text += m[1] + " "
			}
		}
		for _, n := range numRE.FindAllString(text, -1) {
			if !strings.Contains(s.text, n) {
				t.Errorf("summary row %q: its figure %s is not in section %s (%s)", cells[0]+": "+column(t, header, cells, "what is compared"), n, s.num, s.title)
			}
		}
	}
	if rows == 0 {
		t.Error("the summary table has no rows")
	}
	t.Logf("%d sections, %d summary rows checked", len(sections), rows)
}

// splitRow returns the trimmed cells of a markdown table row.
func splitRow(line string) []string {
	f := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// column is the cell of row under the header name.
func column(t *testing.T, header, row []string, name string) string {
	t.Helper()
	for i, h := range header {
		if h == name && i < len(row) {
			return row[i]
		}
	}
	t.Fatalf("the summary table has no column %q (header %q)", name, header)
	return ""
}

// githubAnchor is the anchor GitHub gives a heading: lower case, letters,
// digits, spaces, hyphens and underscores kept, spaces made hyphens.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
