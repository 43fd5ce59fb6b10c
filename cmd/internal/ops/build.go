package ops

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// A Build is what a program's binary says of how it was built, from
// runtime/debug.ReadBuildInfo: for -version, the build_info metric and the
// OpenTelemetry resource.
type Build struct {
	// Version is the main module's version ("v0.2.0", or a pseudo-version
	// go build derives from the VCS), "(devel)" if the build has none.
	Version string
	// Revision is the VCS revision the binary was built from, with
	// "+dirty" if the work tree had changes; "unknown" if the build did
	// not record one (go build -buildvcs=false, or go run).
	Revision string
	// GoVersion is the Go toolchain that built it ("go1.26.0").
	GoVersion string
}

// ReadBuild returns the running binary's Build.
func ReadBuild() Build {
	b := Build{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	if bi.GoVersion != "" {
		b.GoVersion = bi.GoVersion
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "unknown" {
		b.Revision += "+dirty"
	}
	return b
}

// Line returns what prog -version prints: "l4lb v0.2.0 (REVISION, go1.26.0)".
func (b Build) Line(prog string) string {
	return fmt.Sprintf("%s %s (%s, %s)", prog, b.Version, b.Revision, b.GoVersion)
}
