# Every target is a thin wrapper over a script or `go`, so CI, the README and developers run the same thing.
SHELL := /usr/bin/env bash
GO ?= go

.PHONY: all build tools cluster-up cluster-down test test-unit test-e2e demo lint clean

all: build

build:
	$(GO) build -o bin/configmap-attacher ./cmd/configmap-attacher

## tools: build the local control plane (etcd, kube-*, kwok, Argo Rollouts, helm) into _output/tools.
tools:
	hack/tools/build.sh

## cluster-up: start (or reuse) the local cluster; the last line printed is KUBECONFIG=<path>.
cluster-up:
	hack/cluster/up.sh

cluster-down:
	hack/cluster/down.sh

clean:
	rm -rf bin _output
