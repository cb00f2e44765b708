# Every target is a thin wrapper over a script or `go`, so CI, the README and developers run the same thing.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -o pipefail -ec
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -s -w -X github.com/configmap-attacher/configmap-attacher/internal/version.stamped=$(VERSION)

.PHONY: all build image tools cluster-up cluster-down argocd-up argocd-down test test-unit test-race test-e2e soak-short demo clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/configmap-attacher ./cmd/configmap-attacher

## image: the container image with no registry (podman, FROM scratch): localhost/configmap-attacher:$(VERSION)
## and its docker-archive _output/image/configmap-attacher.tar (hack/image/build.sh).
image:
	VERSION='$(VERSION)' LDFLAGS='$(LDFLAGS)' hack/image/build.sh

## tools: build the local control plane (etcd, kube-*, kwok, Argo Rollouts, helm, Argo CD) into _output/tools.
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

## demo: the write-up replayed on the local control plane (or DEMO_KUBECONFIG=<path>), narrated.
## ARGOCD=1: the write-up deployed through Argo CD (an Application of charts/base-app, the attacher its Sync hook).
demo:
	$(GO) run ./hack/demo $(if $(DEMO_KUBECONFIG),-kubeconfig $(DEMO_KUBECONFIG)) $(if $(filter 1,$(ARGOCD)),-argocd)

## test: unit tests, then the e2e tests on a local control plane (or the cluster KUBECONFIG names), then a short soak.
test: test-unit test-e2e soak-short

test-unit:
	$(GO) vet ./...
	$(GO) test ./...

## test-race: the unit tests under the race detector (slow on a cold cache: client-go is rebuilt).
test-race:
	$(GO) test -race ./...

test-e2e: tools
	$(GO) test -tags e2e -count=1 -timeout 45m -v ./test/e2e/ 2>&1 | hack/test-summary.sh

## soak-short: 35 random steps of deploys, zero-touch pinning and faults (test/soak/README.md) on its own
## local cluster "soak" (or the cluster KUBECONFIG names); fails if config in use was lost, unused config
## (snapshots included) leaked, a pod was unpinned or read the wrong content, or refused under Ignore.
## Seed 254 draws every fault kind and every pinning step kind (test/soak/README.md).
soak-short: tools
	$(GO) run ./test/soak -steps 35 -seed 254 $(if $(KUBECONFIG),-kubeconfig $(KUBECONFIG))

## clean: delete every local cluster first (their processes would outlive _output), then the builds.
clean:
	for d in _output/kwok/clusters/*/; do [ -d "$$d" ] && CLUSTER_NAME=$$(basename "$$d") hack/cluster/down.sh || true; done
	rm -rf bin _output
