package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "3d19833abcdef0123456789"}, {Key: "vcs.time", Value: "2026-11-28T00:22:25Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		link, module string
		settings     []debug.BuildSetting
		want         string
	}{
		{"v1.2.3", "v0.0.0-x", vcs, "v1.2.3"},
		{"dev", "v0.0.0-20261128002225-3d19833abcde+dirty", vcs, "v0.0.0-20261128002225-3d19833abcde+dirty"},
		{"", "(devel)", vcs, "devel-3d19833abcde-dirty"},
		{"dev", "(devel)", nil, "dev"},
		{"", "", nil, "dev"},
	} {
		in := fromBuildInfo(tc.link, &debug.BuildInfo{Main: debug.Module{Path: "m", Version: tc.module}, Settings: tc.settings, GoVersion: "go1.26"})
		if in.Version != tc.want {
			t.Errorf("link %q, module %q: version %q, want %q", tc.link, tc.module, in.Version, tc.want)
		}
	}
	in := fromBuildInfo("v1.2.3", &debug.BuildInfo{Main: debug.Module{Path: "m", Version: "(devel)"}, Settings: vcs, GoVersion: "go1.26"})
	s := in.String("cellctl")
	for _, want := range []string{"cellctl v1.2.3\n", "revision: 3d19833abcdef0123456789 (modified)\n", "revision time: 2026-11-28T00:22:25Z\n", "module version: (devel)\n", "go: go1.26 "} {
		if !strings.Contains(s, want) {
			t.Errorf("String lacks %q:\n%s", want, s)
		}
	}
	if r := Read(""); r.Version == "" || r.GoVersion == "" {
		t.Errorf("Read: %+v", r)
	}
}
