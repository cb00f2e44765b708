package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The SLSA build provenance (v1.0, https://slsa.dev/provenance/v1) of a release, as the predicate of
// an in-toto statement: `cosign attest --type slsaprovenance1 --predicate <file>` wraps it in the
// statement whose subject is the artifact attested (the image index, a chart). One predicate
// describes the whole `make release`: every artifact of it was built from the same source by the same
// commands.
const (
	slsaBuildType = "https://github.com/configmap-attacher/configmap-attacher/blob/main/hack/release/release.sh"
	sourceURI     = "git+https://github.com/configmap-attacher/configmap-attacher"
)

type slsaProvenance struct {
	BuildDefinition buildDefinition `json:"buildDefinition"`
	RunDetails      runDetails      `json:"runDetails"`
}

type buildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   externalParameters   `json:"externalParameters"`
	InternalParameters   internalParameters   `json:"internalParameters"`
	ResolvedDependencies []resourceDescriptor `json:"resolvedDependencies"`
}

// externalParameters are what the person releasing chose.
type externalParameters struct {
	Source          resourceDescriptor `json:"source"`
	Version         string             `json:"version"`
	ImageRepository string             `json:"imageRepository"`
}

// internalParameters are what release.sh did with them: each `go build` exactly as it ran (from the
// source's root; -o names the file as it is in the release), the commit time every timestamp is set
// to, and whether the tree had uncommitted changes to tracked files.
type internalParameters struct {
	GoBuilds        []goBuild `json:"goBuilds"`
	SourceDateEpoch int64     `json:"sourceDateEpoch"`
	VCSModified     bool      `json:"vcsModified"`
}

type goBuild struct {
	Env    []string           `json:"env"`
	Args   []string           `json:"args"`
	Output resourceDescriptor `json:"output"`
}

type resourceDescriptor struct {
	URI    string            `json:"uri,omitempty"`
	Name   string            `json:"name,omitempty"`
	Digest map[string]string `json:"digest,omitempty"`
}

type runDetails struct {
	Builder builder `json:"builder"`
}

type builder struct {
	ID      string            `json:"id"`
	Version map[string]string `json:"version,omitempty"`
}

// invocations are files of NUL-separated words, KEY=VALUE environment first, then the command.
type invocations []string

func (i *invocations) String() string     { return strings.Join(*i, ",") }
func (i *invocations) Set(v string) error { *i = append(*i, v); return nil }

// slsaProvenanceCmd writes the SLSA provenance predicate of a release from its `go build` invocations (as
// release.sh recorded them) and the binaries they wrote: the modules come from the binaries' own build
// information (go version -m), so the provenance says what is in them. The commit is given (Go stamps
// none in a git worktree, whose .git is a file) and must be the one a binary's VCS stamp names, if any.
func slsaProvenanceCmd(args []string) error {
	fs := flag.NewFlagSet("provenance", flag.ExitOnError)
	var invs invocations
	fs.Var(&invs, "invocation", "a file holding one `go build` as it ran: NUL-separated env (KEY=VALUE) then arguments, -o naming the output's base name (repeat)")
	dist := fs.String("dist", "", "the directory holding the outputs the invocations name")
	version := fs.String("version", "", "the release version")
	imageRepository := fs.String("image-repository", "", "the repository the charts pull the image from")
	commit := fs.String("commit", "", "the source commit (git rev-parse HEAD)")
	modified := fs.Bool("modified", false, "the tree had uncommitted changes to tracked files")
	builderID := fs.String("builder-id", "", "the builder's id (a URI: the release job's workflow, or this script on a named machine)")
	epoch := fs.Int64("source-date-epoch", 0, "the commit's time, in Unix seconds")
	toolVersions := fs.String("tool-versions", "", "comma-separated name=version of the tools the release ran (helm, release-tool, cyclonedx-gomod)")
	out := fs.String("out", "", "the predicate file to write (JSON)")
	_ = fs.Parse(args)
	if len(invs) == 0 || *dist == "" || *version == "" || *commit == "" || *builderID == "" || *out == "" {
		return errors.New("provenance: -invocation, -dist, -version, -commit, -builder-id and -out are required")
	}
	p := slsaProvenance{
		BuildDefinition: buildDefinition{
			BuildType: slsaBuildType,
			ExternalParameters: externalParameters{
				Version: *version, ImageRepository: *imageRepository,
			},
			InternalParameters: internalParameters{SourceDateEpoch: *epoch, VCSModified: *modified},
		},
		RunDetails: runDetails{Builder: builder{ID: *builderID, Version: map[string]string{}}},
	}
	var goVersion string
	modules := map[string]resourceDescriptor{}
	for _, f := range invs {
		b, err := goBuildOf(f, *dist)
		if err != nil {
			return err
		}
		bi, err := buildinfo.ReadFile(filepath.Join(*dist, b.Output.Name))
		if err != nil {
			return fmt.Errorf("%s: %w", b.Output.Name, err)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if rev := settings["vcs.revision"]; rev != "" && rev != *commit {
			return fmt.Errorf("%s: Go stamped commit %s in it, not %s", b.Output.Name, rev, *commit)
		}
		if goVersion != "" && bi.GoVersion != goVersion {
			return fmt.Errorf("%s: built by %s, the others by %s", b.Output.Name, bi.GoVersion, goVersion)
		}
		goVersion = bi.GoVersion
		for _, m := range bi.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			d := resourceDescriptor{URI: "pkg:golang/" + m.Path + "@" + m.Version}
			if m.Sum != "" {
				// The in-toto digest set's dirHash: Go's module hash, as go.sum holds it.
				d.Digest = map[string]string{"dirHash": m.Sum}
			}
			modules[d.URI] = d
		}
		p.BuildDefinition.InternalParameters.GoBuilds = append(p.BuildDefinition.InternalParameters.GoBuilds, b)
	}
	src := resourceDescriptor{URI: sourceURI, Digest: map[string]string{"gitCommit": *commit}}
	p.BuildDefinition.ExternalParameters.Source = src
	deps := []resourceDescriptor{src, {URI: "pkg:golang/toolchain@" + goVersion, Name: "go"}}
	uris := make([]string, 0, len(modules))
	for u := range modules {
		uris = append(uris, u)
	}
	sort.Strings(uris)
	for _, u := range uris {
		deps = append(deps, modules[u])
	}
	p.BuildDefinition.ResolvedDependencies = deps
	p.RunDetails.Builder.Version["go"] = goVersion
	for _, tv := range strings.Split(*toolVersions, ",") {
		if name, v, ok := strings.Cut(tv, "="); ok {
			p.RunDetails.Builder.Version[name] = v
		}
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}

// goBuildOf reads one recorded invocation and the SHA-256 of the file it wrote.
func goBuildOf(file, dist string) (goBuild, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return goBuild{}, err
	}
	words := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	var b goBuild
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		b.Env, words = append(b.Env, words[0]), words[1:]
	}
	b.Args = words
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		return goBuild{}, fmt.Errorf("%s: not a go build: %q", file, words)
	}
	for i, w := range words {
		if w == "-o" && i+1 < len(words) {
			b.Output.Name = words[i+1]
		}
	}
	if b.Output.Name == "" || strings.Contains(b.Output.Name, "/") {
		return goBuild{}, fmt.Errorf("%s: want -o <base name of the output>, got %q", file, words)
	}
	data, err := os.ReadFile(filepath.Join(dist, b.Output.Name))
	if err != nil {
		return goBuild{}, err
	}
	sum := sha256.Sum256(data)
	b.Output.Digest = map[string]string{"sha256": hex.EncodeToString(sum[:])}
	return b, nil
}
