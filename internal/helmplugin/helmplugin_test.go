package helmplugin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"Helm 4 running this plugin", map[string]string{"HELM_PLUGIN_NAME": Name, "HELM_PLUGIN_DIR": "/p"}, true},
		{"Helm 3's executable post-renderer", map[string]string{}, false},
		{"another plugin's environment", map[string]string{"HELM_PLUGIN_NAME": "diff", "HELM_PLUGIN_DIR": "/p"}, false},
		{"no directory", map[string]string{"HELM_PLUGIN_NAME": Name}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, ok := Dir(lookup(tc.env))
			if ok != tc.ok || (ok && dir != "/p") {
				t.Fatalf("Dir = %q, %v; want ok %v", dir, ok, tc.ok)
			}
		})
	}
}

func writePlugin(t *testing.T, yml string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckVersion(t *testing.T) {
	dir := writePlugin(t, "apiVersion: v1\nname: configmap-attacher\nversion: 0.2.0\n")
	if err := CheckVersion(dir, "v0.2.0"); err != nil {
		t.Fatalf("same version: %v", err)
	}
	err := CheckVersion(dir, "v0.3.0")
	if err == nil || !strings.Contains(err.Error(), "is version 0.2.0 but its binary is 0.3.0") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("another version: want a one-line error naming both versions, got %v", err)
	}
	if err := CheckVersion(t.TempDir(), "v0.2.0"); err == nil || !strings.Contains(err.Error(), "no readable plugin.yaml") {
		t.Fatalf("no plugin.yaml: got %v", err)
	}
}

// fakeBinary is an executable printing a version, standing in for configmap-attacher.
func fakeBinary(t *testing.T, v string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "configmap-attacher")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+v+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPack(t *testing.T) {
	ctx := context.Background()
	src := writePlugin(t, "apiVersion: v1\ntype: postrenderer/v1\nname: configmap-attacher\n# set by Pack\nversion: 0.0.0\nruntime: subprocess\n")
	bin := fakeBinary(t, "v1.4.0")
	out := t.TempDir()
	path, err := Pack(ctx, src, bin, "", out)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "configmap-attacher-1.4.0.tgz"); path != want {
		t.Fatalf("packed %s, want %s", path, want)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, first)
	if got := files["configmap-attacher/plugin.yaml"]; !strings.Contains(got.data, "\nversion: 1.4.0\n") || !strings.Contains(got.data, "# set by Pack") || got.mode != 0o644 {
		t.Fatalf("plugin.yaml %o:\n%s", got.mode, got.data)
	}
	if got := files["configmap-attacher/configmap-attacher"]; got.mode != 0o755 || !strings.Contains(got.data, "echo v1.4.0") {
		t.Fatalf("binary %o: %q", got.mode, got.data)
	}
	if len(files) != 3 {
		t.Fatalf("want the directory, plugin.yaml and the binary, got %v", files)
	}

	// Installed (extracted), the plugin passes its binary's check.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte(files["configmap-attacher/plugin.yaml"].data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckVersion(dir, "v1.4.0"); err != nil {
		t.Fatal(err)
	}

	if _, err := Pack(ctx, src, bin, "", out); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again) {
		t.Fatal("packing the same input twice gave different archives")
	}
}

// Unpacked is the package's contents as a directory (a development install), the same bytes and modes;
// writing it again over an installed one replaces the files.
func TestUnpackedHoldsWhatThePackageHolds(t *testing.T) {
	ctx := context.Background()
	src := writePlugin(t, "apiVersion: v1\ntype: postrenderer/v1\nname: configmap-attacher\nversion: 0.0.0\nruntime: subprocess\n")
	bin := fakeBinary(t, "v1.4.0")
	out := t.TempDir()
	pkg, err := Pack(ctx, src, bin, "", out)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	packed := untar(t, data)
	for range 2 {
		dir, err := Unpacked(ctx, src, bin, "", out)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(out, "configmap-attacher"); dir != want {
			t.Fatalf("unpacked into %s, want %s", dir, want)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 {
			t.Fatalf("want plugin.yaml and the binary in %s, got %v", dir, entries)
		}
		for _, name := range []string{"plugin.yaml", "configmap-attacher"} {
			p := filepath.Join(dir, name)
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			want := packed["configmap-attacher/"+name]
			if string(got) != want.data || int64(st.Mode().Perm()) != want.mode {
				t.Fatalf("%s: %o %q, the package holds %o %q", name, st.Mode().Perm(), got, want.mode, want.data)
			}
		}
	}
}

func TestPackRefusesAnotherPlugin(t *testing.T) {
	src := writePlugin(t, "apiVersion: v1\nname: other\nversion: 0.0.0\n")
	if _, err := Pack(context.Background(), src, fakeBinary(t, "v1.0.0"), "", t.TempDir()); err == nil {
		t.Fatal("packed a plugin.yaml of another name")
	}
}

// make release packs binaries built for other platforms, which cannot be run: the version it was
// stamped with is given instead, and the binary is not asked.
func TestPackWithAGivenVersionDoesNotRunTheBinary(t *testing.T) {
	src := writePlugin(t, "apiVersion: v1\ntype: postrenderer/v1\nname: configmap-attacher\nversion: 0.0.0\nruntime: subprocess\n")
	bin := filepath.Join(t.TempDir(), "configmap-attacher")
	if err := os.WriteFile(bin, []byte("not an executable of this platform"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	path, err := Pack(context.Background(), src, bin, "0.1.0-dev.3.gabcdef0", out)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "configmap-attacher-0.1.0-dev.3.gabcdef0.tgz"); path != want {
		t.Fatalf("packed %s, want %s", path, want)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := untar(t, data)["configmap-attacher/plugin.yaml"].data; !strings.Contains(got, "\nversion: 0.1.0-dev.3.gabcdef0\n") {
		t.Fatalf("plugin.yaml:\n%s", got)
	}
}

type entry struct {
	mode int64
	data string
}

func untar(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = entry{h.Mode, string(data)}
	}
}

func TestAppends(t *testing.T) {
	dir := t.TempDir()
	plain, err := os.Create(filepath.Join(dir, "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	appending, err := os.OpenFile(filepath.Join(dir, "appending"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer appending.Close()
	if appends(os.Getpid(), int(plain.Fd())) {
		t.Error("a file opened without O_APPEND: appends = true")
	}
	if !appends(os.Getpid(), int(appending.Fd())) {
		t.Error("a file opened with O_APPEND: appends = false")
	}
}
