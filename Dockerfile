# A static binary on distroless "nonroot": no shell, no package manager, uid 65532.
# Build: docker build --build-arg VERSION=$(git describe --tags --always) -t configmap-attacher .
# Without a registry (the project's own machines reach none): `make image` builds the same contract
# (one static binary at /configmap-attacher, uid/gid 65532, no shell) FROM scratch with podman and the
# local Go; see hack/image/Containerfile for why and what it leaves out (CA certificates, tzdata).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/configmap-attacher/configmap-attacher/internal/version.stamped=${VERSION}" \
      -o /out/configmap-attacher ./cmd/configmap-attacher

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/configmap-attacher /configmap-attacher
USER 65532:65532
ENTRYPOINT ["/configmap-attacher"]
