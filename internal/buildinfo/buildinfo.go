// Package buildinfo describes the running binary's build for cellctl
// version, cellserver --version and the version a server publishes with
// its member entry: the version set at link time (-ldflags
// "-X main.version=..."), else the main module's version (which go build
// stamps from the VCS: a pseudo-version, +dirty for a modified tree),
// with the VCS revision, its time and whether the tree was modified
// (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is a binary's build.
type Info struct {
	// Version is the -X main.version of the link, else the module
	// version, else "devel-" and the revision's first 12 digits (with
	// "-dirty" when modified), else "dev".
	Version string `json:"version"`
	// ModuleVersion is the main module's version as the build recorded
	// it ("(devel)" for a build without VCS information).
	ModuleVersion string `json:"module_version,omitempty"`
	Module        string `json:"module,omitempty"`
	// Revision, Time and Modified are the vcs.revision, vcs.time and
	// vcs.modified build settings.
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Read describes this binary; linkVersion is its main.version variable
// ("dev" or "" when the link did not set it).
func Read(linkVersion string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	return fromBuildInfo(linkVersion, bi)
}

func fromBuildInfo(linkVersion string, bi *debug.BuildInfo) Info {
	in := Info{ModuleVersion: bi.Main.Version, Module: bi.Main.Path, GoVersion: bi.GoVersion,
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if in.GoVersion == "" {
		in.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	switch {
	case linkVersion != "" && linkVersion != "dev":
		in.Version = linkVersion
	case in.ModuleVersion != "" && in.ModuleVersion != "(devel)":
		in.Version = in.ModuleVersion
	case in.Revision != "":
		in.Version = "devel-" + in.Revision[:min(12, len(in.Revision))]
		if in.Modified {
			in.Version += "-dirty"
		}
	default:
		in.Version = "dev"
	}
	return in
}

// Version is Read(linkVersion).Version: the version a server publishes.
func Version(linkVersion string) string { return Read(linkVersion).Version }

// String describes the build on several lines: the program's name and
// version, then the revision, its time and the Go version.
func (in Info) String(program string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s\n", program, in.Version)
	if in.Revision != "" {
		modified := ""
		if in.Modified {
			modified = " (modified)"
		}
		fmt.Fprintf(&sb, "revision: %s%s\n", in.Revision, modified)
	}
	if in.Time != "" {
		fmt.Fprintf(&sb, "revision time: %s\n", in.Time)
	}
	if in.ModuleVersion != "" && in.ModuleVersion != in.Version {
		fmt.Fprintf(&sb, "module version: %s\n", in.ModuleVersion)
	}
	fmt.Fprintf(&sb, "go: %s %s\n", in.GoVersion, in.Platform)
	return sb.String()
}
