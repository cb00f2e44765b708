// Package version reports the build version, stamped by the Makefile with -ldflags -X.
package version

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// stamped is set at link time (-X .../internal/version.stamped=v1.2.3); never assigned at run time.
var stamped string

// Get returns the stamped version, else the module version Go recorded, else "devel".
func Get() string {
	if stamped != "" {
		return stamped
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// semverRE is SemVer 2.0's own regular expression (semver.org), without a leading "v": what Helm 4
// requires of a plugin's version.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Semver turns a version as Get returns it (a tag "v1.2.3", a Go pseudo-version, a `git describe`
// such as "a8c6d3c-dirty", "devel") into a strict SemVer 2.0 version, as a Helm plugin's version
// must be: the tag without its "v", or 0.0.0-<the version, each character outside [0-9A-Za-z-] made
// a "-">. The Helm plugin's plugin.yaml carries Semver of its binary's version.
func Semver(v string) string {
	if s := strings.TrimPrefix(v, "v"); semverRE.MatchString(s) {
		return s
	}
	return "0.0.0-" + strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return '-'
	}, v)
}
