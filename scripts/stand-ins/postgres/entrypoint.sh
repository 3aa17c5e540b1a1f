#!/bin/sh
# The part of the official postgres image's entrypoint compose relies on: an empty PGDATA is
# initialised with POSTGRES_USER (default postgres) as superuser, POSTGRES_PASSWORD (required) for
# password (scram-sha-256) logins over TCP, and POSTGRES_DB (default: the user's name); then the
# server runs in the foreground listening on every address of the container.
set -eu
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "error: POSTGRES_PASSWORD is empty; set it to initialise the database" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\" OWNER \"$user\"" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
fi
if [ "${1:-}" = postgres ]; then
  shift
  exec postgres -c listen_addresses='*' "$@"
fi
exec "$@"
