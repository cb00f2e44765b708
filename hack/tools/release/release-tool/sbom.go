package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// chartSBOM writes the CycloneDX SBOM of a packaged chart: the chart itself and the one image it
// deploys, pinned by digest (the image's own SBOM, attested on it, lists the modules in its binary).
func chartSBOM(args []string) error {
	fs := flag.NewFlagSet("chart-sbom", flag.ExitOnError)
	chart := fs.String("chart", "", "the packaged chart (.tgz)")
	name := fs.String("name", "", "the chart's name")
	version := fs.String("version", "", "the chart's version")
	image := fs.String("image", "", "the image it pins: <repository>@sha256:<hex>")
	out := fs.String("out", "", "the SBOM to write (CycloneDX JSON)")
	_ = fs.Parse(args)
	repo, digest, ok := strings.Cut(*image, "@sha256:")
	if *chart == "" || *name == "" || *version == "" || !ok || *out == "" {
		return errors.New("chart-sbom: -chart, -name, -version, -image <repository>@sha256:<hex> and -out are required")
	}
	data, err := os.ReadFile(*chart)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	imageName := repo[strings.LastIndex(repo, "/")+1:]
	imagePURL := fmt.Sprintf("pkg:oci/%s@sha256%%3A%s?repository_url=%s", imageName, digest, repo)
	type hash struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	}
	type component struct {
		BOMRef  string `json:"bom-ref"`
		Type    string `json:"type"`
		Name    string `json:"name"`
		Version string `json:"version"`
		PURL    string `json:"purl,omitempty"`
		Hashes  []hash `json:"hashes"`
	}
	type dependency struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn,omitempty"`
	}
	chartRef := "chart:" + *name + "@" + *version
	bom := struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Version     int    `json:"version"`
		Metadata    struct {
			Component component `json:"component"`
		} `json:"metadata"`
		Components   []component  `json:"components"`
		Dependencies []dependency `json:"dependencies"`
	}{BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1}
	bom.Metadata.Component = component{BOMRef: chartRef, Type: "application", Name: *name, Version: *version,
		Hashes: []hash{{"SHA-256", hex.EncodeToString(sum[:])}}}
	bom.Components = []component{{BOMRef: imagePURL, Type: "container", Name: imageName, Version: *version, PURL: imagePURL,
		Hashes: []hash{{"SHA-256", digest}}}}
	bom.Dependencies = []dependency{{Ref: chartRef, DependsOn: []string{imagePURL}}, {Ref: imagePURL}}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(bom); err != nil {
		return err
	}
	return os.WriteFile(*out, buf.Bytes(), 0o644)
}
