// Command align gives modules that share a Kubernetes minor (tool modules, and the repository's own)
// the same version of every dependency module they build with, so that a cold CI run compiles
// client-go and the rest of their common code once, not once per tool and once more for our tests.
//
//	go run ./hack/tools/align -hold k8s.io/kubernetes,helm.sh/helm/v4 . hack/tools/kubernetes hack/tools/helm ...
//
// Go's build cache keys a compiled package by its module path and version and by the compiled form
// of every package it imports: two tool modules share a package only where its whole import closure
// is at the same versions. So for each module that packages of two or more members come from, every
// member is raised to the highest version any of them builds with (minimal version selection would
// pick it if one program linked them all). -hold names modules left as they are (each tool's own
// module, which hack/tools/versions.env pins). After the edits each member is tidied and the
// versions read again, until nothing changes.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/mod/semver"
)

// Module is a module a member builds with, as `go list -m` reports it.
type Module struct {
	Path    string
	Version string
	Replace *Module
}

// Edit raises one module in one member: require Path@Version, and when the member replaces Path
// by itself at another version, replace it by that version too (the build cache keys a package by
// the required version, its files come from the replacement).
type Edit struct {
	Member, Path, Version string
	Replace               bool
}

// effective is the version a member compiles Path at, and whether it may be raised:
//
//	replace          effective        raisable
//	none             Version          yes
//	Path => Path vR  vR               only to a patch of vR (an upstream pin, kept within its minor)
//	other            -                no (another module or a directory stands for it)
func effective(m Module) (version string, patchOnly, ok bool) {
	switch {
	case m.Replace == nil:
		return m.Version, false, true
	case m.Replace.Path == m.Path && m.Replace.Version != "":
		return m.Replace.Version, true, true
	default:
		return "", false, false
	}
}

// plan returns the edits that give every member the highest version of each module that two or
// more members build with. members maps a member to the modules its packages come from; hold lists
// modules never edited. A member whose replace pins a module outside the target's minor keeps it
// (the others still align among themselves).
func plan(members map[string][]Module, hold map[string]bool) []Edit {
	target := map[string]string{}
	count := map[string]int{}
	for _, mods := range members {
		for _, m := range mods {
			v, _, ok := effective(m)
			if !ok || hold[m.Path] {
				continue
			}
			count[m.Path]++
			if t, seen := target[m.Path]; !seen || semver.Compare(v, t) > 0 {
				target[m.Path] = v
			}
		}
	}
	var edits []Edit
	for member, mods := range members {
		for _, m := range mods {
			v, patchOnly, ok := effective(m)
			t := target[m.Path]
			if !ok || hold[m.Path] || count[m.Path] < 2 {
				continue
			}
			if patchOnly && semver.MajorMinor(v) != semver.MajorMinor(t) {
				continue
			}
			if v == t && m.Version == t {
				continue
			}
			edits = append(edits, Edit{Member: member, Path: m.Path, Version: t, Replace: m.Replace != nil})
		}
	}
	sort.Slice(edits, func(i, j int) bool {
		if edits[i].Member != edits[j].Member {
			return edits[i].Member < edits[j].Member
		}
		return edits[i].Path < edits[j].Path
	})
	return edits
}

// goCmd runs go in a member's directory, with the toolchain of this machine and no workspace; mod is
// the -mod setting (readonly to read: `go list -m all` with mod would write go.sum).
func goCmd(dir, mod string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod="+mod)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: go %s: %w: %s", dir, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// toolDirective matches a go.mod tool directive (`tool x` or `tool (`), not a toolchain line.
var toolDirective = regexp.MustCompile(`(?m)^tool[ \t(]`)

// built lists the modules a member's packages come from: its tools (the go.mod tool directives) or,
// without any, its own packages and their tests (a tool module of our code, or the repository's
// module, whose unit tests then compile nothing the group's tools compiled before them). -e: a
// package may embed a file the build generates first (the Pulumi provider's schema).
func built(dir string) ([]Module, error) {
	args := []string{"list", "-e", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "tool"}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	if !toolDirective.Match(gomod) {
		args = append(args[:len(args)-1], "-test", "./...")
	}
	out, err := goCmd(dir, "readonly", args...)
	if err != nil {
		return nil, err
	}
	paths := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		paths[p] = true
	}
	out, err = goCmd(dir, "readonly", "list", "-m", "-e", "-json", "all")
	if err != nil {
		return nil, err
	}
	var mods []Module
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct {
			Module
			Main bool
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: go list -m: %w", dir, err)
		}
		if !m.Main && paths[m.Path] {
			mods = append(mods, m.Module)
		}
	}
	return mods, nil
}

func run(dirs []string, hold map[string]bool, stdout io.Writer) error {
	const rounds = 8
	for round := 1; round <= rounds; round++ {
		members := map[string][]Module{}
		for _, d := range dirs {
			mods, err := built(d)
			if err != nil {
				return err
			}
			members[d] = mods
		}
		edits := plan(members, hold)
		if len(edits) == 0 {
			fmt.Fprintf(stdout, "align: %s agree (round %d)\n", strings.Join(dirs, " "), round)
			return nil
		}
		byMember := map[string][]string{}
		for _, e := range edits {
			byMember[e.Member] = append(byMember[e.Member], "-require="+e.Path+"@"+e.Version)
			if e.Replace {
				byMember[e.Member] = append(byMember[e.Member], "-replace="+e.Path+"="+e.Path+"@"+e.Version)
			}
		}
		for _, d := range dirs {
			if len(byMember[d]) == 0 {
				continue
			}
			fmt.Fprintf(stdout, "align: round %d: %s: %d modules raised\n", round, d, len(byMember[d]))
			if _, err := goCmd(d, "mod", append([]string{"mod", "edit"}, byMember[d]...)...); err != nil {
				return err
			}
			if _, err := goCmd(d, "mod", "mod", "tidy"); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("align: %s still disagree after %d rounds", strings.Join(dirs, " "), rounds)
}

func main() {
	holdFlag := flag.String("hold", "", "comma-separated modules never edited (each member's own, pinned module)")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: align [-hold module,...] <module dir> <module dir>...")
		os.Exit(2)
	}
	hold := map[string]bool{}
	for _, m := range strings.Split(*holdFlag, ",") {
		if m != "" {
			hold[m] = true
		}
	}
	if err := run(flag.Args(), hold, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
