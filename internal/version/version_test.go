package version

import "testing"

func TestSemver(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v0.1.0", "0.1.0"},
		{"0.1.0", "0.1.0"},
		{"v1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5"},
		{"v0.1.0-3-gabc1234", "0.1.0-3-gabc1234"},
		{"v0.0.0-20261125033000-a8c6d3c12345+dirty", "0.0.0-20261125033000-a8c6d3c12345+dirty"},
		{"a8c6d3c-dirty", "0.0.0-a8c6d3c-dirty"},
		{"devel", "0.0.0-devel"},
		{"e2e", "0.0.0-e2e"},
		{"v1.2", "0.0.0-v1-2"},
		{"v01.2.3", "0.0.0-v01-2-3"},
		{"1.2.3-01", "0.0.0-1-2-3-01"}, // a numeric pre-release identifier with a leading zero is not SemVer
	} {
		got := Semver(tc.in)
		if got != tc.want {
			t.Errorf("Semver(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !semverRE.MatchString(got) {
			t.Errorf("Semver(%q) = %q is not SemVer 2.0", tc.in, got)
		}
	}
}
