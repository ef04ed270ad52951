#!/usr/bin/env bash
# test-services.sh makes sure the real services the test suite needs are running on 127.0.0.1:
#   - a Docker daemon (Debian's docker.io),
#   - PostgreSQL with a threadbox_test database and a threadbox role,
#   - Redis,
# and that the offline test images exist. It is idempotent: a second run only checks.
#
# It needs root on Debian (it installs missing packages with apt). Anywhere else it stops with one line
# that says what to install by hand.
#
# Usage: deploy/test-services.sh            # ensure services, print the env to use
#        deploy/test-services.sh --env      # only print the env lines (for eval)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PG_URL_DEFAULT="postgres://threadbox:threadbox@127.0.0.1:5432/threadbox_test?sslmode=disable"
REDIS_URL_DEFAULT="redis://127.0.0.1:6379/0"

print_env() {
	echo "export THREADBOX_TEST_POSTGRES_URL='${THREADBOX_TEST_POSTGRES_URL:-$PG_URL_DEFAULT}'"
	echo "export THREADBOX_TEST_REDIS_URL='${THREADBOX_TEST_REDIS_URL:-$REDIS_URL_DEFAULT}'"
}
if [[ "${1:-}" == "--env" ]]; then print_env; exit 0; fi

log() { printf 'test-services: %s\n' "$*" >&2; }
die() { printf 'test-services: %s\n' "$*" >&2; exit 1; }

# wait_for CMD... retries a probe with a short, growing backoff (up to ~60 s) instead of a fixed poll.
wait_for() {
	local delay=0.05 waited=0
	until "$@" >/dev/null 2>&1; do
		sleep "$delay"
		waited=$(awk -v a="$waited" -v b="$delay" 'BEGIN{print a+b}')
		delay=$(awk -v d="$delay" 'BEGIN{d*=2; if (d>2) d=2; print d}')
		awk -v w="$waited" 'BEGIN{exit !(w>60)}' && return 1
	done
	return 0
}

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
command -v pg_ctlcluster >/dev/null 2>&1 || need_pkgs+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
[[ -x /bin/busybox ]] || need_pkgs+=(busybox-static)
command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap)
# The web chat's browser test drives Debian's headless Chromium.
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)

if ((${#need_pkgs[@]})); then
	[[ $(id -u) == 0 ]] || die "not root: install ${need_pkgs[*]} yourself (or run as root), then rerun"
	command -v apt-get >/dev/null 2>&1 || die "no apt-get (not Debian): install ${need_pkgs[*]} and start Docker, PostgreSQL and Redis on 127.0.0.1"
	log "installing ${need_pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# busybox-static must be the static build: the FROM-scratch test image has no libc.
if ldd /bin/busybox >/dev/null 2>&1; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
	else
		die "/bin/busybox is not static: install Debian's busybox-static"
	fi
fi

# --- Docker ---------------------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
	if [[ -n "${DOCKER_HOST:-}" ]]; then
		die "DOCKER_HOST=$DOCKER_HOST does not answer: start that daemon or unset DOCKER_HOST"
	fi
	log "starting dockerd"
	mkdir -p /var/log
	# No systemd in CI containers: run the daemon directly, detached, logging to a file.
	nohup dockerd >/var/log/threadbox-dockerd.log 2>&1 </dev/null &
	wait_for docker info || die "dockerd did not come up; see /var/log/threadbox-dockerd.log"
fi

# --- PostgreSQL -----------------------------------------------------------------------------------
pg_ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h 2>/dev/null | grep -q .; then
	[[ $(id -u) == 0 ]] || die "no PostgreSQL cluster: run 'pg_createcluster $pg_ver main' as root"
	pg_createcluster "$pg_ver" main >/dev/null
fi
cluster=$(pg_lsclusters -h | awk 'NR==1{print $1" "$2}')
if ! pg_lsclusters -h | awk 'NR==1{exit !($4=="online")}'; then
	log "starting PostgreSQL $cluster"
	# shellcheck disable=SC2086
	pg_ctlcluster $cluster start
fi
wait_for runuser -u postgres -- psql -qAtc 'select 1' || die "PostgreSQL did not come up"
psql_su() { runuser -u postgres -- psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
if [[ -z $(psql_su -c "select 1 from pg_roles where rolname='threadbox'") ]]; then
	psql_su -c "create role threadbox login superuser password 'threadbox'"
fi
if [[ -z $(psql_su -c "select 1 from pg_database where datname='threadbox_test'") ]]; then
	psql_su -c "create database threadbox_test owner threadbox"
fi
# Many test packages open pools at once under -race: give them room.
if [[ $(psql_su -c "show max_connections") -lt 300 ]]; then
	psql_su -c "alter system set max_connections = 300" >/dev/null
	# shellcheck disable=SC2086
	pg_ctlcluster $cluster restart
	wait_for runuser -u postgres -- psql -qAtc 'select 1' || die "PostgreSQL did not come back"
fi

# --- Redis ----------------------------------------------------------------------------------------
if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
	log "starting redis-server"
	redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save '' --appendonly no \
		--logfile /var/log/threadbox-redis.log >/dev/null
	wait_for redis-cli -h 127.0.0.1 ping || die "redis-server did not come up; see /var/log/threadbox-redis.log"
fi

# --- Images ---------------------------------------------------------------------------------------
"$here/sandbox-image/build.sh" full

log "ready: docker $(docker version -f '{{.Server.Version}}'), $(psql_su -c 'show server_version' | cut -d' ' -f1) postgres, redis $(redis-cli -h 127.0.0.1 info server | awk -F: '/redis_version/{print $2}' | tr -d '\r')"
print_env
