package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"helm.sh/helm/v4/pkg/provenance"
	"sigs.k8s.io/yaml"
)

// What Helm 4 (v4.3, pkg/registry/plugin.go) accepts as a plugin in a registry: a manifest of this
// artifact type whose layers are titled <plugin>-<version>.tgz and, optionally, <that>.prov. It fetches
// only layers of the two tar media types (GenericPullOptions.AllowedMediaTypes), so the .prov, which is
// no tar, is typed as one too: any other type and `helm plugin install oci://…` never sees it.
const (
	helmPluginArtifactType = "application/vnd.helm.plugin.v1+json"
	ociEmptyConfig         = "application/vnd.oci.empty.v1+json"
	ociTitle               = "org.opencontainers.image.title"
)

// signHelmPlugin writes a Helm provenance file (.prov) for a plugin package, with Helm's own signing
// code (helm.sh/helm/v4/pkg/provenance, what `helm plugin package --sign` calls): the package's
// plugin.yaml and its SHA-256 under -name, clear-signed with an OpenPGP key from -keyring. Helm
// checks the sum under the name it installs from: the file's base name for `helm plugin install
// <file>`, <plugin>-<version>.tgz (plugin.yaml's) for `helm plugin install oci://…`.
func signHelmPlugin(args []string) error {
	fs := flag.NewFlagSet("sign-helm-plugin", flag.ExitOnError)
	in := fs.String("in", "", "the plugin package (.tgz)")
	name := fs.String("name", "", "the file name the signature names (default: the base name of -in)")
	out := fs.String("out", "", "the .prov to write (default: -in + .prov)")
	keyring := fs.String("keyring", "", "an OpenPGP keyring holding the secret key (as helm plugin package --keyring)")
	key := fs.String("key", "", "the key's name in the keyring (as helm plugin package --key); empty: its only key")
	passphraseFile := fs.String("passphrase-file", "", "a file holding the key's passphrase (as helm plugin package --passphrase-file)")
	_ = fs.Parse(args)
	if *in == "" || *keyring == "" {
		return errors.New("sign-helm-plugin: -in and -keyring are required")
	}
	if *name == "" {
		*name = path.Base(*in)
	}
	if *out == "" {
		*out = *in + ".prov"
	}
	data, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	meta, err := pluginYAML(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	signer, err := provenance.NewFromKeyring(*keyring, *key)
	if err != nil {
		return fmt.Errorf("reading the keyring %s: %w", *keyring, err)
	}
	if signer.Entity == nil { // no -key: Helm itself would need one; a keyring of one key names it
		if len(signer.KeyRing) != 1 {
			return fmt.Errorf("the keyring %s holds %d keys: name one with -key", *keyring, len(signer.KeyRing))
		}
		signer.Entity = signer.KeyRing[0]
	}
	err = signer.DecryptKey(func(string) ([]byte, error) {
		if *passphraseFile == "" {
			return nil, errors.New("the key is encrypted: give -passphrase-file")
		}
		b, err := os.ReadFile(*passphraseFile)
		return bytes.TrimRight(b, "\r\n"), err
	})
	if err != nil {
		return err
	}
	sig, err := signer.ClearSign(data, *name, meta)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, []byte(sig), 0o644)
}

// pluginYAML returns the plugin.yaml of a plugin package, normalized as Helm writes it in a .prov.
func pluginYAML(tgz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, errors.New("no plugin.yaml in the package")
		}
		if err != nil {
			return nil, err
		}
		if path.Base(h.Name) != "plugin.yaml" {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("plugin.yaml: %w", err)
		}
		return yaml.Marshal(m)
	}
}

// helmPluginArtifact writes the OCI image layout of a plugin as Helm 4 pulls it (`helm plugin install
// oci://<repository>/<plugin>:<tag>`), for `crane push <layout> <ref>`: an empty config, the package
// and its .prov as layers titled <plugin>-<version>.tgz and <plugin>-<version>.tgz.prov, whatever the
// files are called here (Helm verifies the .prov against that name).
func helmPluginArtifact(args []string) error {
	fs := flag.NewFlagSet("helm-plugin-artifact", flag.ExitOnError)
	tgz := fs.String("tgz", "", "the plugin package")
	prov := fs.String("prov", "", "its provenance file, signed for the name <plugin>-<version>.tgz")
	out := fs.String("out", "", "the OCI layout directory to write")
	_ = fs.Parse(args)
	if *tgz == "" || *prov == "" || *out == "" {
		return errors.New("helm-plugin-artifact: -tgz, -prov and -out are required")
	}
	pkg, err := os.ReadFile(*tgz)
	if err != nil {
		return err
	}
	sig, err := os.ReadFile(*prov)
	if err != nil {
		return err
	}
	meta, err := pluginYAML(pkg)
	if err != nil {
		return fmt.Errorf("%s: %w", *tgz, err)
	}
	var m struct{ Name, Version string }
	if err := yaml.Unmarshal(meta, &m); err != nil || m.Name == "" || m.Version == "" {
		return fmt.Errorf("%s: plugin.yaml has no name and version", *tgz)
	}
	title := m.Name + "-" + m.Version + ".tgz"
	if !strings.Contains(string(sig), title+": sha256:") {
		return fmt.Errorf("%s does not sign the name %s (sign-helm-plugin -name %s)", *prov, title, title)
	}

	lp, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	blob := func(mediaType string, data []byte, annotations map[string]string) (v1.Descriptor, error) {
		sum := sha256.Sum256(data)
		d := v1.Descriptor{MediaType: types.MediaType(mediaType), Size: int64(len(data)), Annotations: annotations,
			Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}}
		return d, lp.WriteBlob(d.Digest, io.NopCloser(bytes.NewReader(data)))
	}
	config, err := blob(ociEmptyConfig, []byte("{}"), nil)
	if err != nil {
		return err
	}
	pkgLayer, err := blob(string(types.OCILayer), pkg, map[string]string{ociTitle: title})
	if err != nil {
		return err
	}
	provLayer, err := blob(string(types.OCIUncompressedLayer), sig, map[string]string{ociTitle: title + ".prov"})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: helmPluginArtifactType,
		Config: config, Layers: []v1.Descriptor{pkgLayer, provLayer},
		Annotations: map[string]string{"org.opencontainers.image.title": m.Name, "org.opencontainers.image.version": m.Version},
	})
	if err != nil {
		return err
	}
	md, err := blob(string(types.OCIManifestSchema1), manifest, nil)
	if err != nil {
		return err
	}
	md.ArtifactType = helmPluginArtifactType
	return lp.AppendDescriptor(md)
}
