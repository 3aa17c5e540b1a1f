# Stand-in for redis:7-alpine, made locally by scripts/docker-env from Debian's redis-server.
# The same contract compose relies on: `redis-server` and `redis-cli` on PATH, a `redis` user with
# the official Alpine image's uid (999), and /data as the working directory.
ARG BASE
FROM ${BASE}
LABEL org.opencontainers.image.description="Debian's redis-server (a local stand-in for redis:7-alpine)"
RUN groupadd --system --gid 999 redis \
 && useradd --system --uid 999 --gid redis --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin redis \
 && apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir /data && chown redis:redis /data
WORKDIR /data
VOLUME /data
CMD ["redis-server"]
