// Package helmplugin is the binary's side of the Helm 4 post-renderer plugin (deploy/helm-plugin).
//
// Helm 4 runs a postrenderer/v1 plugin of the subprocess runtime as its command plus the
// --post-renderer-args, with HELM_PLUGIN_NAME and HELM_PLUGIN_DIR set, the manifests on stdin, and
// stdout and stderr captured into buffers. On a non-zero exit it reports only `plugin
// "configmap-attacher" exited with error`: the stderr buffer is never shown, not even with --debug
// (helm.sh/helm/v4 internal/plugin/runtime_subprocess.go, v4.2 and v4.3). So, run as the plugin, the
// binary writes its errors and warnings to Helm's own stderr as well (HelmStderr), checks that the
// plugin it runs in is its own version (CheckVersion), and accepts only the commands a post-renderer
// needs. Pack builds the plugin package that `make helm-plugin` writes (a release signs it), Unpacked
// the same as a directory, which Helm installs unsigned (its development mode).
package helmplugin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/internal/version"
)

// Name is the plugin's name: what `--post-renderer` names on Helm 4, and the executable's name on
// Helm 3, so one command line works on both.
const Name = "configmap-attacher"

// Dir returns the plugin's directory when Helm runs the binary as this plugin (Helm sets
// HELM_PLUGIN_NAME and HELM_PLUGIN_DIR for the plugins it runs; Helm 3 runs an executable
// post-renderer without them).
func Dir(lookup func(string) (string, bool)) (string, bool) {
	name, _ := lookup("HELM_PLUGIN_NAME")
	dir, _ := lookup("HELM_PLUGIN_DIR")
	return dir, name == Name && dir != ""
}

// metadata is what we read of plugin.yaml.
type metadata struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// CheckVersion fails unless the plugin.yaml in dir is the version the binary was packed with
// (Semver of binaryVersion): a binary swapped under an installed plugin, or a plugin.yaml from
// another release, would otherwise render with rules nobody chose.
func CheckVersion(dir, binaryVersion string) error {
	p := filepath.Join(dir, "plugin.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("the Helm plugin has no readable plugin.yaml: %w", err)
	}
	var m metadata
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("the Helm plugin's %s: %w", p, err)
	}
	if want := version.Semver(binaryVersion); m.Version != want {
		return fmt.Errorf("the Helm plugin in %s is version %s but its binary is %s: install the plugin and its binary from one "+
			"package (helm plugin uninstall %s; helm plugin install %s-%s.tgz, with its .prov beside it)", dir, m.Version, want, Name, Name, want)
	}
	return nil
}

// HelmStderr opens the standard error of the process that started this one (Helm, which runs the
// plugin's command directly) on Linux, else the controlling terminal; nil when neither opens. A
// regular file Helm writes without O_APPEND (`2>file`) is left alone: written through another open
// file description, Helm's own error message would overwrite ours.
func HelmStderr() io.WriteCloser {
	proc := fmt.Sprintf("/proc/%d/fd/2", os.Getppid())
	if st, err := os.Stat(proc); err == nil && (!st.Mode().IsRegular() || appends(os.Getppid(), 2)) {
		if f, err := os.OpenFile(proc, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			return f
		}
	}
	if f, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		return f
	}
	return nil
}

// appends reports whether process pid opened its file descriptor fd with O_APPEND (Linux fdinfo).
func appends(pid, fd int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&int64(os.O_APPEND) != 0
		}
	}
	return false
}

// versionLine is plugin.yaml's top-level version, which Pack sets.
var versionLine = regexp.MustCompile(`(?m)^version:.*$`)

// Pack writes <outDir>/configmap-attacher-<version>.tgz, the plugin package: the directory
// configmap-attacher/ holding srcDir's plugin.yaml, its version set to the binary's (Semver of
// binaryVersion, or of `<binary> version` when that is empty), and the binary. A release signs it
// (hack/release/publish.sh writes its .prov) so that `helm plugin install <file>` verifies it. The
// archive is reproducible: fixed owners, modes and times, files in a fixed order.
func Pack(ctx context.Context, srcDir, binary, binaryVersion, outDir string) (string, error) {
	files, v, err := contents(ctx, srcDir, binary, binaryVersion)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	mtime := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: Name + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: Name + "/" + f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(outDir, Name+"-"+v+".tgz")
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// Unpacked writes the package's contents as the directory <outDir>/configmap-attacher: what a
// development build installs with `helm plugin install <that directory>` (Helm verifies no signature
// for a local directory, its development mode; a package must be signed).
func Unpacked(ctx context.Context, srcDir, binary, binaryVersion, outDir string) (string, error) {
	files, _, err := contents(ctx, srcDir, binary, binaryVersion)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(outDir, Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, f := range files {
		// Replace, never rewrite in place: Helm may be running the installed binary.
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, os.FileMode(f.mode)); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

type file struct {
	name string
	mode int64
	data []byte
}

// contents are the plugin's files, plugin.yaml first, and its version.
func contents(ctx context.Context, srcDir, binary, binaryVersion string) ([]file, string, error) {
	if binaryVersion == "" {
		out, err := exec.CommandContext(ctx, binary, "version").Output()
		if err != nil {
			return nil, "", fmt.Errorf("%s version: %w", binary, err)
		}
		binaryVersion = strings.TrimSpace(string(out))
	}
	v := version.Semver(binaryVersion)
	yml, err := os.ReadFile(filepath.Join(srcDir, "plugin.yaml"))
	if err != nil {
		return nil, "", err
	}
	var m metadata
	if err := yaml.Unmarshal(yml, &m); err != nil {
		return nil, "", fmt.Errorf("%s/plugin.yaml: %w", srcDir, err)
	}
	if m.Name != Name || len(versionLine.FindAll(yml, -1)) != 1 {
		return nil, "", fmt.Errorf("%s/plugin.yaml: want name %s and one top-level version line", srcDir, Name)
	}
	yml = versionLine.ReplaceAll(yml, []byte("version: "+v))
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, "", err
	}
	return []file{{"plugin.yaml", 0o644, yml}, {Name, 0o755, bin}}, v, nil
}
