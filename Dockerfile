# The cyberos skill supervisor's image, for packaging/kubernetes/:
#   docker build -t ghcr.io/cyberos/supervisor:0.1.0 .
# The DaemonSet names that tag (the packaging/kubernetes tests check it).
#
# Build stage: the four binaries exactly as `make build` makes them
# (cgo + libseccomp linked statically), without `make deps` (which installs
# PostgreSQL and golangci-lint for the tests): `-o deps` skips it.
FROM golang:1.26-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libseccomp-dev pkg-config gcc libc6-dev musl-tools make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make -o deps build

# Final stage: the binaries and the seccomp profiles. The sandboxes bind
# the image's /usr, /bin and /lib read-only as every skill's system, so
# the runtimes skills need come from here: /bin/sh is in the base; add
# others with --build-arg RUNTIMES="python3 nodejs". ca-certificates are
# HttpFetch's and HttpPost's trust roots; /etc/passwd and /etc/group are
# what the userns id ranges are checked against.
FROM debian:12-slim
ARG RUNTIMES=""
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates ${RUNTIMES} \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/bin/cyberos /src/bin/cyberos-spawn /src/bin/cyberos-init /src/bin/cyberos-tool /usr/local/bin/
COPY seccomp-profiles/*.json /etc/cyberos/seccomp-profiles/
LABEL org.opencontainers.image.title="cyberos skill supervisor" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.source="https://github.com/cyberos/supervisor"
ENTRYPOINT ["/usr/local/bin/cyberos"]
CMD ["supervisor", "serve", "--config", "/etc/cyberos/config/supervisor.yaml"]
