package framework

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// A release as a user gets it: built by `make release`, pushed, signed and attested by
// hack/release/publish.sh into an OCI registry on loopback, verified with cosign. The release tools
// (crane, cosign, release-tool) are those make release builds (hack/tools/build.sh release).

// ToolBinary returns <repo>/_output/tools/bin/<name>, or an error saying how to build it.
func ToolBinary(repoRoot, name string) (string, error) {
	p := filepath.Join(repoRoot, toolsBinDir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not built (run hack/tools/build.sh %s): %w", name, name, err)
	}
	return p, nil
}

// BuildReleaseTools builds what make release and publish.sh run (a no-op when up to date).
func BuildReleaseTools(ctx context.Context, repoRoot string, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack/tools/build.sh"), "helm", "release")
	cmd.Stdout, cmd.Stderr = progress, progress
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/tools/build.sh helm release: %w", err)
	}
	return nil
}

// Registry is an OCI registry on 127.0.0.1 speaking plain HTTP: go-containerregistry's `crane
// registry serve`, its blobs in a directory.
type Registry struct {
	// Addr is host:port, e.g. 127.0.0.1:40123.
	Addr string
	p    *Process
}

var servingOn = regexp.MustCompile(`serving on port (\d+)`)

// StartRegistry serves a registry on a free loopback port until ctx ends or Stop.
func StartRegistry(ctx context.Context, repoRoot, dir string) (*Registry, error) {
	crane, err := ToolBinary(repoRoot, "crane")
	if err != nil {
		return nil, err
	}
	p, err := startProcess(ctx, os.Environ(), crane, "registry", "serve", "--address", "127.0.0.1:0", "--disk", dir)
	if err != nil {
		return nil, err
	}
	r := &Registry{p: p}
	err = Eventually(ctx, 30*time.Second, "crane registry serve to listen", func(ctx context.Context) (bool, string, error) {
		if p.Exited() {
			return false, "", fmt.Errorf("crane registry serve exited:\n%s", p.Logs())
		}
		m := servingOn.FindStringSubmatch(p.Logs())
		if m == nil {
			return false, "no 'serving on port' line yet", nil
		}
		r.Addr = "127.0.0.1:" + m[1]
		return HTTPOK(ctx, "http://"+r.Addr+"/v2/")
	})
	if err != nil {
		_ = p.Stop()
		return nil, err
	}
	return r, nil
}

// Logs are the registry's request log.
func (r *Registry) Logs() string { return r.p.Logs() }

// Stop ends the registry.
func (r *Registry) Stop() error {
	_ = r.p.Stop()
	return nil
}

// ReleaseBuild is one `make release`.
type ReleaseBuild struct {
	Version string
	// Digest is the image index's, which the charts pin.
	Digest string
	Dist   string
}

// MakeRelease runs `make release` as the interface names it (IMAGE_REPOSITORY pins the charts
// to that repository), with RELEASE_VERSION and DIST, for the given platforms (RELEASE_PLATFORMS; none: a
// release's four); its progress goes to progress.
func MakeRelease(ctx context.Context, repoRoot string, progress io.Writer, version, imageRepository, dist string, platforms ...string) (ReleaseBuild, error) {
	args := []string{"-s", "-C", repoRoot, "release", "IMAGE_REPOSITORY=" + imageRepository, "RELEASE_VERSION=" + version, "DIST=" + dist}
	if len(platforms) > 0 {
		args = append(args, "RELEASE_PLATFORMS="+strings.Join(platforms, " "))
	}
	cmd := exec.CommandContext(ctx, "make", args...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, progress
	if err := cmd.Run(); err != nil {
		return ReleaseBuild{}, fmt.Errorf("make release RELEASE_VERSION=%s: %w\n%s", version, err, stdout.String())
	}
	b := ReleaseBuild{Dist: dist}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VERSION="); ok {
			b.Version = v
		} else if v, ok := strings.CutPrefix(sc.Text(), "DIGEST="); ok {
			b.Digest = v
		}
	}
	if b.Version != version || !strings.HasPrefix(b.Digest, "sha256:") {
		return ReleaseBuild{}, fmt.Errorf("make release printed VERSION=%q DIGEST=%q, want VERSION=%s and a digest", b.Version, b.Digest, version)
	}
	return b, nil
}

// Publish runs hack/release/publish.sh with env (KEY=VALUE) added to ours and returns what it printed.
func Publish(ctx context.Context, repoRoot string, env ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack/release/publish.sh"))
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("hack/release/publish.sh: %w\n%s", err, out)
	}
	return string(out), nil
}

// Cosign is the cosign make release builds.
type Cosign struct {
	Path string
	// Env is more KEY=VALUE (COSIGN_PASSWORD).
	Env []string
}

// Run runs cosign and returns its stdout and stderr; a failure's error carries both.
func (c Cosign) Run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, c.Path, args...)
	cmd.Env = append(os.Environ(), c.Env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("cosign %s: %w\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String(), nil
}

// GenerateKeyPair writes <dir>/<prefix>.key (encrypted with the password) and <dir>/<prefix>.pub with
// `cosign generate-key-pair`.
func (c Cosign) GenerateKeyPair(ctx context.Context, dir, prefix, password string) (key, pub string, err error) {
	cmd := exec.CommandContext(ctx, c.Path, "generate-key-pair", "--output-key-prefix", prefix)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD="+password)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("cosign generate-key-pair: %w\n%s", err, out)
	}
	return filepath.Join(dir, prefix+".key"), filepath.Join(dir, prefix+".pub"), nil
}

// Statement is an in-toto statement, as `cosign verify-attestation` prints it verified.
type Statement struct {
	Type          string `json:"_type"`
	PredicateType string `json:"predicateType"`
	Subject       []struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
	Predicate json.RawMessage `json:"predicate"`
}

// VerifiedStatements decodes what `cosign verify-attestation` printed on stdout: one DSSE envelope
// per line, its payload the statement.
func VerifiedStatements(stdout string) ([]Statement, error) {
	var out []Statement
	for line := range strings.Lines(stdout) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var env struct {
			PayloadType string `json:"payloadType"`
			Payload     string `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &env); err != nil {
			return nil, fmt.Errorf("not a DSSE envelope: %w: %.200s", err, line)
		}
		raw, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			return nil, fmt.Errorf("the envelope's payload: %w", err)
		}
		var s Statement
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("the statement: %w: %.200s", err, raw)
		}
		out = append(out, s)
	}
	return out, nil
}
