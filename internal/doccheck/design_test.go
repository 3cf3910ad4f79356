package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// designPath is the design document, from the module's root.
const designPath = "docs/design.md"

// sectionHeading is a numbered section of the design document: "## 9. Durability".
var sectionHeading = regexp.MustCompile(`(?m)^## (\d+)\. \S`)

// designSections returns the section numbers of the design document md
// and what is wrong with their numbering: they must run 1, 2, 3 ... in
// order, so that a section keeps its number when the document grows.
func designSections(md string) (map[int]bool, []string) {
	var problems []string
	secs := make(map[int]bool)
	for i, m := range sectionHeading.FindAllStringSubmatch(md, -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil || n != i+1 {
			problems = append(problems, designPath+": section "+m[1]+" is heading "+strconv.Itoa(i+1)+": sections are numbered 1, 2, 3 ... in order")
		}
		secs[n] = true
	}
	if len(secs) == 0 {
		problems = append(problems, designPath+": no numbered sections (\"## 1. Title\")")
	}
	return secs, problems
}

// A citation of the design document names "design.md" (a path ending in
// it, or a Markdown link to it), then one or more sections: "§9",
// "§8, §9", "§4 and §9". A citation may break across lines of a Go
// comment ("docs/design.md\n\t// §9").
var (
	sep         = `(?:\s|//)*`
	designCite  = regexp.MustCompile(`[\w./-]*design\.md(?:\]\([^)\s]*\)|\)|` + "`" + `)?` + sep + `§\d+(?:` + sep + `(?:,|and|or)` + sep + `§\d+)*`)
	sectionNum  = regexp.MustCompile(`§(\d+)`)
	staleDesign = regexp.MustCompile(`\bDESIGN(?:\.md)?` + sep + `§\d+`)
)

// citation is one section named by a file.
type citation struct {
	file    string
	line    int
	section int
	text    string // the citation as written, lines joined
}

// citations returns the sections of the design document that text (the
// contents of file) cites, and the citations of a DESIGN document that
// is not in the tree.
func citations(file, text string) (cites []citation, stale []citation) {
	lineAt := func(off int) int { return 1 + strings.Count(text[:off], "\n") }
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, loc := range designCite.FindAllStringIndex(text, -1) {
		span := text[loc[0]:loc[1]]
		for _, m := range sectionNum.FindAllStringSubmatch(span, -1) {
			n, _ := strconv.Atoi(m[1])
			cites = append(cites, citation{file: file, line: lineAt(loc[0]), section: n, text: flat(span)})
		}
	}
	for _, loc := range staleDesign.FindAllStringIndex(text, -1) {
		stale = append(stale, citation{file: file, line: lineAt(loc[0]), text: flat(text[loc[0]:loc[1]])})
	}
	return cites, stale
}

// checkCitations returns what is wrong with the citations in files (name
// to contents) of the design document md.
func checkCitations(md string, files map[string]string) []string {
	secs, problems := designSections(md)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cites, stale := citations(name, files[name])
		for _, c := range cites {
			if !secs[c.section] {
				problems = append(problems, c.file+":"+strconv.Itoa(c.line)+": "+strconv.Quote(c.text)+" cites §"+strconv.Itoa(c.section)+", which "+designPath+" does not have")
			}
		}
		for _, c := range stale {
			problems = append(problems, c.file+":"+strconv.Itoa(c.line)+": "+strconv.Quote(c.text)+" cites a document outside the tree: cite "+designPath+" §N (or the package's doc.go)")
		}
	}
	return problems
}

// moduleRoot returns the directory of the module's go.mod, above the
// test's working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/cellstore/cell\n") {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod of github.com/cellstore/cell above the working directory")
		}
		dir = up
	}
}

// treeFiles returns the .go and .md files under root (hidden directories
// such as .git left out), by path from root.
func treeFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	files := make(map[string]string)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || (!strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDesignCitations: every citation of docs/design.md in the tree's Go
// and Markdown files names a section the document has.
func TestDesignCitations(t *testing.T) {
	root := moduleRoot(t)
	files := treeFiles(t, root)
	md, ok := files[designPath]
	if !ok {
		t.Fatalf("%s is missing", designPath)
	}
	for _, p := range checkCitations(md, files) {
		t.Error(p)
	}
	// The tree does cite it: a pattern that found nothing would pass
	// whatever the files say.
	n := 0
	for name, text := range files {
		cites, _ := citations(name, text)
		n += len(cites)
	}
	if n < 50 {
		t.Errorf("found %d citations of %s in the tree; the code cites it about 80 times: is the pattern broken?", n, designPath)
	}
}

// The documents of the unit tests below are built from pieces, so that
// this file holds no citation TestDesignCitations would read.
const (
	sect     = "§"
	dmd      = "design.md"
	stalePfx = "DESIGN"
)

var testDesign = "# Design\n\n## 1. Layout\n\ntext\n\n## 2. Memory\n\n## 3. Nodes\n"

func TestCheckCitations(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		want []string // substrings of the problems, in order; none: no problem
	}{
		{"go comment", "// Root pointers (docs/" + dmd + " " + sect + "2).\n", nil},
		{"list", "x (docs/" + dmd + " " + sect + "1, " + sect + "3 and " + sect + "2)\n", nil},
		{"markdown link", "see [" + dmd + "](" + dmd + ") " + sect + "3.\n", nil},
		{"code span", "see `docs/" + dmd + "` " + sect + "3.\n", nil},
		{"whole document", "see docs/" + dmd + ".\n", nil},
		{"paper sections are not citations", "paper " + sect + "9, docs/" + dmd + "\n", nil},
		{"missing section", "a\n// (docs/" + dmd + " " + sect + "4)\n", []string{"f.go:2: \"docs/" + dmd + " " + sect + "4\" cites " + sect + "4"}},
		{"missing in a list", "docs/" + dmd + " " + sect + "1, " + sect + "12\n", []string{"cites " + sect + "12,"}},
		{"across comment lines", "// (docs/" + dmd + "\n\t// " + sect + "7): x\n", []string{"f.go:1: \"docs/" + dmd + " // " + sect + "7\" cites " + sect + "7"}},
		{"markdown link, missing", "[" + dmd + "](" + dmd + ") " + sect + "5\n", []string{"cites " + sect + "5"}},
		{"stale", "x (" + stalePfx + " " + sect + "9)\n", []string{"f.go:1: \"" + stalePfx + " " + sect + "9\" cites a document outside the tree"}},
		{"stale .md", "as " + stalePfx + ".md " + sect + "7 says\n", []string{"outside the tree"}},
		{"stale across lines", "// (" + stalePfx + "\n\t// " + sect + "9)\n", []string{"f.go:1: \"" + stalePfx + " // " + sect + "9\" cites a document outside the tree"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkCitations(testDesign, map[string]string{"f.go": tc.file})
			if len(got) != len(tc.want) {
				t.Fatalf("problems %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %q does not say %q", got[i], w)
				}
			}
		})
	}
}

func TestDesignSections(t *testing.T) {
	for _, tc := range []struct {
		name, md string
		secs     []int
		problems int
	}{
		{"in order", testDesign, []int{1, 2, 3}, 0},
		{"subsections and other headings ignored", "## 1. A\n### 1.1 x\n## Notes\n## 2. B\n", []int{1, 2}, 0},
		{"gap", "## 1. A\n## 3. C\n", []int{1, 3}, 1},
		{"repeated", "## 1. A\n## 2. B\n## 2. C\n", []int{1, 2}, 1},
		{"none", "# Design\n", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secs, problems := designSections(tc.md)
			var got []int
			for n := range secs {
				got = append(got, n)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.secs) || len(problems) != tc.problems {
				t.Errorf("sections %v, problems %q; want %v and %d problems", got, problems, tc.secs, tc.problems)
			}
		})
	}
}
