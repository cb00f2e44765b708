// Package version reports the build version, stamped by the Makefile with -ldflags -X.
package version

import "runtime/debug"

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
