# shellcheck shell=bash
# Shared helpers for scripts/test, scripts/demo and scripts/bench. Source it from the repo root:
#
#   cd "$(dirname "$0")/.." && source scripts/lib.sh
#
# Database selection (durable_start_db):
#   * DURABLE_DATABASE_URL non-empty          -> use that server as is.
#   * else any of PGHOST/PGPORT/PGDATABASE/PGUSER non-empty
#                                             -> export DURABLE_DATABASE_URL="" so that libpq takes
#                                                everything (and PGPASSWORD, PGPASSFILE, ...) from
#                                                the environment.
#   * else start a throwaway PostgreSQL 15 cluster under <build dir>/pg on 127.0.0.1, export
#     DURABLE_DATABASE_URL=postgresql://durable:durable-test-pw@127.0.0.1:PORT/durable_test and
#     DURABLE_TEST_RESTART_CMD (a shell command line that restarts it synchronously; its halves
#     DURABLE_TEST_STOP_CMD and DURABLE_TEST_START_CMD), and stop it again when the calling
#     script exits, fails or is interrupted.
#   With an external server these are left alone: we never set them, so tests that restart or
#   stop the server are skipped unless the caller exported commands of their own.

DURABLE_ROOT="$(pwd -P)"
DURABLE_PG_BIN="${DURABLE_PG_BIN:-/usr/lib/postgresql/15/bin}"
DURABLE_PG_USER="durable-pg"        # unprivileged system user that runs the server when we are root
DURABLE_PG_PASSWORD="durable-test-pw"
# ninja-build: cmake only recommends a build tool, so --no-install-recommends would install none.
# prometheus: its promtool validates the metrics exposition (tests/test_metrics.cpp).
# faketime: the clock-skew tests run an executor with a wrong wall clock (tests/test_skew.cpp).
# libhowardhinnant-date-dev, tzdata: schedules' time zones (durable/cron.hpp, /usr/share/zoneinfo).
# python3-clang-16: libclang for the determinism lint (tools/durable-lint, its test
# determinism_lint).
# ccache: every build goes through it (durable_configure), so a rebuild after a checkout or in a
# fresh clone compiles only what changed.
DURABLE_REQUIRED_PACKAGES=(g++ cmake ninja-build git libpq-dev libasio-dev libfmt-dev
                           nlohmann-json3-dev catch2 libbenchmark-dev postgresql clang-format
                           libcli11-dev prometheus faketime libhowardhinnant-date-dev tzdata
                           librestinio-dev ccache python3-clang-16)
# scripts/test --sanitize: Clang 16 with AddressSanitizer and UBSan (the runtimes are in
# libclang-rt-16-dev, which clang-16 only recommends).
DURABLE_SANITIZE_PACKAGES=(clang-16 libclang-rt-16-dev)
# The web console's browser tests (tests/console/, label browser; the GCC build runs them).
DURABLE_BROWSER_PACKAGES=(chromium chromium-driver python3-selenium)
DURABLE_JOBS="$(nproc 2>/dev/null || echo 2)"

durable_log() { printf '[durable] %s\n' "$*" >&2; }
durable_die() { printf '[durable] error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Dependencies

durable_pkg_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

# durable_ensure_deps [EXTRA_PACKAGE...]: DURABLE_REQUIRED_PACKAGES plus the extra ones.
durable_ensure_deps() {
  local missing=() pkg
  for pkg in "${DURABLE_REQUIRED_PACKAGES[@]}" "$@"; do
    durable_pkg_installed "$pkg" || missing+=("$pkg")
  done
  # The `postgresql` meta package could point at another major version; we need 15's binaries.
  if [[ ! -x "$DURABLE_PG_BIN/postgres" ]] && [[ "$DURABLE_PG_BIN" == /usr/lib/postgresql/15/bin ]]; then
    missing+=(postgresql-15)
  fi
  ((${#missing[@]} == 0)) && return 0
  if ((EUID != 0)); then
    durable_log "missing Debian packages: ${missing[*]}"
    printf 'sudo apt-get update && sudo apt-get install -y --no-install-recommends %s\n' "${missing[*]}" >&2
    exit 1
  fi
  durable_log "installing missing Debian packages: ${missing[*]}"
  local log
  log="$(mktemp)"
  if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
           apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    durable_die "apt-get install failed"
  fi
  rm -f "$log"
}

# ---------------------------------------------------------------------------------------------
# Build

# ccache's cache is shared by every checkout on the machine (its default directory, kept between
# runs): paths under the checkout are hashed relative to it, and the working directory is left
# out of the hash, so that a fresh clone elsewhere hits the cache of an earlier one.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$DURABLE_ROOT}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

# The compile flags of scripts/test's GCC build (build/), which scripts/chaos reuses: -O1 runs the
# crash tests at a good pace and compiles in about half the time of -O2 -g; -g1 keeps line
# numbers for backtraces (docs/development.md has the figures). CMAKE_BUILD_TYPE in the
# environment chooses a standard build type instead.
if [[ -n "${CMAKE_BUILD_TYPE:-}" ]]; then
  DURABLE_PLAIN_CMAKE_ARGS=(-DCMAKE_BUILD_TYPE="$CMAKE_BUILD_TYPE")
else
  DURABLE_PLAIN_CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo
                            "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
fi
# A unity build: each target's files in one translation unit, so that the engine's templates are
# compiled once per test executable, not once per file (docs/development.md, "Unity builds").
DURABLE_PLAIN_CMAKE_ARGS+=(-DDURABLE_SANITIZE=OFF -DDURABLE_BUILD_TESTS=ON
                           -DDURABLE_BUILD_EXAMPLES=ON -DDURABLE_BUILD_BENCHMARKS=ON
                           -DCMAKE_UNITY_BUILD=ON)

# durable_configure BUILD_DIR [cmake args...]: (re)configure the repo into BUILD_DIR, quietly.
durable_configure() {
  local dir="$1"
  shift
  local args=(-S "$DURABLE_ROOT" -B "$dir" --log-level=WARNING)
  if [[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
    args+=(-G Ninja)
  fi
  if command -v ccache >/dev/null 2>&1; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  cmake "${args[@]}" "$@" >/dev/null
}

# durable_build BUILD_DIR [cmake --build args...]
durable_build() {
  local dir="$1"
  shift
  cmake --build "$dir" -j "$DURABLE_JOBS" "$@"
}

# ---------------------------------------------------------------------------------------------
# Database

DURABLE_PG_DIR=""       # cluster directory while we own a server, else empty
DURABLE_PG_STARTED=0

# Run a PostgreSQL server binary as the user that owns the cluster, from a directory it can read.
durable_pg_as_owner() {
  if ((EUID == 0)); then
    (cd / && runuser -u "$DURABLE_PG_USER" -- "$@")
  else
    (cd / && "$@")
  fi
}

durable_port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

durable_find_free_port() {
  local port=$((20000 + RANDOM % 20000)) i
  for ((i = 0; i < 200; i++)); do
    durable_port_in_use "$port" || { echo "$port"; return 0; }
    port=$((port + 1 > 40000 ? 20000 : port + 1))
  done
  return 1
}

# Stop a server left behind by an earlier run that was killed before its trap could run.
durable_stop_stale() {
  local dir="$1"
  [[ -f "$dir/data/postmaster.pid" ]] || return 0
  if durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" status -D "$dir/data" >/dev/null 2>&1; then
    durable_log "stopping stale PostgreSQL server in $dir"
    durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" stop -D "$dir/data" -m immediate -w -s -t 30 \
      >/dev/null 2>&1 || true
  fi
}

durable_stop_db() {
  ((DURABLE_PG_STARTED)) || return 0
  DURABLE_PG_STARTED=0
  if ! durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" stop -D "$DURABLE_PG_DIR/data" -m fast -w -s \
         -t 60 >/dev/null 2>&1; then
    durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" stop -D "$DURABLE_PG_DIR/data" -m immediate -w -s \
      -t 30 >/dev/null 2>&1 || true
  fi
}

durable__on_exit() {
  durable_stop_db
  durable_stop_failover_pair
  durable_stop_diskfull_cluster
}
durable__on_signal() {
  trap - INT TERM
  durable_stop_db
  durable_stop_failover_pair
  durable_stop_diskfull_cluster
  exit "$1"
}

# durable__pg_ctl_line DIR ACTION [pg_ctl args...]: a shell command line that runs `pg_ctl ACTION`
# on the cluster in DIR synchronously, as the server's owner.
durable__pg_ctl_line() {
  local dir="$1" action="$2" line
  shift 2
  line="$(printf '%q ' "$DURABLE_PG_BIN/pg_ctl" "$action" -D "$dir/data" -l "$dir/server.log" \
    "$@" -w -s -t 60)"
  if ((EUID == 0)); then
    printf '%s' "cd / && runuser -u $DURABLE_PG_USER -- ${line% }"
  else
    printf '%s' "cd / && ${line% }"
  fi
}

# The cluster directory for BUILD_DIR. When root, the server runs as $DURABLE_PG_USER, which must be
# able to reach the directory; if some parent is not searchable by others (a checkout under /root,
# say), fall back to a fixed per-build-dir location under /tmp.
durable_cluster_dir() {
  local build_dir="$1" dir="$1/pg" parent
  if ((EUID == 0)); then
    parent="$(dirname "$dir")"
    if ! runuser -u "$DURABLE_PG_USER" -- test -x "$parent" 2>/dev/null; then
      dir="/tmp/durable-pg-$(printf '%s' "$build_dir" | md5sum | cut -c1-12)"
    fi
  fi
  echo "$dir"
}

durable_ensure_pg_user() {
  ((EUID == 0)) || return 0
  id -u "$DURABLE_PG_USER" >/dev/null 2>&1 && return 0
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    "$DURABLE_PG_USER"
}

# durable_start_db BUILD_DIR: see the header of this file.
durable_start_db() {
  local build_dir="$1"
  if [[ -n "${DURABLE_DATABASE_URL:-}" ]]; then
    durable_log "using the external database from DURABLE_DATABASE_URL"
    export DURABLE_DATABASE_URL
    return 0
  fi
  if [[ -n "${PGHOST:-}${PGPORT:-}${PGDATABASE:-}${PGUSER:-}" ]]; then
    durable_log "using the external database from the PG* environment variables"
    export DURABLE_DATABASE_URL=""
    return 0
  fi

  mkdir -p "$build_dir"
  build_dir="$(cd "$build_dir" && pwd -P)"
  durable_ensure_pg_user
  local dir
  dir="$(durable_cluster_dir "$build_dir")"

  # DURABLE_KEEP_DB=1 (scripts/test --dev): a server this function started earlier for the same
  # build dir and left running is used again (each test case makes a schema of its own), and the
  # one it starts now is left running for the next call; `scripts/test --dev --stop-db` stops it.
  if [[ "${DURABLE_KEEP_DB:-0}" == 1 && -f "$dir/durable.env" && -f "$dir/data/postmaster.pid" ]] &&
     durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" status -D "$dir/data" >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    source "$dir/durable.env"
    if PGCONNECT_TIMEOUT=5 "$DURABLE_PG_BIN/psql" -X -q -A -t "$DURABLE_DATABASE_URL" -c 'SELECT 1' \
         >/dev/null 2>&1; then
      export DURABLE_DATABASE_URL DURABLE_TEST_RESTART_CMD DURABLE_TEST_STOP_CMD \
        DURABLE_TEST_START_CMD
      durable_log "PostgreSQL 15 kept from an earlier run (cluster $dir)"
      return 0
    fi
  fi

  # From here on the server, once started, is stopped however the script ends (unless kept).
  if [[ "${DURABLE_KEEP_DB:-0}" != 1 ]]; then
    trap durable__on_exit EXIT
    trap 'durable__on_signal 130' INT
    trap 'durable__on_signal 143' TERM
  fi

  durable_stop_stale "$dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  chmod 700 "$dir"
  printf '%s\n' "$DURABLE_PG_PASSWORD" >"$dir/pwfile"
  if ((EUID == 0)); then chown -R "$DURABLE_PG_USER": "$dir"; fi

  if ! durable_pg_as_owner "$DURABLE_PG_BIN/initdb" -D "$dir/data" -U durable -E UTF8 --locale=C \
         --auth-local=trust --auth-host=scram-sha-256 --pwfile="$dir/pwfile" --no-sync \
         --no-instructions >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    durable_die "initdb failed"
  fi
  rm -f "$dir/pwfile"

  # Unix socket in the cluster dir (trust auth, handy for debugging) unless its path is too long.
  local sockdir="$dir"
  if ((${#dir} > 90)); then sockdir=""; fi
  cat >>"$dir/data/postgresql.conf" <<EOF

# --- durable test cluster (scripts/lib.sh) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$sockdir'
max_connections = 200
fsync = on
include 'durable_port.conf'
EOF

  local attempt port=""
  DURABLE_PG_DIR="$dir"
  for attempt in 1 2 3 4 5; do
    port="$(durable_find_free_port)" || durable_die "no free TCP port in 20000-40000"
    echo "port = $port" >"$dir/data/durable_port.conf"
    if ((EUID == 0)); then chown "$DURABLE_PG_USER": "$dir/data/durable_port.conf"; fi
    DURABLE_PG_STARTED=1
    if durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" start -D "$dir/data" -l "$dir/server.log" -w \
         -s -t 60 >/dev/null 2>&1; then
      break
    fi
    DURABLE_PG_STARTED=0
    durable_stop_stale "$dir"
    if ((attempt == 5)); then
      tail -n 20 "$dir/server.log" >&2 || true
      durable_die "could not start PostgreSQL (log: $dir/server.log)"
    fi
    durable_log "PostgreSQL did not start on port $port, retrying"
  done

  export DURABLE_DATABASE_URL="postgresql://durable:${DURABLE_PG_PASSWORD}@127.0.0.1:${port}/durable_test"
  if ! PGCONNECT_TIMEOUT=10 "$DURABLE_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
         "postgresql://durable:${DURABLE_PG_PASSWORD}@127.0.0.1:${port}/postgres" \
         -c 'CREATE DATABASE durable_test' >/dev/null; then
    durable_die "could not create database durable_test"
  fi

  # Commands for the cases that take the server away (a shell command line each, synchronous):
  # a restart, and its two halves for a case that acts while the server is down.
  DURABLE_TEST_RESTART_CMD="$(durable__pg_ctl_line "$dir" restart -m fast)"
  DURABLE_TEST_STOP_CMD="$(durable__pg_ctl_line "$dir" stop -m fast)"
  DURABLE_TEST_START_CMD="$(durable__pg_ctl_line "$dir" start)"
  export DURABLE_TEST_RESTART_CMD DURABLE_TEST_STOP_CMD DURABLE_TEST_START_CMD
  if [[ "${DURABLE_KEEP_DB:-0}" == 1 ]]; then
    DURABLE_PG_STARTED=0  # nothing stops it at exit
    {
      printf 'DURABLE_DATABASE_URL=%q\n' "$DURABLE_DATABASE_URL"
      printf 'DURABLE_TEST_RESTART_CMD=%q\n' "$DURABLE_TEST_RESTART_CMD"
      printf 'DURABLE_TEST_STOP_CMD=%q\n' "$DURABLE_TEST_STOP_CMD"
      printf 'DURABLE_TEST_START_CMD=%q\n' "$DURABLE_TEST_START_CMD"
    } >"$dir/durable.env"
  fi
  durable_log "PostgreSQL 15 on 127.0.0.1:$port (cluster $dir)"
}

# durable_stop_kept_db BUILD_DIR: stops the server DURABLE_KEEP_DB left running for BUILD_DIR.
durable_stop_kept_db() {
  local build_dir="$1" dir
  [[ -d "$build_dir" ]] || return 0
  build_dir="$(cd "$build_dir" && pwd -P)"
  dir="$(durable_cluster_dir "$build_dir")"
  durable_stop_stale "$dir"
  rm -f "$dir/durable.env"
}

# ---------------------------------------------------------------------------------------------
# A primary and a synchronous streaming standby (scripts/chaos's failover case)
#
# durable_start_failover_pair DIR: two throwaway PostgreSQL 15 clusters under DIR on 127.0.0.1,
# a primary and a standby made from it with `pg_basebackup -R`, replicating synchronously
# (`synchronous_standby_names` names the standby once it runs, `synchronous_commit = on`). It
# waits (bounded) until the primary reports the standby as `sync`, then exports
#   DURABLE_FAILOVER_PRIMARY_PORT, DURABLE_FAILOVER_STANDBY_PORT,
#   DURABLE_FAILOVER_CONNINFO          host=127.0.0.1,127.0.0.1 port=P1,P2 ...
#                                      target_session_attrs=read-write
#   DURABLE_FAILOVER_STOP_PRIMARY_CMD  a shell command: pg_ctl stop -m immediate on the primary
#   DURABLE_FAILOVER_PROMOTE_CMD       a shell command: pg_ctl promote -w on the standby
# Both clusters are stopped and their data directories removed when the calling script exits,
# fails or is interrupted (the server logs stay in DIR).

DURABLE_FAILOVER_DIR=""
DURABLE_FAILOVER_STARTED=0

# durable__pg_ctl_cmd ARGS...: a shell command line running pg_ctl ARGS as the clusters' owner.
durable__pg_ctl_cmd() {
  local cmd
  cmd="$(printf '%q ' "$DURABLE_PG_BIN/pg_ctl" "$@")"
  if ((EUID == 0)); then
    echo "cd / && runuser -u $DURABLE_PG_USER -- ${cmd% }"
  else
    echo "cd / && ${cmd% }"
  fi
}

durable_stop_failover_pair() {
  ((DURABLE_FAILOVER_STARTED)) || return 0
  DURABLE_FAILOVER_STARTED=0
  local node
  for node in primary standby; do
    durable_stop_stale "$DURABLE_FAILOVER_DIR/$node"
    rm -rf "${DURABLE_FAILOVER_DIR:?}/$node/data"
  done
}

# durable__failover_port DATA_DIR PORT (the standby's postgresql.conf is the primary's copy,
# from the base backup; only its durable_port.conf differs).
durable__failover_port() {
  echo "port = $2" >"$1/durable_port.conf"
  if ((EUID == 0)); then chown "$DURABLE_PG_USER": "$1/durable_port.conf"; fi
}

durable_start_failover_pair() {
  local dir="$1"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd -P)"
  durable_ensure_pg_user
  if ((EUID == 0)) && ! runuser -u "$DURABLE_PG_USER" -- test -x "$(dirname "$dir")" 2>/dev/null; then
    dir="/tmp/durable-failover-$(printf '%s' "$dir" | md5sum | cut -c1-12)"
  fi
  DURABLE_FAILOVER_DIR="$dir"
  trap durable__on_exit EXIT
  trap 'durable__on_signal 130' INT
  trap 'durable__on_signal 143' TERM

  durable_stop_stale "$dir/primary"
  durable_stop_stale "$dir/standby"
  rm -rf "$dir"
  mkdir -p "$dir/primary" "$dir/standby"
  chmod 700 "$dir" "$dir/primary" "$dir/standby"
  printf '%s\n' "$DURABLE_PG_PASSWORD" >"$dir/pwfile"
  if ((EUID == 0)); then chown -R "$DURABLE_PG_USER": "$dir"; fi
  DURABLE_FAILOVER_STARTED=1

  local p="$dir/primary/data" s="$dir/standby/data"
  if ! durable_pg_as_owner timeout 120 "$DURABLE_PG_BIN/initdb" -D "$p" -U durable -E UTF8 \
         --locale=C --auth-local=trust --auth-host=scram-sha-256 --pwfile="$dir/pwfile" \
         --no-sync --no-instructions >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    durable_die "initdb of the failover primary failed"
  fi
  rm -f "$dir/pwfile"
  # initdb's pg_hba.conf already lets 127.0.0.1 replicate with a password (scram-sha-256).
  cat >>"$p/postgresql.conf" <<EOF

# --- durable failover pair (scripts/lib.sh) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
fsync = on
wal_level = replica
max_wal_senders = 5
hot_standby = on
synchronous_commit = on
include 'durable_port.conf'
EOF

  local port1 port2
  port1="$(durable_find_free_port)" || durable_die "no free TCP port in 20000-40000"
  durable__failover_port "$p" "$port1"
  if ! durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" start -D "$p" -l "$dir/primary/server.log" \
         -w -s -t 60 >/dev/null 2>&1; then
    tail -n 20 "$dir/primary/server.log" >&2 || true
    durable_die "could not start the failover primary on port $port1"
  fi
  local url1="postgresql://durable:${DURABLE_PG_PASSWORD}@127.0.0.1:${port1}"
  PGCONNECT_TIMEOUT=10 timeout 60 "$DURABLE_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
    "$url1/postgres" -c 'CREATE DATABASE durable_test' >/dev/null ||
    durable_die "could not create database durable_test on the failover primary"

  # The base backup runs as the clusters' owner, so that the standby's files are its own; -R
  # writes primary_conninfo (with the application_name that synchronous_standby_names names).
  if ! durable_pg_as_owner env PGPASSWORD="$DURABLE_PG_PASSWORD" timeout 120 \
         "$DURABLE_PG_BIN/pg_basebackup" -D "$s" -R -X stream -c fast --no-sync \
         -d "host=127.0.0.1 port=$port1 user=durable application_name=durable_standby" \
         >"$dir/basebackup.log" 2>&1; then
    cat "$dir/basebackup.log" >&2
    durable_die "pg_basebackup of the failover primary failed"
  fi
  port2="$(durable_find_free_port)" || durable_die "no free TCP port in 20000-40000"
  durable__failover_port "$s" "$port2"
  if ! durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" start -D "$s" -l "$dir/standby/server.log" \
         -w -s -t 60 >/dev/null 2>&1; then
    tail -n 20 "$dir/standby/server.log" >&2 || true
    durable_die "could not start the failover standby on port $port2"
  fi

  # Only now: with a synchronous standby named but absent, every commit would wait for it.
  PGCONNECT_TIMEOUT=10 timeout 60 "$DURABLE_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
    "$url1/postgres" -c "ALTER SYSTEM SET synchronous_standby_names = 'durable_standby'" \
    -c 'SELECT pg_reload_conf()' >/dev/null ||
    durable_die "could not set synchronous_standby_names on the failover primary"
  local i state=""
  for ((i = 0; i < 300; i++)); do
    state="$(PGCONNECT_TIMEOUT=5 timeout 10 "$DURABLE_PG_BIN/psql" -X -A -t -q "$url1/postgres" \
      -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'durable_standby'" \
      2>/dev/null || true)"
    [[ "$state" == sync ]] && break
    sleep 0.1
  done
  [[ "$state" == sync ]] ||
    durable_die "the standby on port $port2 is not a synchronous standby after 30 s" \
      "(state '${state}'; logs in $dir)"

  export DURABLE_FAILOVER_PRIMARY_PORT="$port1" DURABLE_FAILOVER_STANDBY_PORT="$port2"
  export DURABLE_FAILOVER_CONNINFO="host=127.0.0.1,127.0.0.1 port=$port1,$port2 dbname=durable_test user=durable password=$DURABLE_PG_PASSWORD target_session_attrs=read-write"
  DURABLE_FAILOVER_STOP_PRIMARY_CMD="$(durable__pg_ctl_cmd stop -D "$p" -m immediate -w -s -t 30)"
  DURABLE_FAILOVER_PROMOTE_CMD="$(durable__pg_ctl_cmd promote -D "$s" -w -s -t 60)"
  export DURABLE_FAILOVER_STOP_PRIMARY_CMD DURABLE_FAILOVER_PROMOTE_CMD
  durable_log "PostgreSQL 15 primary on 127.0.0.1:$port1, synchronous standby on" \
    "127.0.0.1:$port2 ($dir)"
}

# ---------------------------------------------------------------------------------------------
# A cluster whose WAL disk fills up (scripts/chaos's disk-full case)
#
# durable_start_diskfull_cluster DIR: a throwaway PostgreSQL 15 cluster under DIR on 127.0.0.1
# whose pg_wal lives on a tmpfs of 128 MiB mounted at DIR/wal, filled with a file that leaves
# DURABLE_DISKFULL_FREE_MB (40) free: WAL writes soon fail with ENOSPC and the server PANICs.
# Root only (it mounts); returns 1 with a message otherwise. Exports DURABLE_DISKFULL_URL,
# DURABLE_DISKFULL_FREE_CMD (removes the filler) and DURABLE_DISKFULL_START_CMD (starts the
# server if it is down, and waits for it). durable_stop_diskfull_cluster stops and unmounts.

DURABLE_DISKFULL_DIR=""
DURABLE_DISKFULL_STARTED=0

durable_stop_diskfull_cluster() {
  ((DURABLE_DISKFULL_STARTED)) || return 0
  DURABLE_DISKFULL_STARTED=0
  durable_stop_stale "$DURABLE_DISKFULL_DIR"
  umount "$DURABLE_DISKFULL_DIR/wal" 2>/dev/null || true
  rm -rf "${DURABLE_DISKFULL_DIR:?}/data"
}

durable_start_diskfull_cluster() {
  local dir="$1"
  if ((EUID != 0)); then
    durable_log "the disk-full case mounts a small tmpfs for pg_wal and needs root: skipped"
    return 1
  fi
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd -P)"
  durable_ensure_pg_user
  if ! runuser -u "$DURABLE_PG_USER" -- test -x "$(dirname "$dir")" 2>/dev/null; then
    dir="/tmp/durable-diskfull-$(printf '%s' "$dir" | md5sum | cut -c1-12)"
  fi
  DURABLE_DISKFULL_DIR="$dir"
  trap 'durable__on_signal 130' INT
  trap 'durable__on_signal 143' TERM
  umount "$dir/wal" 2>/dev/null || true
  rm -rf "$dir"
  mkdir -p "$dir/wal"
  if ! mount -t tmpfs -o size=128m,mode=0700 durable-wal "$dir/wal"; then
    durable_log "could not mount a tmpfs on $dir/wal: the disk-full case is skipped"
    return 1
  fi
  DURABLE_DISKFULL_STARTED=1
  printf '%s\n' "$DURABLE_PG_PASSWORD" >"$dir/pwfile"
  chown -R "$DURABLE_PG_USER": "$dir"
  if ! durable_pg_as_owner timeout 120 "$DURABLE_PG_BIN/initdb" -D "$dir/data" \
         --waldir="$dir/wal/pg_wal" -U durable -E UTF8 --locale=C --auth-local=trust \
         --auth-host=scram-sha-256 --pwfile="$dir/pwfile" --no-sync --no-instructions \
         >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    durable_die "initdb of the disk-full cluster failed"
  fi
  rm -f "$dir/pwfile"
  local port
  port="$(durable_find_free_port)" || durable_die "no free TCP port in 20000-40000"
  cat >>"$dir/data/postgresql.conf" <<EOF

# --- durable disk-full cluster (scripts/lib.sh) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
port = $port
max_connections = 100
fsync = on
max_wal_size = 64MB
min_wal_size = 32MB
checkpoint_timeout = 30s
restart_after_crash = on
EOF
  if ! durable_pg_as_owner "$DURABLE_PG_BIN/pg_ctl" start -D "$dir/data" -l "$dir/server.log" \
         -w -s -t 60 >/dev/null 2>&1; then
    tail -n 20 "$dir/server.log" >&2 || true
    durable_die "could not start the disk-full cluster on port $port"
  fi
  local url="postgresql://durable:${DURABLE_PG_PASSWORD}@127.0.0.1:${port}"
  PGCONNECT_TIMEOUT=10 timeout 60 "$DURABLE_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
    "$url/postgres" -c 'CREATE DATABASE durable_test' >/dev/null ||
    durable_die "could not create database durable_test on the disk-full cluster"
  local avail fill
  avail="$(df --output=avail -B1M "$dir/wal" | tail -n 1 | tr -d ' ')"
  fill=$((avail - ${DURABLE_DISKFULL_FREE_MB:-40}))
  ((fill > 0)) || durable_die "the WAL tmpfs has only ${avail} MiB free"
  dd if=/dev/zero of="$dir/wal/filler" bs=1M count="$fill" status=none ||
    durable_die "could not write the filler file on $dir/wal"
  export DURABLE_DISKFULL_URL="$url/durable_test"
  export DURABLE_DISKFULL_FREE_CMD="rm -f $(printf '%q' "$dir/wal/filler")"
  local status start
  status="$(durable__pg_ctl_cmd status -D "$dir/data")"
  start="$(durable__pg_ctl_cmd start -D "$dir/data" -l "$dir/server.log" -w -s -t 120)"
  export DURABLE_DISKFULL_START_CMD="( $status >/dev/null 2>&1 || $start )"
  export DURABLE_DISKFULL_LOG="$dir/server.log"
  durable_log "PostgreSQL 15 on 127.0.0.1:$port with pg_wal on a 128 MiB tmpfs," \
    "${DURABLE_DISKFULL_FREE_MB:-40} MiB left free ($dir)"
}

# ---------------------------------------------------------------------------------------------
# Sanitizers

# durable_sanitizer_env BUILD_DIR: export ASAN_OPTIONS / UBSAN_OPTIONS for the sanitized tests.
# LeakSanitizer cannot run under ptrace (strace, gdb, some sandboxes); a tiny probe decides whether
# leak detection stays on, so that such an environment does not fail every test at exit.
durable_sanitizer_env() {
  local dir="$1" detect_leaks=1
  local probe="$dir/lsan-probe"
  if [[ ! -x "$probe" ]]; then
    printf 'int main() { return 0; }\n' >"$dir/lsan-probe.cpp"
    "${CXX:-c++}" -fsanitize=address "$dir/lsan-probe.cpp" -o "$probe" 2>/dev/null || true
  fi
  if [[ -x "$probe" ]] && ! ASAN_OPTIONS=detect_leaks=1 "$probe" >/dev/null 2>&1; then
    durable_log "LeakSanitizer does not work here (ptrace?); running with detect_leaks=0"
    detect_leaks=0
  fi
  export ASAN_OPTIONS="detect_leaks=${detect_leaks}${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
}
