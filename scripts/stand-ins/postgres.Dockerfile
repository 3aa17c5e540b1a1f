# Stand-in for postgres:17-alpine, made locally by scripts/docker-env from Debian's PostgreSQL.
# The same contract compose relies on: POSTGRES_USER / POSTGRES_DB / POSTGRES_PASSWORD initialise
# an empty PGDATA (/var/lib/postgresql/data) on first start, `postgres` and `pg_isready` on PATH,
# a `postgres` user with the official Alpine image's uid (70), TCP 5432 with password auth, and
# /var/run/postgresql writable by any user (mode 3777, as there: a tmpfs mounted on it copies it).
ARG BASE
FROM ${BASE}
LABEL org.opencontainers.image.description="Debian's PostgreSQL (a local stand-in for postgres:17-alpine)"
RUN groupadd --gid 70 postgres \
 && useradd --uid 70 --gid postgres --home-dir /var/lib/postgresql --no-create-home \
      --shell /bin/sh postgres \
 && mkdir -p /etc/postgresql-common \
 && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf \
 && apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      -o Dpkg::Options::=--force-confold postgresql \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /usr/lib/postgresql/*/bin /usr/lib/postgresql/bin \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
 && chmod 0700 /var/lib/postgresql/data \
 && chmod 3777 /var/run/postgresql
COPY entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
VOLUME /var/lib/postgresql/data
# As the official image: SIGINT is PostgreSQL's fast shutdown (SIGTERM would wait for every
# client, e.g. the adapter's pool, to disconnect).
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
