// release-tool writes the parts of a release no other tool writes reproducibly here (make release,
// hack/release/release.sh):
//
//	release-tool oci-image -out dist/x_oci-image.tar -version 0.1.0 -source-date-epoch 1764000000 \
//	  -etc hack/image -binary linux/amd64=dist/x_linux_amd64 -binary linux/arm64=dist/x_linux_arm64
//	release-tool retime-tgz -in chart.tgz -out dist/chart.tgz -source-date-epoch 1764000000
//	release-tool provenance -dist dist -invocation F... -version 0.1.0 -builder-id URI -out dist/x.provenance.json
//	release-tool chart-sbom -chart dist/chart.tgz -name c -version 0.1.0 -image repo@sha256:… -out dist/c.sbom.cdx.json
//
// and what publishing needs (hack/release/publish.sh):
//
//	release-tool sign-helm-plugin -in plugin.tgz -keyring secring -key NAME [-passphrase-file F] [-name N] [-out F.prov]
//	release-tool helm-plugin-artifact -tgz plugin.tgz -prov plugin.tgz.prov -out layout/
//	release-tool openpgp-key -name N -secret-out F -public-out F    (a throwaway signing key)
//
// oci-image writes the multi-platform image as an OCI image layout in a tar archive, from binaries
// already built: no registry, no container engine, no emulation (the image is FROM scratch, so nothing
// runs for the foreign platform). go-containerregistry computes the layers, manifests, index and
// digests; this program only says what goes in and keeps every byte reproducible (fixed file times and
// owners, the image's creation time from -source-date-epoch). Each image holds two layers: /etc/passwd
// and /etc/group (user nonroot, 65532), and the binary at /configmap-attacher; it runs as 65532:65532
// with ENTRYPOINT ["/configmap-attacher"], the contract of hack/image/Containerfile. The layout's
// index.json names the image index by -version (org.opencontainers.image.ref.name); the last stdout
// line is DIGEST=<the image index's digest>.
//
// provenance writes the SLSA provenance predicate (provenance.go), chart-sbom a chart's CycloneDX SBOM
// (sbom.go); sign-helm-plugin and helm-plugin-artifact sign the Helm 4 plugin and shape it as Helm
// pulls it from a registry (helmplugin.go); openpgp-key makes a throwaway key pair (openpgp.go).
//
// retime-tgz rewrites a gzipped tar (what helm package writes, stamping the current time on every
// entry) with every entry's time set to -source-date-epoch and no owner names, keeping the order and
// the contents.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(platform, "linux/") {
		return fmt.Errorf("want linux/ARCH=PATH, got %q", v)
	}
	b[platform] = path
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release-tool COMMAND FLAGS (commands: "+strings.Join(commandNames(), ", ")+")")
		os.Exit(2)
	}
	run, ok := commands()[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "release-tool: unknown command %q (commands: %s)\n", os.Args[1], strings.Join(commandNames(), ", "))
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "release-tool:", err)
		os.Exit(1)
	}
}

// commands are release-tool's sub-commands by name.
func commands() map[string]func(args []string) error {
	return map[string]func(args []string) error{
		"oci-image":            ociImage,
		"retime-tgz":           retimeTgz,
		"provenance":           slsaProvenanceCmd,
		"chart-sbom":           chartSBOM,
		"sign-helm-plugin":     signHelmPlugin,
		"helm-plugin-artifact": helmPluginArtifact,
		"openpgp-key":          openPGPKey,
	}
}

func commandNames() []string {
	var names []string
	for n := range commands() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func ociImage(args []string) error {
	fs := flag.NewFlagSet("oci-image", flag.ExitOnError)
	bins := binaries{}
	out := fs.String("out", "", "the OCI layout archive to write (tar)")
	version := fs.String("version", "", "the release version: the image's tag and label")
	epoch := fs.Int64("source-date-epoch", 0, "the image's creation time and every file's, in Unix seconds (the commit's time)")
	etc := fs.String("etc", "", "directory holding the image's passwd and group files")
	source := fs.String("source", "https://github.com/configmap-attacher/configmap-attacher", "org.opencontainers.image.source")
	fs.Var(bins, "binary", "linux/ARCH=PATH: the binary for a platform (repeat)")
	_ = fs.Parse(args)
	if *out == "" || *version == "" || *etc == "" || len(bins) == 0 {
		return fmt.Errorf("oci-image: -out, -version, -etc and at least one -binary are required")
	}
	digest, err := write(*out, *version, *source, *etc, time.Unix(*epoch, 0).UTC(), bins)
	if err != nil {
		return err
	}
	fmt.Printf("DIGEST=%s\n", digest)
	return nil
}

func retimeTgz(args []string) error {
	fs := flag.NewFlagSet("retime-tgz", flag.ExitOnError)
	in := fs.String("in", "", "the gzipped tar to read")
	out := fs.String("out", "", "where to write it")
	epoch := fs.Int64("source-date-epoch", 0, "every entry's time, in Unix seconds")
	_ = fs.Parse(args)
	if *in == "" || *out == "" {
		return fmt.Errorf("retime-tgz: -in and -out are required")
	}
	src, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer src.Close()
	zr, err := gzip.NewReader(src)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	t := time.Unix(*epoch, 0).UTC()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = t, time.Time{}, time.Time{}
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		h.PAXRecords = nil
		h.Format = tar.FormatUnknown
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(*out, buf.Bytes(), 0o644)
}

func write(out, version, source, etc string, created time.Time, bins binaries) (v1.Hash, error) {
	passwd, err := os.ReadFile(filepath.Join(etc, "passwd"))
	if err != nil {
		return v1.Hash{}, err
	}
	group, err := os.ReadFile(filepath.Join(etc, "group"))
	if err != nil {
		return v1.Hash{}, err
	}
	etcLayer, err := layer(created, file{"etc/", nil, 0o755}, file{"etc/group", group, 0o644}, file{"etc/passwd", passwd, 0o644})
	if err != nil {
		return v1.Hash{}, err
	}
	platforms := make([]string, 0, len(bins))
	for p := range bins {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		bin, err := os.ReadFile(bins[p])
		if err != nil {
			return v1.Hash{}, err
		}
		binLayer, err := layer(created, file{"configmap-attacher", bin, 0o755})
		if err != nil {
			return v1.Hash{}, err
		}
		img, err := image(created, version, source, strings.TrimPrefix(p, "linux/"), etcLayer, binLayer)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: strings.TrimPrefix(p, "linux/")},
		}})
	}
	idx = mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  source,
		"org.opencontainers.image.created": created.Format(time.RFC3339),
	}).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}

	dir, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version})); err != nil {
		return v1.Hash{}, err
	}
	return digest, archive(dir, out, created)
}

// image is one platform's image: the two layers and the runtime contract.
func image(created time.Time, version, source, arch string, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: created}
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config.User = "65532:65532"
	cfg.Config.Entrypoint = []string{"/configmap-attacher"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "configmap-attacher",
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  source,
	}
	return mutate.ConfigFile(img, cfg)
}

type file struct {
	name string
	data []byte
	mode int64
}

// layer is a gzipped tar of files, owned by root, all with time t: the same files give the same digest.
func layer(t time.Time, files ...file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: t, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// archive tars the layout directory in a fixed order with fixed times and owners.
func archive(dir, out string, t time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: t, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: st.Size()}
		if st.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !st.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
