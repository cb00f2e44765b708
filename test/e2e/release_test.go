//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
	"github.com/configmap-attacher/configmap-attacher/test/walkthrough"
)

// A release as a user meets it: published to a registry, verified with cosign, installed from there.
// Two versions, so that the upgrade is one from a published release to the next.
const (
	releaseV1 = "1.0.0-e2e.1"
	releaseV2 = "1.0.0-e2e.2"
	// releasePlatform is what the story releases: the real node's.
	releasePlatform = "linux/amd64"
)

// releaseKeys are the project's signing keys of a loopback release, made for the test, and an
// attacker's, whose signatures must not pass for the project's.
type releaseKeys struct {
	password                 string
	cosignKey, cosignPub     string // cosign generate-key-pair
	attackerKey, attackerPub string
	pgpSecret, pgpPublic     string // the Helm plugin's OpenPGP key
	otherPGPPublic           string
}

// published is one release as publish.sh left it in the registry.
type published struct {
	framework.ReleaseBuild
	charts map[string]string // chart name -> its digest in the registry
}

// The story, end to end on loopback: make release twice with IMAGE_REPOSITORY naming a
// registry on 127.0.0.1; publish.sh pushes, signs (a cosign key, no transparency log) and attests
// both; the user verifies the image and both charts with cosign (signature, CycloneDX SBOM, SLSA
// provenance) and sees a tampered image and chart fail; installs the Helm 4 plugin from the registry,
// verified with the project's OpenPGP key; installs the controller chart from the registry, and the
// real kubelet pulls the image by the digest the chart pins; the write-up's walkthrough passes
// against that controller; helm upgrade to the second release loses nothing.
func TestRealNodeInstallsASignedReleaseFromARegistry(t *testing.T) {
	t.Parallel()
	n := realNode(t)
	ctx := context.Background()
	start := time.Now()
	must(t, framework.BuildReleaseTools(ctx, e2e.root, logWriter{t}))
	cosign := framework.Cosign{Path: releaseTool(t, "cosign")}
	reg := startRegistry(t)
	imageRepo := reg.Addr + "/configmap-attacher"
	chartRepo := "oci://" + reg.Addr + "/charts"
	keys := givenReleaseKeys(t, cosign)
	t.Logf("given: a registry at %s (crane registry serve), the project's cosign and OpenPGP keys made for the test", reg.Addr)

	// When: two releases are built and published.
	var rels []published
	for _, v := range []string{releaseV1, releaseV2} {
		built := time.Now()
		// linux/amd64 alone, the platform the node runs: each other one is a cold compile of
		// everything, and that a release builds all four, byte for byte again, is make release-check's.
		b, err := framework.MakeRelease(ctx, e2e.root, logWriter{t}, v, imageRepo, filepath.Join(t.TempDir(), "dist"), releasePlatform)
		must(t, err)
		t.Logf("when: make release IMAGE_REPOSITORY=%s RELEASE_VERSION=%s: image index %s (%s)", imageRepo, v, b.Digest,
			time.Since(built).Round(time.Second))
		pushed := time.Now()
		out, err := framework.Publish(ctx, e2e.root, "DIST="+b.Dist, "DRY_RUN=0", "IMAGE_REPOSITORY="+imageRepo,
			"CHART_REPOSITORY="+chartRepo, "PLAIN_HTTP=1", "COSIGN_KEY="+keys.cosignKey, "COSIGN_PASSWORD="+keys.password,
			"HELM_PLUGIN_KEYRING="+keys.pgpSecret)
		must(t, err)
		var said []string // its own lines, not crane's and cosign's progress
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, "[publish]") {
				said = append(said, strings.TrimSpace(line))
			}
		}
		t.Logf("when: hack/release/publish.sh DRY_RUN=0 PLAIN_HTTP=1 COSIGN_KEY=… (%s):\n%s", time.Since(pushed).Round(time.Second),
			strings.Join(said, "\n"))
		rel := published{ReleaseBuild: b, charts: map[string]string{}}
		for _, c := range []string{"configmap-attacher", "base-app"} {
			rel.charts[c] = craneDigest(t, reg.Addr+"/charts/"+c+":"+v)
		}
		if got := craneDigest(t, imageRepo+":"+v); got != b.Digest {
			t.Fatalf("the registry serves %s:%s at %s, make release built %s", imageRepo, v, got, b.Digest)
		}
		rels = append(rels, rel)
	}

	// Then: what a user verifies before installing, for the image and both charts (cosign's whole
	// output shown for the first release's image, in the log).
	for i, rel := range rels {
		verifyArtifact(t, cosign, keys.cosignPub, imageRepo+":"+rel.Version, rel.Digest, rel, "image", i == 0)
		for _, c := range []string{"configmap-attacher", "base-app"} {
			verifyArtifact(t, cosign, keys.cosignPub, reg.Addr+"/charts/"+c+":"+rel.Version, rel.charts[c], rel, c, false)
		}
	}
	t.Logf("then: cosign verify and verify-attestation (cyclonedx, slsaprovenance1) pass for the image and both charts of %s and %s",
		releaseV1, releaseV2)

	v1 := rels[0]
	tamperedImageFails(t, cosign, keys, imageRepo, v1)
	tamperedChartFails(t, cosign, keys, reg.Addr, chartRepo, v1)

	h := framework.Helm{Path: helm4Path(t), Kubeconfig: e2e.cluster.Kubeconfig, Home: t.TempDir()}
	installSignedPlugin(t, h, keys, reg.Addr, v1)

	// When: the controller chart is installed from the registry, its pod on the real node.
	must(t, n.AllowRegistry(ctx, logWriter{t}, reg.Addr))
	s := story(t, "e2e-release-app", walkthrough.Controller{})
	ns := givenNamespace(t, "e2e-release")
	hostNetwork := hostNetworkPlugin(t, h)
	install := func(verb string, rel published) *corev1.Pod {
		t.Helper()
		// Each time on free host ports: during the rolling update the new pod runs beside the old one
		// on the one real node, as two pods on two nodes would (on the same host ports the scheduler
		// would keep the new one Pending, and the old one would never go).
		args := append([]string{verb, "cma", chartRepo + "/configmap-attacher", "--version", rel.Version, "--plain-http",
			"-n", ns, "--wait", "--timeout", "3m", "--post-renderer", hostNetwork}, realNodeControllerValues(t, s.Namespace)...)
		took := time.Now()
		if _, err := h.Run(ctx, args...); err != nil {
			pods, _ := e2e.cluster.Kubectl(ctx, "get", "pods", "-n", ns, "-o", "wide")
			t.Fatalf("%v\npods:\n%s\nthe registry's last requests:\n%s", err, pods, lastLines(reg.Logs(), 20))
		}
		pod := controllerPodPulledByDigest(t, n, ns, imageRepo+"@"+rel.Digest)
		t.Logf("then: helm %s cma %s/configmap-attacher --version %s --plain-http (%s): pod %s on %s runs %s, pulled by that digest (imageID %s)",
			verb, chartRepo, rel.Version, time.Since(took).Round(time.Millisecond), pod.Name, pod.Spec.NodeName,
			pod.Spec.Containers[0].Image, pod.Status.ContainerStatuses[0].ImageID)
		return pod
	}
	first := install("install", v1)
	t.Cleanup(func() {
		_, _ = h.Run(context.Background(), "uninstall", "cma", "-n", ns, "--wait", "--no-hooks", "--ignore-not-found")
	})

	// Then: the write-up's walkthrough, attached by that controller.
	must(t, s.Walkthrough(ctx))
	t.Logf("then: the walkthrough passes against the controller installed from the registry")

	// When: a deploy pauses in its canary (old and new revisions both live) and, meanwhile, helm
	// upgrade replaces the controller with the second release's. Then: nothing is lost.
	a := &app{t: t, ns: s.Namespace, name: s.Rollout}
	canaryCM, canaryRS := a.deploy("a canary across the upgrade")
	must(t, e2e.cluster.WaitAttached(ctx, attachWithin, s.Namespace, refs.ConfigMap, canaryCM, canaryRS))
	before := configState(t, s.Namespace)
	second := install("upgrade", rels[1])
	if second.Name == first.Name {
		t.Fatalf("the controller pod %s was not replaced by the upgrade", first.Name)
	}
	a.promote(canaryRS)
	cm, rs := a.deploy("after the upgrade")
	must(t, e2e.cluster.WaitAttached(ctx, attachWithin, s.Namespace, refs.ConfigMap, cm, rs))
	after := configState(t, s.Namespace)
	for name, was := range before {
		if now := after[name]; now != was {
			t.Fatalf("ConfigMap %s changed across the upgrade:\nbefore: %s\nafter:  %s", name, was, now)
		}
	}
	noPodRefused(t, s.Namespace, ns)
	t.Logf("then: helm upgrade to %s during a canary: the %d config revisions (%s) are untouched (ownerReferences, finalizers, "+
		"resourceVersion); the canary was promoted, the new controller attached the next revision %s to ReplicaSet %s; no pod was "+
		"refused; the story took %s", releaseV2, len(before), strings.Join(slices.Sorted(maps.Keys(before)), ", "), cm, rs.Name,
		time.Since(start).Round(time.Second))
}

func releaseTool(t *testing.T, name string) string {
	t.Helper()
	p, err := framework.ToolBinary(e2e.root, name)
	must(t, err)
	return p
}

func helm4Path(t *testing.T) string {
	t.Helper()
	p, err := framework.HelmBinary(e2e.root, framework.Helm4)
	must(t, err)
	return p
}

func startRegistry(t *testing.T) *framework.Registry {
	t.Helper()
	r, err := framework.StartRegistry(context.Background(), e2e.root, t.TempDir())
	must(t, err)
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// givenReleaseKeys makes the project's keys and an attacker's: cosign key pairs, and OpenPGP keys for
// the Helm plugin (release-tool openpgp-key; a real project makes its key once with gpg).
func givenReleaseKeys(t *testing.T, cosign framework.Cosign) releaseKeys {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	k := releaseKeys{password: "e2e-release-password"}
	var err error
	k.cosignKey, k.cosignPub, err = cosign.GenerateKeyPair(ctx, dir, "project", k.password)
	must(t, err)
	k.attackerKey, k.attackerPub, err = cosign.GenerateKeyPair(ctx, dir, "attacker", k.password)
	must(t, err)
	pgp := func(name string) (secret, public string) {
		secret, public = filepath.Join(dir, name+"-secret.asc"), filepath.Join(dir, name+".asc")
		out, err := exec.Command(releaseTool(t, "release-tool"), "openpgp-key", "-name", name, "-email", name+"@example.invalid",
			"-secret-out", secret, "-public-out", public).CombinedOutput()
		if err != nil {
			t.Fatalf("release-tool openpgp-key: %v\n%s", err, out)
		}
		return secret, public
	}
	k.pgpSecret, k.pgpPublic = pgp("configmap-attacher-e2e-release")
	_, k.otherPGPPublic = pgp("someone-else")
	return k
}

func crane(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(releaseTool(t, "crane"), args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("crane %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func craneDigest(t *testing.T, ref string) string { return crane(t, "digest", "--insecure", ref) }

// cosignFlags are what verifying from a loopback release takes: the project's public key, no
// transparency log (publish.sh signed offline), a plain-HTTP registry.
func cosignFlags(pub string) []string {
	return []string{"--key", pub, "--insecure-ignore-tlog", "--allow-http-registry"}
}

// simpleSigning is the payload `cosign verify` prints for each signature it verified.
type simpleSigning struct {
	Critical struct {
		Type  string `json:"type"`
		Image struct {
			Digest string `json:"docker-manifest-digest"`
		} `json:"image"`
	} `json:"critical"`
}

// verifyArtifact verifies what a user verifies for ref (by tag, as a user names it): the signature
// covers the digest the registry serves, and the SBOM and provenance attestations are signed for it
// and say what was built (expected values from git, the dist/ files and go.mod, not from the tools).
func verifyArtifact(t *testing.T, cosign framework.Cosign, pub, ref, digest string, rel published, what string, show bool) {
	t.Helper()
	ctx := context.Background()
	stdout, stderr, err := cosign.Run(ctx, append(append([]string{"verify"}, cosignFlags(pub)...), ref)...)
	must(t, err)
	// Cosign v3 lists every Sigstore bundle attached to the digest, the attestations too (their
	// predicate type as the type): the signature is the one of type cosign/sign.
	var sigs []simpleSigning
	must(t, json.Unmarshal([]byte(stdout), &sigs))
	if !slices.ContainsFunc(sigs, func(s simpleSigning) bool { return s.Critical.Type == "https://sigstore.dev/cosign/sign/v1" }) ||
		slices.ContainsFunc(sigs, func(s simpleSigning) bool { return s.Critical.Image.Digest != digest }) {
		t.Fatalf("cosign verify %s: want a signature of %s, got:\n%s", ref, digest, stdout)
	}
	if show {
		t.Logf("then: cosign verify %s %s:\n%s%s", strings.Join(cosignFlags(pub), " "), ref, stderr, stdout)
	} else {
		t.Logf("then: cosign verify %s: %d signed bundles for %s", ref, len(sigs), digest)
	}

	commit := gitHead(t)
	for _, typ := range []string{"cyclonedx", "slsaprovenance1"} {
		stdout, stderr, err := cosign.Run(ctx, append(append([]string{"verify-attestation", "--type", typ}, cosignFlags(pub)...), ref)...)
		must(t, err)
		sts, err := framework.VerifiedStatements(stdout)
		must(t, err)
		if len(sts) == 0 {
			t.Fatalf("cosign verify-attestation --type %s %s printed no statement", typ, ref)
		}
		for _, st := range sts {
			if len(st.Subject) != 1 || "sha256:"+st.Subject[0].Digest["sha256"] != digest {
				t.Fatalf("%s attestation of %s: subject %+v, want %s", typ, ref, st.Subject, digest)
			}
			switch typ {
			case "cyclonedx":
				expectSBOM(t, st, rel, what)
			case "slsaprovenance1":
				expectProvenance(t, st, rel, commit)
			}
		}
		t.Logf("then: cosign verify-attestation --type %s %s: %d statement(s) of %s for %s", typ, ref, len(sts), sts[0].PredicateType, digest)
		if show && typ == "slsaprovenance1" {
			t.Logf("then: cosign verify-attestation --type slsaprovenance1 %s | jq -r .payload | base64 -d | jq '.predicate.buildDefinition | .externalParameters, (.internalParameters.goBuilds[] | select(.output.name == \"configmap-attacher_linux_amd64\"))':\n%s%s",
				ref, stderr, provenanceExcerpt(t, sts[0]))
		}
	}
}

// expectSBOM checks a CycloneDX attestation: the image's lists the modules of the binary (client-go at
// go.mod's version), a chart's names the chart and the image by the digest it pins.
func expectSBOM(t *testing.T, st framework.Statement, rel published, what string) {
	t.Helper()
	if st.PredicateType != "https://cyclonedx.org/bom" {
		t.Fatalf("SBOM predicate type %s", st.PredicateType)
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name, Version, PURL string
		} `json:"components"`
	}
	must(t, json.Unmarshal(st.Predicate, &bom))
	var purls []string
	for _, c := range bom.Components {
		purls = append(purls, c.PURL)
	}
	switch what {
	case "image":
		want := "pkg:golang/k8s.io/client-go@" + goModVersion(t, "k8s.io/client-go")
		if bom.BOMFormat != "CycloneDX" || !slices.ContainsFunc(purls, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Fatalf("the image's SBOM does not list %s: %s %v", want, bom.BOMFormat, purls)
		}
	default:
		want := "pkg:oci/configmap-attacher@sha256%3A" + strings.TrimPrefix(rel.Digest, "sha256:")
		if bom.Metadata.Component.Name != what || bom.Metadata.Component.Version != rel.Version ||
			len(purls) != 1 || !strings.HasPrefix(purls[0], want) {
			t.Fatalf("%s's SBOM: component %+v, components %v; want %s %s and %s…", what, bom.Metadata.Component, purls, what, rel.Version, want)
		}
	}
}

// expectProvenance checks the SLSA provenance: this commit, the release's version, and each binary's
// exact `go build`, whose output is the file in dist/.
func expectProvenance(t *testing.T, st framework.Statement, rel published, commit string) {
	t.Helper()
	if st.PredicateType != "https://slsa.dev/provenance/v1" {
		t.Fatalf("provenance predicate type %s", st.PredicateType)
	}
	var p struct {
		BuildDefinition struct {
			ExternalParameters struct {
				Source struct {
					Digest map[string]string `json:"digest"`
				} `json:"source"`
				Version string `json:"version"`
			} `json:"externalParameters"`
			InternalParameters struct {
				GoBuilds []struct {
					Env    []string `json:"env"`
					Args   []string `json:"args"`
					Output struct {
						Name   string            `json:"name"`
						Digest map[string]string `json:"digest"`
					} `json:"output"`
				} `json:"goBuilds"`
			} `json:"internalParameters"`
			ResolvedDependencies []struct{ URI string } `json:"resolvedDependencies"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
		} `json:"runDetails"`
	}
	must(t, json.Unmarshal(st.Predicate, &p))
	bd := p.BuildDefinition
	if bd.ExternalParameters.Source.Digest["gitCommit"] != commit || bd.ExternalParameters.Version != rel.Version || p.RunDetails.Builder.ID == "" {
		t.Fatalf("provenance: source %v, version %s, builder %q; want commit %s, version %s", bd.ExternalParameters.Source.Digest,
			bd.ExternalParameters.Version, p.RunDetails.Builder.ID, commit, rel.Version)
	}
	wantArgs := []string{"go", "build", "-trimpath", "-gcflags=all=-dwarf=false", "-ldflags",
		"-s -w -X github.com/configmap-attacher/configmap-attacher/internal/version.stamped=" + rel.Version,
		"-o", "configmap-attacher_linux_amd64", "./cmd/configmap-attacher"}
	var seen []string
	for _, b := range bd.InternalParameters.GoBuilds {
		seen = append(seen, b.Output.Name)
		data, err := os.ReadFile(filepath.Join(rel.Dist, b.Output.Name))
		must(t, err)
		sum := sha256.Sum256(data)
		if b.Output.Digest["sha256"] != hex.EncodeToString(sum[:]) {
			t.Fatalf("provenance: %s has sha256 %s, dist/ holds %x", b.Output.Name, b.Output.Digest["sha256"], sum)
		}
		if b.Output.Name == "configmap-attacher_linux_amd64" &&
			(!slices.Equal(b.Args, wantArgs) || !slices.Contains(b.Env, "GOOS=linux") || !slices.Contains(b.Env, "CGO_ENABLED=0")) {
			t.Fatalf("provenance: the linux/amd64 build is env %q args %q; want GOOS=linux CGO_ENABLED=0 and %q", b.Env, b.Args, wantArgs)
		}
	}
	if want := []string{"configmap-attacher_linux_amd64"}; !slices.Equal(seen, want) {
		t.Fatalf("provenance: go builds of %v, want %v", seen, want)
	}
	want := "pkg:golang/k8s.io/client-go@" + goModVersion(t, "k8s.io/client-go")
	if !slices.ContainsFunc(bd.ResolvedDependencies, func(d struct{ URI string }) bool { return d.URI == want }) {
		t.Fatalf("provenance: resolvedDependencies lack %s", want)
	}
}

// provenanceExcerpt is the provenance's external parameters and its linux/amd64 go build, as jq prints them.
func provenanceExcerpt(t *testing.T, st framework.Statement) string {
	t.Helper()
	var p struct {
		BuildDefinition struct {
			ExternalParameters json.RawMessage `json:"externalParameters"`
			InternalParameters struct {
				GoBuilds []json.RawMessage `json:"goBuilds"`
			} `json:"internalParameters"`
		} `json:"buildDefinition"`
	}
	must(t, json.Unmarshal(st.Predicate, &p))
	show := []json.RawMessage{p.BuildDefinition.ExternalParameters}
	for _, raw := range p.BuildDefinition.InternalParameters.GoBuilds {
		var b struct{ Output struct{ Name string } }
		must(t, json.Unmarshal(raw, &b))
		if b.Output.Name == "configmap-attacher_linux_amd64" {
			show = append(show, raw)
		}
	}
	var out strings.Builder
	for _, raw := range show {
		var v any
		must(t, json.Unmarshal(raw, &v))
		b, err := json.MarshalIndent(v, "", "  ")
		must(t, err)
		out.Write(append(b, '\n'))
	}
	return out.String()
}

// tamperedImageFails re-pushes the release's tag with other content signed by the attacker's key:
// cosign verify with the project's key refuses it. The tag is put back afterwards.
func tamperedImageFails(t *testing.T, cosign framework.Cosign, keys releaseKeys, imageRepo string, rel published) {
	t.Helper()
	ctx := context.Background()
	tag := imageRepo + ":" + rel.Version
	tampered := crane(t, "mutate", "--insecure", "--label", "org.example.tampered=true", "--tag", tag, imageRepo+"@"+rel.Digest)
	cosign.Env = []string{"COSIGN_PASSWORD=" + keys.password}
	_, _, err := cosign.Run(ctx, "sign", "--yes", "--key", keys.attackerKey, "--use-signing-config=false", "--tlog-upload=false",
		"--allow-http-registry", tampered)
	must(t, err)
	_, _, err = cosign.Run(ctx, append(append([]string{"verify"}, cosignFlags(keys.attackerPub)...), tag)...)
	must(t, err) // it is signed, by the attacker
	stdout, stderr, err := cosign.Run(ctx, append(append([]string{"verify"}, cosignFlags(keys.cosignPub)...), tag)...)
	if err == nil {
		t.Fatalf("cosign verify of the tampered %s (%s) with the project's key passed:\n%s", tag, tampered, stdout)
	}
	t.Logf("then: %s re-pushed as %s and signed with another key: cosign verify with the project's key fails:\n%s", tag, tampered,
		lastLines(stderr, 2))
	crane(t, "tag", "--insecure", imageRepo+"@"+rel.Digest, rel.Version)
}

// tamperedChartFails re-pushes the chart's version with its image pointed elsewhere: cosign verify
// refuses it. The tag is put back afterwards.
func tamperedChartFails(t *testing.T, cosign framework.Cosign, keys releaseKeys, registry, chartRepo string, rel published) {
	t.Helper()
	ctx := context.Background()
	h := framework.Helm{Path: helm4Path(t), Kubeconfig: e2e.cluster.Kubeconfig, Home: t.TempDir()}
	dir := t.TempDir()
	helmRun(t, h, "pull", chartRepo+"/configmap-attacher", "--version", rel.Version, "--plain-http", "--untar", "-d", dir)
	values := filepath.Join(dir, "configmap-attacher", "values.yaml")
	b, err := os.ReadFile(values)
	must(t, err)
	evil := strings.Replace(string(b), registry+"/configmap-attacher", "attacker.example/configmap-attacher", 1)
	if evil == string(b) {
		t.Fatalf("the published chart's values do not name %s/configmap-attacher", registry)
	}
	must(t, os.WriteFile(values, []byte(evil), 0o644))
	helmRun(t, h, "package", filepath.Join(dir, "configmap-attacher"), "-d", dir)
	helmRun(t, h, "push", filepath.Join(dir, "configmap-attacher-"+rel.Version+".tgz"), chartRepo, "--plain-http")
	ref := registry + "/charts/configmap-attacher:" + rel.Version
	if d := craneDigest(t, ref); d == rel.charts["configmap-attacher"] {
		t.Fatalf("the tampered chart has the original digest %s", d)
	}
	stdout, stderr, err := cosign.Run(ctx, append(append([]string{"verify"}, cosignFlags(keys.cosignPub)...), ref)...)
	if err == nil {
		t.Fatalf("cosign verify of the tampered chart %s passed:\n%s", ref, stdout)
	}
	t.Logf("then: %s re-pushed with its image at attacker.example: cosign verify fails:\n%s", ref, lastLines(stderr, 2))
	crane(t, "tag", "--insecure", registry+"/charts/configmap-attacher@"+rel.charts["configmap-attacher"], rel.Version)
}

// installSignedPlugin installs the Helm 4 plugin from the registry as the README says: verified with
// the project's public key (and refused with another key), then runs it as the post-renderer. The
// downloaded package, its .prov beside it, verifies too.
func installSignedPlugin(t *testing.T, h framework.Helm, keys releaseKeys, registry string, rel published) {
	t.Helper()
	ctx := context.Background()
	// A download, saved under the name Helm expects (it takes the plugin's directory from it).
	asset := filepath.Join(rel.Dist, "configmap-attacher-helm-plugin_"+rel.Version+"_linux_amd64.tgz")
	file := filepath.Join(t.TempDir(), "configmap-attacher-"+rel.Version+".tgz")
	for _, ext := range []string{"", ".prov"} {
		b, err := os.ReadFile(asset + ext)
		must(t, err)
		must(t, os.WriteFile(file+ext, b, 0o644))
	}
	fromFile := framework.Helm{Path: h.Path, Kubeconfig: h.Kubeconfig, Home: t.TempDir()}
	if out := helmRun(t, fromFile, "plugin", "install", file, "--keyring", keys.pgpPublic); !strings.Contains(out, "Plugin Hash Verified: sha256:") {
		t.Fatalf("helm plugin install %s: want a verified install, got:\n%s", file, out)
	}
	t.Logf("then: the release asset %s saved as %s (and its .prov): helm plugin install --keyring <the project's public key> verifies it",
		filepath.Base(asset), filepath.Base(file))
	ref := "oci://" + registry + "/helm-plugins/configmap-attacher:" + rel.Version + "-linux-amd64"
	out, err := h.Run(ctx, "plugin", "install", ref, "--plain-http", "--keyring", keys.otherPGPPublic)
	if err == nil || !strings.Contains(err.Error(), "plugin verification failed: openpgp: signature made by unknown entity") {
		t.Fatalf("helm plugin install %s with another keyring: want a verification failure, got %v\n%s", ref, err, out)
	}
	t.Logf("then: helm plugin install %s --plain-http --keyring <another key> fails:\n%s", ref, lastLines(err.Error(), 2))
	out = helmRun(t, h, "plugin", "install", ref, "--plain-http", "--keyring", keys.pgpPublic)
	if !strings.Contains(out, "Plugin Hash Verified: sha256:") || !strings.Contains(out, "Installed plugin: configmap-attacher") {
		t.Fatalf("helm plugin install %s: want a verified install, got:\n%s", ref, out)
	}
	t.Logf("then: helm plugin install %s --plain-http --keyring <the project's public key>:\n%s", ref, out)

	rendered := helmRun(t, h, append([]string{"template", "app", testdataPath("plain-chart"), "-n", "prod"},
		postRenderer("prod", "-select=configmap/app-config")...)...)
	objs, err := framework.ParseManifests(rendered)
	must(t, err)
	var names []string
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			names = append(names, o.GetName())
		}
	}
	if len(names) != 1 || !strings.HasPrefix(names[0], "app-config-") {
		t.Fatalf("helm template --post-renderer configmap-attacher: want app-config renamed to app-config-<hash>, got %v", names)
	}
	t.Logf("then: the installed plugin renders: app-config became %s", names[0])
}

// controllerPodPulledByDigest waits for the controller's one pod on the real node, Ready, running
// image (the repository at the digest the chart pins) as the kubelet pulled it.
func controllerPodPulledByDigest(t *testing.T, n *framework.RealNode, ns, image string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	must(t, framework.Eventually(context.Background(), 2*time.Minute, "one Ready controller pod running "+image,
		func(ctx context.Context) (bool, string, error) {
			pods, err := e2e.cluster.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			var seen []string
			for i := range pods.Items {
				p := &pods.Items[i]
				seen = append(seen, p.Name+" "+p.Spec.Containers[0].Image+": "+framework.DescribePod(p))
				if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == image && framework.ReadyPods([]corev1.Pod{*p}) == 1 {
					pod = p
				}
			}
			return pod != nil && len(pods.Items) == 1, strings.Join(seen, " | "), nil
		}))
	if pod.Spec.NodeName != n.Name {
		t.Fatalf("the controller pod %s runs on %s, not the real node %s", pod.Name, pod.Spec.NodeName, n.Name)
	}
	if id := pod.Status.ContainerStatuses[0].ImageID; id != image {
		t.Fatalf("the kubelet ran image %s, want %s (the chart's pinned digest)", id, image)
	}
	return pod
}

// configState is each ConfigMap's ownerReferences, finalizers and resourceVersion, as one string.
func configState(t *testing.T, ns string) map[string]string {
	t.Helper()
	cms, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	out := map[string]string{}
	for _, cm := range cms.Items {
		if cm.Name == "kube-root-ca.crt" {
			continue
		}
		b, err := json.Marshal(struct {
			Owners     []metav1.OwnerReference
			Finalizers []string
			RV         string
		}{cm.OwnerReferences, cm.Finalizers, cm.ResourceVersion})
		must(t, err)
		out[cm.Name] = string(b)
	}
	if len(out) == 0 {
		t.Fatalf("no config revisions in %s", ns)
	}
	return out
}

// noPodRefused fails on any FailedCreate event (a ReplicaSet whose pod the API server refused) in the
// namespaces, and on a ReplicaSet short of ready pods.
func noPodRefused(t *testing.T, namespaces ...string) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range namespaces {
		evs, err := e2e.cluster.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreate"})
		must(t, err)
		if len(evs.Items) > 0 {
			t.Fatalf("a pod was refused in %s: %s", ns, evs.Items[0].Message)
		}
		rss, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		must(t, err)
		for i := range rss.Items {
			rs := &rss.Items[i]
			must(t, framework.Eventually(ctx, 60*time.Second, "ReplicaSet "+rs.Name+" to have its pods ready", func(ctx context.Context) (bool, string, error) {
				cur, err := e2e.cluster.Kube.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				want := int32(1)
				if cur.Spec.Replicas != nil {
					want = *cur.Spec.Replicas
				}
				return cur.Status.ReadyReplicas == want, fmt.Sprintf("%d/%d ready", cur.Status.ReadyReplicas, want), nil
			}))
		}
	}
}

func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", e2e.root, "rev-parse", "HEAD").Output()
	must(t, err)
	return strings.TrimSpace(string(out))
}

// goModVersion is the version of a module the main module requires (go.mod).
func goModVersion(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module)
	cmd.Dir = e2e.root
	out, err := cmd.Output()
	must(t, err)
	return strings.TrimSpace(string(out))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
