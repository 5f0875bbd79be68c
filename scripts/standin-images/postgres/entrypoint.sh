#!/bin/bash
set -euo pipefail
if [ "${1:-}" != "postgres" ]; then exec "$@"; fi
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "stand-in postgres: initialising a UTF-8 cluster in $PGDATA for user $POSTGRES_USER, database $POSTGRES_DB"
  pwfile="$(mktemp)"; printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"; chown postgres "$pwfile"
  as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  # Create the database on a socket-only server, so nobody connects before it exists.
  as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$POSTGRES_DB" != "postgres" ]; then
    as_pg psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
  fi
  as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
shift
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*' "$@"
