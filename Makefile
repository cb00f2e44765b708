# Every target is a thin wrapper over a script or `go`, so CI, the README and developers run the same thing.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -o pipefail -ec
GO ?= go
# SemVer: the tag vX.Y.Z on HEAD, else CHANGELOG.md's coming release as X.Y.Z-dev.<commits>.g<commit>.
VERSION ?= $(shell hack/release/version.sh 2>/dev/null || echo devel)
LDFLAGS := -s -w -X github.com/configmap-attacher/configmap-attacher/internal/version.stamped=$(VERSION)
# One set of build settings for every go command a target runs (vet, the unit tests, the e2e tests' binary,
# make image, the e2e release's linux/amd64 build, the soak): the image and the release must be static
# and -trimpath, and a package built with other settings is compiled again, so with these the module's
# ~900 packages are compiled once on a cold machine instead of once per setting. The race detector
# needs cgo: test-unit's race run and test-race turn it back on. No DWARF: the binaries are linked
# without it (-w) and tests print stacks from the symbol table; with the tools' build settings
# (hack/tools/build.sh) and versions (hack/tools/update-modules.sh), the tests find client-go and
# k8s.io/api already compiled by the kubernetes tool's build.
export CGO_ENABLED ?= 0
export GOFLAGS ?= -trimpath -gcflags=all=-dwarf=false

.PHONY: all build helm-plugin image release release-check tools cluster-up cluster-down argocd-up argocd-down flux-up flux-down docs test test-unit test-unit-race test-docs test-rules test-workflows test-race test-e2e soak-short fuzz demo clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/configmap-attacher ./cmd/configmap-attacher

## helm-plugin: the Helm 4 post-renderer plugin with the binary: _output/helm-plugin/configmap-attacher-<version>.tgz
## (a release signs it: helm plugin install verifies its .prov) and the same as the directory
## _output/helm-plugin/configmap-attacher, a development install: `helm plugin install _output/helm-plugin/configmap-attacher`
## (Helm verifies no signature for a local directory; deploy/helm-plugin, docs/helm.md).
helm-plugin: build
	$(GO) run ./hack/helm-plugin -plugin deploy/helm-plugin -binary bin/configmap-attacher -out _output/helm-plugin -dir

## image: the container image with no registry (podman, FROM scratch): localhost/configmap-attacher:$(VERSION)
## and its docker-archive _output/image/configmap-attacher.tar (hack/image/build.sh).
image:
	VERSION='$(VERSION)' LDFLAGS='$(LDFLAGS)' hack/image/build.sh

## release: dist/ with the binaries (linux, darwin; amd64, arm64), their SBOMs, the multi-platform image as an
## OCI layout, the packaged charts (image pinned by digest; IMAGE_REPOSITORY=<registry>/<path> names where from) and
## their SBOMs, the Helm 4 plugin, the SLSA provenance, the dashboard and SHA256SUMS (hack/release/release.sh); it
## builds the release tools (crane, cosign, ...) into _output/tools/bin. RELEASE_VERSION=X.Y.Z overrides the version;
## hack/release/publish.sh pushes, signs and attests a release.
release:
	hack/release/release.sh

## release-check: make release twice from a clean clone of HEAD; checks SHA256SUMS, the binaries' platforms,
## the image index and that the second build is byte-identical (hack/release/check.sh).
release-check:
	hack/release/check.sh

## tools: build the local control plane (etcd, kube-*, kwok, Argo Rollouts, helm, Argo CD, Flux), promtool, pulumi and actionlint into
## _output/tools (the 1.35 compatibility control plane is built by make test-e2e, or `hack/tools/build.sh kubernetes-compat etcd-compat`).
tools:
	hack/tools/build.sh

## cluster-up: start (or reuse) the local cluster; the last line printed is KUBECONFIG=<path>.
cluster-up:
	hack/cluster/up.sh

cluster-down:
	hack/cluster/down.sh

## argocd-up: run Argo CD (application controller, repo server, redis; no API server) on the local cluster.
argocd-up:
	hack/cluster/argocd.sh up

argocd-down:
	hack/cluster/argocd.sh down

## flux-up: run Flux (source-controller, helm-controller) on the local cluster.
flux-up:
	hack/cluster/flux.sh up

flux-down:
	hack/cluster/flux.sh down

## demo: the write-up replayed on the local control plane (or DEMO_KUBECONFIG=<path>), narrated.
## ARGOCD=1: the write-up deployed through Argo CD (an Application of charts/base-app, the attacher its Sync hook).
## FLUX=1: the write-up deployed through Flux (a HelmRelease of charts/base-app, the attacher its Helm post-upgrade hook).
demo:
	$(GO) run ./hack/demo $(if $(DEMO_KUBECONFIG),-kubeconfig $(DEMO_KUBECONFIG)) $(if $(filter 1,$(ARGOCD)),-argocd) $(if $(filter 1,$(FLUX)),-flux)

## test: unit tests (with the fuzz targets' seed corpora), the docs, the alert rules, the GitHub Actions workflows,
## then the e2e tests on a local control plane (or the cluster KUBECONFIG names), then a short soak.
test: test-unit test-docs test-rules test-workflows test-e2e soak-short

test-unit: test-unit-race
	@echo "== make $@"
	$(GO) vet ./...
	$(GO) test ./...

## test-unit-race: the unit tests of the packages sharing state between goroutines, under the race detector
## (part of test-unit; CI runs it first, while the kubernetes tool builds, since it compiles every dependency anew).
test-unit-race:
	@echo "== make $@"
	CGO_ENABLED=1 $(GO) test -race ./internal/caches/... ./internal/protection/... ./internal/pinning/...

HELM_DOCS := _output/tools/bin/helm-docs

## docs: regenerate docs/reference.md (every command's flags, from the binary's own flag sets) and each chart's
## README.md (helm-docs, from its values.yaml comments and README.md.gotmpl).
docs:
	hack/tools/build.sh helm-docs
	$(GO) run ./hack/docs -write -helm-docs $(HELM_DOCS)

## test-docs: the docs check (internal/doccheck, no network): every relative link and anchor resolves, every flag and
## chart value named exists, no commit hash or run/issue history in the user docs, README.md fits a screen, and
## docs/reference.md and the charts' READMEs are what `make docs` generates.
test-docs:
	@echo "== make $@"
	hack/tools/build.sh helm-docs
	$(GO) run ./hack/docs -helm-docs $(HELM_DOCS)

## test-rules: promtool test rules test/rules/configmap-attacher.test.yaml on the chart's PrometheusRule.
test-rules: tools
	@echo "== make $@"
	hack/test-rules.sh

## test-workflows: actionlint (with shellcheck on run: scripts) and the pin rule on .github/workflows, then a few
## mistakes made in a copy of release.yml, each of which must be refused (hack/test-workflows.sh); and the scripts CI
## passes its logs through take each line as it comes (hack/test-ci.sh).
test-workflows: tools
	@echo "== make $@"
	hack/test-workflows.sh
	hack/test-ci.sh

## fuzz: each fuzz target for FUZZTIME (default 1m), one after the other; findings land in testdata/fuzz.
FUZZTIME ?= 1m
fuzz:
	hack/fuzz.sh $(FUZZTIME)

## test-race: the unit tests under the race detector (slow on a cold cache: client-go is rebuilt).
test-race:
	CGO_ENABLED=1 $(GO) test -race ./...

## test-e2e: every e2e test on the local control plane (Kubernetes KUBERNETES_VERSION), then the compatibility story
## alone on a local cluster of the oldest supported minor (KUBERNETES_COMPAT_VERSION, hack/cluster/up.sh KUBERNETES_COMPAT),
## whose control plane builds beside the other stories at the lowest priority (hack/test-e2e.sh).
## The release story publishes to a loopback registry with the release tools (crane, cosign), built first when missing.
## E2E_PARALLEL stories run at once (go test's default is the core count, 2 on CI): most of a story's time is
## waiting on the control plane, and each has namespaces of its own.
E2E_PARALLEL ?= 6
test-e2e: tools
	GO='$(GO)' E2E_PARALLEL='$(E2E_PARALLEL)' hack/test-e2e.sh

## soak-short: 35 random steps of deploys, zero-touch pinning, config-triggered revisions and faults
## (test/soak/README.md) on its own local cluster "soak" (or the cluster KUBECONFIG names); fails if config
## in use was lost, unused config (snapshots included) leaked, a pod was unpinned or read the wrong content,
## or refused under Ignore, or a config edit made other revisions than expected.
## Seed 14875 draws every fault kind and every pinning and config-trigger step kind with the webhook, seed
## 2638 every fault kind of admission policy mode (the CRD and a table deleted, an outage across a deploy).
## Both run at once, on clusters "soak" and "soak-policy" (hack/soak-short.sh; one after the other on KUBECONFIG's).
soak-short: tools
	@echo "== make $@"
	GO='$(GO)' hack/soak-short.sh

## clean: delete every local cluster first (their processes would outlive _output), then the builds.
clean:
	for d in _output/kwok/clusters/*/; do [ -d "$$d" ] && CLUSTER_NAME=$$(basename "$$d") hack/cluster/down.sh || true; done
	rm -rf bin _output
