#!/usr/bin/env bash
# A throwaway PostgreSQL server for the PostgreSQL backend's tests (tests/autotune/test_db_postgres*.py).
#
#   scripts/pg_test_server.sh start DIR   create a cluster in DIR, start it, print the test URL on stdout
#   scripts/pg_test_server.sh stop DIR    stop it (DIR is left for the caller to remove)
#
# The server listens on 127.0.0.1 (a free port) and on a unix socket in DIR, nowhere else. The server
# refuses to run as root, so under root (CI) the cluster belongs to the `postgres` user and every server
# command runs as that user. Without PostgreSQL's binaries, `start` installs Debian's package when it
# runs as root with apt-get (ALCOP_PG_INSTALL=0: never); when that fails it says why on stderr and exits
# 3, and the tests skip. Messages go to stderr; stdout carries only the URL.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [[ -z $cmd || -z $dir ]]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) /usr/local/pgsql/bin; do
    if [[ -x $d/initdb && -x $d/pg_ctl ]]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"; return 0
  fi
  return 1
}

# Commands the server side runs: as `postgres` under root, else as the calling user.
as_server() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case $cmd in
start)
  if ! bin=$(find_bin); then
    if [[ ${ALCOP_PG_INSTALL:-1} != 0 && $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      echo "pg_test_server: installing Debian's postgresql package" >&2
      if ! { timeout 180 apt-get update -qq -o Acquire::Retries=0 -o Acquire::http::Timeout=20 &&
             DEBIAN_FRONTEND=noninteractive timeout 600 \
               apt-get install -y -qq postgresql; } >"${TMPDIR:-/tmp}/pg_test_server_apt.log" 2>&1; then
        echo "pg_test_server: apt-get could not install postgresql (see ${TMPDIR:-/tmp}/pg_test_server_apt.log)" >&2
        exit 3
      fi
    fi
    if ! bin=$(find_bin); then
      echo "pg_test_server: no PostgreSQL server binaries (initdb, pg_ctl) on this machine" >&2
      exit 3
    fi
  fi
  if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    echo "pg_test_server: running as root and there is no 'postgres' user to run the server as" >&2
    exit 3
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [[ $(id -u) -eq 0 ]]; then
    chown postgres: "$dir"
    if ! runuser -u postgres -- test -x "$dir"; then
      echo "pg_test_server: user postgres cannot reach $dir (make its parent directories searchable)" >&2
      exit 3
    fi
  fi
  chmod 700 "$dir"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
  # Local (socket) connections of the server's own user are trusted: they set the test role up.
  # TCP connections need the role's password.
  as_server "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 3; }
  as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off" \
    start >&2 || { cat "$dir/server.log" >&2; exit 3; }
  as_server "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -q -v ON_ERROR_STOP=1 >&2 <<SQL
CREATE ROLE alcop_test LOGIN CREATEDB PASSWORD '$password';
CREATE DATABASE alcop_test OWNER alcop_test;
SQL
  echo "postgresql://alcop_test:$password@127.0.0.1:$port/alcop_test"
  ;;
stop)
  bin=$(find_bin) || exit 0
  if [[ -f $dir/data/postmaster.pid ]]; then
    as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  fi
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
