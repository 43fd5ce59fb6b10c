package ops

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// A Build is what a program's binary says of how it was built, from
// runtime/debug.ReadBuildInfo: for its version command, the build_info
// metric and the OpenTelemetry resource.
type Build struct {
	// Version is the release the binary is, its module's tag ("v0.1.0"):
	// go install ...@v0.1.0, or go build in a checkout of the tag whose
	// tree is clean. "" for any other build: a commit between tags (a
	// pseudo-version), a modified tree ("+dirty"), or none ("(devel)").
	Version string
	// Revision is the VCS commit the binary was built from, its first 12
	// hex digits; "" if the build recorded none (a go install from the
	// module cache, go build -buildvcs=false, go run).
	Revision string
	// Modified says the work tree had changes Revision does not hold.
	Modified bool
	// Time is Revision's commit time, as the build recorded it (RFC 3339,
	// UTC); "" without a revision.
	Time string
	// GoVersion is the Go toolchain that built it ("go1.26.0").
	GoVersion string
}

// ReadBuild returns the running binary's Build.
func ReadBuild() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{GoVersion: runtime.Version()}
	}
	return buildOf(bi)
}

// buildOf returns the Build bi describes.
func buildOf(bi *debug.BuildInfo) Build {
	b := Build{GoVersion: bi.GoVersion}
	if b.GoVersion == "" {
		b.GoVersion = runtime.Version()
	}
	if release(bi.Main.Version) {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			b.Modified, _ = strconv.ParseBool(s.Value)
		case "vcs.time":
			b.Time = s.Value
		}
	}
	if b.Modified {
		b.Version = "" // a tag's tree, changed: not the release
	}
	return b
}

// semver matches a module version: vMAJOR.MINOR.PATCH, a pre-release and
// build metadata optional.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// pseudo matches the end of a pseudo-version, the version the go command
// gives a commit that is no tag: a 14-digit UTC time and a 12-digit
// revision (v0.0.0-20261207052354-a0db0abec50e).
var pseudo = regexp.MustCompile(`[-.][0-9]{14}-[0-9a-f]{12}$`)

// release reports whether v is a release's version: a tag, not "(devel)",
// a pseudo-version or a version with build metadata ("+dirty").
func release(v string) bool {
	return semver.MatchString(v) && !strings.Contains(v, "+") && !pseudo.MatchString(v)
}

// Short returns the build in one word, for the OpenTelemetry resource's
// service.version: the release (v0.1.0), else the revision
// (a0db0abec50e, a0db0abec50e+modified), else "devel".
func (b Build) Short() string {
	switch {
	case b.Version != "":
		return b.Version
	case b.Revision != "" && b.Modified:
		return b.Revision + "+modified"
	case b.Revision != "":
		return b.Revision
	}
	return "devel"
}

// Line returns what prog's version command prints: the release, or
// "devel", then the commit, whether the tree was modified, the commit's
// time and the Go version, those the build recorded:
//
//	l4lb v0.1.0 (go1.26.0)
//	l4lb devel (commit a0db0abec50e, modified, 2026-12-07T05:23:54Z, go1.26.0)
func (b Build) Line(prog string) string {
	v := b.Version
	if v == "" {
		v = "devel"
	}
	var about []string
	if b.Revision != "" {
		about = append(about, "commit "+b.Revision)
		if b.Modified {
			about = append(about, "modified")
		}
	}
	if b.Time != "" {
		about = append(about, b.Time)
	}
	about = append(about, b.GoVersion)
	return prog + " " + v + " (" + strings.Join(about, ", ") + ")"
}

// labels returns the build_info metric's labels, what Line says: version
// (the release, or "devel"), revision, modified ("true" or "false"; none
// without a revision), commit_time and goversion. A label the build did not
// record is empty, which Prometheus reads as absent.
func (b Build) labels() map[string]string {
	v, modified := b.Version, ""
	if v == "" {
		v = "devel"
	}
	if b.Revision != "" {
		modified = strconv.FormatBool(b.Modified)
	}
	return map[string]string{"version": v, "revision": b.Revision, "modified": modified, "commit_time": b.Time, "goversion": b.GoVersion}
}
