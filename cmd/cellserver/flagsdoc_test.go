package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFlagsDoc keeps docs/flags.md true: every flag cellserver parses has
// a row there with its default, and every row names a flag it parses.
func TestFlagsDoc(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CELL_") {
			t.Setenv(name, "") // the defaults, not the environment's
			os.Unsetenv(name)
		}
	}
	var help strings.Builder
	if _, err := parseFlags([]string{"--help"}, &help); err != errHelp {
		t.Fatalf("--help: %v", err)
	}
	// flag.PrintDefaults: "  -name type" then the usage, indented,
	// ending with (default "x") or (default x) when the default is not
	// the zero value.
	flags := map[string]string{}
	var cur string
	defRE := regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
	for _, line := range strings.Split(help.String(), "\n") {
		if m := regexp.MustCompile(`^  -(\S+)`).FindStringSubmatch(line); m != nil {
			cur = m[1]
			flags[cur] = ""
			continue
		}
		if m := defRE.FindStringSubmatch(line); m != nil && cur != "" {
			flags[cur] = m[1]
		}
	}
	if len(flags) < 40 {
		t.Fatalf("parsed %d flags from --help:\n%s", len(flags), help.String())
	}

	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| (?:`([^`]*)`|–) \\|").FindAllStringSubmatch(string(b), -1)
	documented := map[string]bool{}
	for _, r := range rows {
		name, def := r[1], r[2]
		if documented[name] {
			t.Errorf("docs/flags.md lists --%s twice", name)
		}
		documented[name] = true
		want, ok := flags[name]
		switch {
		case !ok:
			t.Errorf("docs/flags.md lists --%s, which cellserver does not take", name)
		case def != want:
			t.Errorf("docs/flags.md gives --%s the default %q; cellserver's is %q", name, def, want)
		}
	}
	for name := range flags {
		if !documented[name] {
			t.Errorf("--%s is not in docs/flags.md", name)
		}
	}
}
