package doccheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// architecturePath is the map of the packages, from the module's root.
const architecturePath = "docs/architecture.md"

// module is the module's path; packages are named relative to it.
const module = "github.com/cellstore/cell"

// importGraph parses the output of `go list -json` (a stream of JSON
// objects) into each package's imports among the module's packages,
// named relative to the module ("server", "internal/raftmux"), sorted.
func importGraph(r io.Reader) (map[string][]string, error) {
	rel := func(path string) (string, bool) {
		if rest, ok := strings.CutPrefix(path, module+"/"); ok {
			return rest, true
		}
		return "", false
	}
	graph := make(map[string][]string)
	dec := json.NewDecoder(r)
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		name, ok := rel(p.ImportPath)
		if !ok {
			return nil, fmt.Errorf("go list: package %s is not under %s", p.ImportPath, module)
		}
		imports := []string{}
		for _, imp := range p.Imports {
			if r, ok := rel(imp); ok {
				imports = append(imports, r)
			}
		}
		slices.Sort(imports)
		graph[name] = imports
	}
	if len(graph) == 0 {
		return nil, errors.New("go list reported no package")
	}
	return graph, nil
}

// section returns the text of md's "## title" section, up to the next
// "## " heading.
func section(md, title string) (string, bool) {
	_, rest, ok := strings.Cut(md, "\n## "+title+"\n")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest, true
}

// tableRow is a row of a package table: "| `server` | what it holds |".
var tableRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

// checkPackageTable returns what is wrong with the package tables of the
// "Packages" section of the architecture document md, given the
// module's packages: each package has one row, and each row names one.
func checkPackageTable(md string, graph map[string][]string) []string {
	sec, ok := section(md, "Packages")
	if !ok {
		return []string{architecturePath + `: no "## Packages" section`}
	}
	var problems []string
	rows := make(map[string]int)
	for _, m := range tableRow.FindAllStringSubmatch(sec, -1) {
		name := strings.TrimSuffix(m[1], "/")
		rows[name]++
		_, known := graph[name]
		switch {
		case rows[name] == 2:
			problems = append(problems, fmt.Sprintf("%s: package %s has more than one row", architecturePath, name))
		case !known && rows[name] == 1:
			problems = append(problems, fmt.Sprintf("%s: a row names %s, which is not a package of the module (go list ./...)", architecturePath, name))
		}
	}
	for _, name := range sortedKeys(graph) {
		if rows[name] == 0 {
			problems = append(problems, fmt.Sprintf("%s: package %s has no row in the tables of \"Packages\"", architecturePath, name))
		}
	}
	return problems
}

// importBlock is the fenced block of the architecture document that lists
// each package's imports.
var importBlock = regexp.MustCompile("(?ms)^```imports\n(.*?)^```")

// checkImports returns what is wrong with the imports block of the
// architecture document md, given the module's import graph: every
// package has one line, "pkg → imports..." (continued on indented
// lines), its imports exactly those of the graph, and every package is
// above the packages it imports.
func checkImports(md string, graph map[string][]string) []string {
	blocks := importBlock.FindAllStringSubmatch(md, -1)
	if len(blocks) != 1 {
		return []string{fmt.Sprintf("%s: %d fenced blocks of imports (```imports), want 1", architecturePath, len(blocks))}
	}
	var problems []string
	var order []string
	written := make(map[string][]string)
	for _, line := range strings.Split(blocks[0][1], "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' { // continues the last package's imports
			if len(order) == 0 {
				problems = append(problems, fmt.Sprintf("%s: imports block: %q continues no package", architecturePath, line))
				continue
			}
			last := order[len(order)-1]
			written[last] = append(written[last], strings.Fields(line)...)
			continue
		}
		pkg, imports, ok := strings.Cut(line, "→")
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: imports block: %q is not \"package → imports\"", architecturePath, line))
			continue
		}
		pkg = strings.TrimSpace(pkg)
		if _, dup := written[pkg]; dup {
			problems = append(problems, fmt.Sprintf("%s: imports block: %s has two lines", architecturePath, pkg))
		}
		order = append(order, pkg)
		written[pkg] = append([]string{}, strings.Fields(imports)...)
	}
	line := make(map[string]int, len(order))
	for i, pkg := range order {
		line[pkg] = i
	}
	for _, pkg := range order {
		want, ok := graph[pkg]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: imports block lists %s, which is not a package of the module (go list ./...)", architecturePath, pkg))
			continue
		}
		got := slices.Sorted(slices.Values(written[pkg]))
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("%s: imports block: %s → %s; go list says %s → %s", architecturePath, pkg, list(got), pkg, list(want)))
		}
		for _, imp := range written[pkg] {
			if l, ok := line[imp]; ok && l < line[pkg] {
				problems = append(problems, fmt.Sprintf("%s: imports block: %s imports %s, which is listed above it: dependencies point down", architecturePath, pkg, imp))
			}
		}
	}
	for _, pkg := range sortedKeys(graph) {
		if _, ok := line[pkg]; !ok {
			problems = append(problems, fmt.Sprintf("%s: imports block has no line for %s → %s", architecturePath, pkg, list(graph[pkg])))
		}
	}
	return problems
}

// list writes the imports of a package as the imports block does, or
// "(nothing)".
func list(imports []string) string {
	if len(imports) == 0 {
		return "(nothing)"
	}
	return strings.Join(imports, " ")
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// goList returns the module's import graph as `go list -json ./...`
// reports it, run at the module's root.
func goList(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list -json ./...: %v\n%s", err, stderr.Bytes())
	}
	graph, err := importGraph(&stdout)
	if err != nil {
		t.Fatal(err)
	}
	return graph
}

// TestArchitecturePackages: docs/architecture.md's package tables name
// every package of the module, and its imports block is the module's
// import graph, drawn downwards.
func TestArchitecturePackages(t *testing.T) {
	root := moduleRoot(t)
	md, err := os.ReadFile(filepath.Join(root, architecturePath))
	if err != nil {
		t.Fatal(err)
	}
	graph := goList(t, root)
	for _, p := range checkPackageTable(string(md), graph) {
		t.Error(p)
	}
	for _, p := range checkImports(string(md), graph) {
		t.Error(p)
	}
}

// testGraph and testArchitecture are a small module and its document,
// right; the cases below break them.
var testGraph = map[string][]string{
	"cmd/x":   {"client", "wire"},
	"client":  {"blink", "wire"},
	"wire":    {"blink"},
	"blink":   {},
	"test/tu": {},
}

const testArchitecture = "# A\n\n## Packages\n\n" +
	"| Package | What |\n|---|---|\n| `cmd/x` | a command |\n| `client` | the client |\n\n" +
	"| Package | What |\n|---|---|\n| `wire/` | frames |\n| `blink` | the tree |\n| `test/tu` | helpers |\n\n" +
	"## Dependencies\n\n```imports\ncmd/x  → client\n       wire\n\nclient → blink wire\nwire   → blink\nblink  →\ntest/tu →\n```\n\n## Memory\n\n| `server` | not in Packages |\n"

func TestImportGraph(t *testing.T) {
	out := `{"ImportPath": "` + module + `/client", "Imports": ["context", "` + module + `/wire", "` + module + `/blink", "github.com/x/y"]}
{"ImportPath": "` + module + `/blink"}
`
	graph, err := importGraph(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]string{"client": {"blink", "wire"}, "blink": {}}; fmt.Sprint(graph) != fmt.Sprint(want) {
		t.Errorf("graph %v, want %v", graph, want)
	}
	for _, bad := range []string{
		"",
		`{"ImportPath": "example.com/other"}`,
		`{"ImportPath": "` + module + `/x", "Error": {"Err": "no Go files"}}`,
		`{"ImportPath": `,
	} {
		if g, err := importGraph(strings.NewReader(bad)); err == nil {
			t.Errorf("importGraph(%q) = %v, want an error", bad, g)
		}
	}
}

func TestCheckArchitecture(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(md string) string
		graph  func(g map[string][]string)
		tables []string // substrings of the table's problems, in order
		block  []string // substrings of the imports block's problems
	}{
		{name: "right"},
		{
			name:   "a package without a row, nor a line",
			graph:  func(g map[string][]string) { g["rdma"] = []string{} },
			tables: []string{"package rdma has no row"},
			block:  []string{"no line for rdma"},
		},
		{
			name:   "a row and a line of no package",
			graph:  func(g map[string][]string) { delete(g, "test/tu") },
			tables: []string{"a row names test/tu, which is not a package"},
			block:  []string{"lists test/tu, which is not a package"},
		},
		{
			name: "two rows",
			edit: func(md string) string {
				return strings.Replace(md, "| `blink` | the tree |", "| `blink` | the tree |\n| `client` | again |", 1)
			},
			tables: []string{"client has more than one row"},
		},
		{
			name:  "an import missing",
			graph: func(g map[string][]string) { g["wire"] = []string{"blink", "test/tu"} },
			block: []string{"wire → blink; go list says wire → blink test/tu"},
		},
		{
			name:  "an import too many",
			edit:  func(md string) string { return strings.Replace(md, "wire   → blink", "wire   → blink client", 1) },
			block: []string{"wire → blink client; go list says wire → blink", "wire imports client, which is listed above it"},
		},
		{
			name:  "a continuation line lost",
			edit:  func(md string) string { return strings.Replace(md, "       wire\n", "", 1) },
			block: []string{"cmd/x → client; go list says cmd/x → client wire"},
		},
		{
			name:  "a line missing",
			edit:  func(md string) string { return strings.Replace(md, "blink  →\n", "", 1) },
			block: []string{"no line for blink"},
		},
		{
			name: "an imported package above its importer",
			edit: func(md string) string {
				md = strings.Replace(md, "wire   → blink\n", "", 1)
				return strings.Replace(md, "cmd/x  →", "wire   → blink\ncmd/x  →", 1)
			},
			block: []string{"cmd/x imports wire, which is listed above it", "client imports wire, which is listed above it"},
		},
		{
			name:  "two lines",
			edit:  func(md string) string { return strings.Replace(md, "blink  →\n", "blink  →\nblink  →\n", 1) },
			block: []string{"blink has two lines"},
		},
		{
			name:  "not an arrow",
			edit:  func(md string) string { return strings.Replace(md, "blink  →", "blink  ->", 1) },
			block: []string{`"blink  ->" is not "package → imports"`, "no line for blink"},
		},
		{
			name: "no block, no section",
			edit: func(md string) string {
				return strings.Replace(strings.Replace(md, "```imports", "```", 1), "## Packages", "## Pkgs", 1)
			},
			tables: []string{`no "## Packages" section`},
			block:  []string{"0 fenced blocks of imports"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := testArchitecture
			if tc.edit != nil {
				md = tc.edit(md)
			}
			graph := make(map[string][]string)
			for k, v := range testGraph {
				graph[k] = slices.Clone(v)
			}
			if tc.graph != nil {
				tc.graph(graph)
			}
			expect(t, "tables", checkPackageTable(md, graph), tc.tables)
			expect(t, "imports", checkImports(md, graph), tc.block)
		})
	}
}

// expect fails t unless problems are as many as want and each contains
// its want.
func expect(t *testing.T, what string, problems, want []string) {
	t.Helper()
	if len(problems) != len(want) {
		t.Errorf("%s: problems %q, want %d matching %q", what, problems, len(want), want)
		return
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("%s: problem %q does not say %q", what, problems[i], w)
		}
	}
}
