# fraudd: a static binary on distroless, running as non-root with its state in
# the /data volume.
#
#   docker build -t fraudd .
#   docker run -d -p 8080:8080 -v fraudd-data:/data fraudd
#   docker exec <container> fraudd admin create-account --email ops@example.com
#
# CI (.ci/run, scripts/check-dockerfile) runs the build line below with the
# same flags outside Docker, so keep it one RUN line starting with
# "RUN CGO_ENABLED=0 go build".

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so a source edit does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=docker
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/fraudd ./cmd/fraudd
# The volume's mount point, owned by distroless's nonroot user (65532), so a
# fresh named volume is writable by it.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fraudd /usr/local/bin/fraudd
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV FRAUDD_DATA_DIR=/data \
    FRAUDD_ADDR=:8080
VOLUME ["/data"]
EXPOSE 8080
# Distroless has no shell or curl: the binary probes its own /readyz.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/fraudd", "health"]
# SIGTERM drains requests, stops the actors and closes the store.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/fraudd"]
CMD ["serve"]
