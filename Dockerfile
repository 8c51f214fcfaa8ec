# syntax=docker/dockerfile:1
#
# The sluice image: one static binary that runs any part; the part is the
# command (`docker run sluice gate --help`). deploy/compose/compose.yaml builds
# it for every sluice service. Build from the repository root:
#
#   docker build -t sluice:local .
#
# TestCompose (cmd/sluice/compose_test.go) keeps this file honest: the builder's
# Go is go.mod's, the build is static, the final user is not root.

# The builder's Go is go.mod's exact version, so the image is built with the
# toolchain the tests ran with (and GOTOOLCHAIN never downloads another).
FROM golang:1.26.8-alpine AS build
WORKDIR /src

# Modules first, in their own layer: a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY . .
# CGO_ENABLED=0: a static binary that needs no libc, so it runs on
# distroless/static. -trimpath keeps the builder's paths out of the binary and
# its stack traces. probe is the containers' healthcheck: the final image has
# no shell, curl or wget to GET /readyz with.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/sluice && \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/probe ./deploy/compose/probe

# distroless/static: CA certificates, /etc/passwd and tzdata, nothing to
# exec into; sluice needs no more (the worker's --http handlers use the CA
# certificates).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
COPY --from=build /out/probe /probe
# 65532 is distroless's "nonroot": numeric, so Kubernetes' runAsNonRoot can
# verify it without reading /etc/passwd.
USER 65532:65532
# The parts' default ops/API ports: gate, relay, worker, coordinator, canary.
EXPOSE 8080 8081 8082 8083 8084
ENTRYPOINT ["/sluice"]
CMD ["--help"]
