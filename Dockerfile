# Sluice container image: a static binary on a distroless base, running as
# a non-root user, with its data on a volume.
#
#   docker build -t sluice --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse HEAD) --build-arg DATE=$(git log -1 --format=%cI) .
#
# The image listens on 0.0.0.0 so that published ports reach it, which
# Sluice refuses without credentials (docs/security.md). Either mount a
# config with [[sqs_credentials]], [http_auth] and [[amqp_users]]:
#
#   docker run -v sluice-data:/data -v ./sluice.toml:/etc/sluice/sluice.toml:ro \
#     -p 9324:9324 -p 5672:5672 sluice server --config /etc/sluice/sluice.toml \
#     --data-dir /data --sqs-listen 0.0.0.0:9324 --amqp-listen 0.0.0.0:5672
#
# or, for a laptop, say on purpose that it may run without them:
#
#   docker run -v sluice-data:/data -p 127.0.0.1:9324:9324 -p 127.0.0.1:5672:5672 \
#     -e SLUICE_ALLOW_NON_LOOPBACK=1 sluice

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# The wire types are a module of their own, replaced by ./api in go.mod.
COPY api/go.mod ./api/
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
ARG DATE=
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" \
      -o /out/sluice ./cmd/sluice \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
# 65532 is distroless's "nonroot" user; the volume starts owned by it.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME ["/data"]
EXPOSE 9324 5672
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["server", "--data-dir", "/data", "--sqs-listen", "0.0.0.0:9324", "--amqp-listen", "0.0.0.0:5672"]
