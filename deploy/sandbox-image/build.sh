#!/usr/bin/env bash
# Builds Threadbox's sandbox images without any Docker registry.
#
#   threadbox/sandbox-test:latest  FROM scratch + Debian's static busybox. Seconds.
#   threadbox/sandbox-base:latest  debootstrap'd Debian bookworm, `docker import`ed.
#   threadbox/sandbox:latest       sandbox-base + the agent runtimes (opencode,
#                                  sandbox-agent, claude) from the npm registry,
#                                  pinned and checksummed in runtimes.lock.
#
# Every image carries the label threadbox.image.recipe=<sha256 of its inputs>;
# when an image with that label already exists the build is skipped, so reruns
# take seconds. Run with --help for usage; see README.md for the why.
set -Eeuo pipefail
umask 022 # image file modes must not depend on the caller's umask

readonly HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly PROG=${0##*/}
readonly SUITE=bookworm
readonly VARIANT=minbase
readonly TEST_IMAGE=threadbox/sandbox-test:latest
readonly BASE_IMAGE=threadbox/sandbox-base:latest
readonly FULL_IMAGE=threadbox/sandbox:latest
readonly RUNTIMES_LOCK=$HERE/runtimes.lock
readonly RECIPE_LABEL=threadbox.image.recipe
# Bump to force every machine to rebuild even though no input changed.
readonly RECIPE_VERSION=1
readonly CACHE_DIR=${THREADBOX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/threadbox}
readonly LOG_DIR=$CACHE_DIR/logs

# One keep-alive for both images. PID 1 ignores signals it has no handler for,
# so the test image's shell traps TERM itself; the base image uses tini, which
# forwards TERM to `sleep` and reaps orphans of `docker exec` (-e 143: a stop
# by SIGTERM counts as a clean exit 0, as in the test image). Either way
# `docker stop` returns at once instead of waiting out its 10 s grace period.
readonly TEST_CMD='["/bin/sh","-c","trap '\''exit 0'\'' TERM; while :; do sleep 3600 & wait $!; done"]'
readonly BASE_CMD='["/usr/bin/tini","-e","143","--","sleep","infinity"]'
readonly DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

FORCE=0
WORK=    # temp dir, removed on exit
PARTIAL= # cache entry being written, removed on exit unless complete

usage() {
	cat <<EOF
Usage: $PROG [--force] test|base|all|runtimes|full
       $PROG --help

Builds Threadbox's sandbox images offline (no registry, nothing is pulled).

Targets:
  test   $TEST_IMAGE: FROM scratch + Debian's busybox-static. Seconds.
  base   $BASE_IMAGE: debootstrap'd Debian $SUITE with the packages
         in packages.txt, user agent (1000:1000), /workspace. Needs root.
  all    test and base
  runtimes
         $FULL_IMAGE: $BASE_IMAGE (built first if missing)
         plus the agent runtimes pinned in runtimes.lock, downloaded once
         from the npm registry with npm into the cache. Needs npm only
         for that first download.
  full   test, base and runtimes

Options:
  --force   rebuild even if an image with the same recipe label exists

Environment:
  THREADBOX_DEBIAN_MIRROR  Debian mirror URI for debootstrap (default: the one
                           this machine's apt sources use)
  THREADBOX_CACHE_DIR      cache for downloaded packages (Debian and npm)
                           and build logs
                           (default: \${XDG_CACHE_HOME:-\$HOME/.cache}/threadbox)
  TMPDIR                   where the root filesystem is assembled (default: /var/tmp)
EOF
}

# One line per step on stderr, so stdout stays free for callers.
step() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}
# set -e alone would exit silently; name the command that failed instead.
trap 'die "line $LINENO: command failed: $BASH_COMMAND"' ERR

cleanup() {
	[[ -z $PARTIAL ]] || rm -f "$PARTIAL"
	[[ -n $WORK && -d $WORK ]] || return 0
	# debootstrap mounts /proc and /sys inside its target. If it was interrupted
	# they may still be mounted: unmount first, and never let rm cross into
	# another filesystem, so cleaning up can never touch the host.
	local m
	awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
# Exit (and so clean up) on signals too, saying why.
trap 'printf "%s: interrupted\n" "$PROG" >&2; exit 130' INT
trap 'printf "%s: terminated\n" "$PROG" >&2; exit 143' TERM

sha256() { sha256sum | cut -d' ' -f1; }

# Runs "$@" with its output in $LOG_DIR/<name>.log; on failure dies with the
# most telling line of that log (debootstrap marks errors with "E:").
run_logged() {
	local name=$1 log
	shift
	log=$LOG_DIR/$name.log
	if ! "$@" >"$log" 2>&1; then
		local cause
		cause=$(grep -E '^(E:|ERROR|Error)' "$log" | tail -n 1 || true)
		[[ -n $cause ]] || cause=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 || true)
		die "$name failed: ${cause:-no output} (full log: $log)"
	fi
}

need_docker() {
	command -v docker >/dev/null || die "docker CLI not found: run deploy/test-services.sh (as root) or install docker.io"
	docker info >/dev/null 2>&1 ||
		die "Docker daemon not reachable: run deploy/test-services.sh, or start dockerd"
}

# Reuses an image whose recipe label is $2 by tagging it $1. Returns 1 when
# there is none (or --force was given), i.e. when the caller has to build.
reuse_image() {
	local image=$1 recipe=$2 id
	((FORCE)) && return 1
	id=$(docker images --quiet --no-trunc --filter "label=$RECIPE_LABEL=$recipe" | head -n 1)
	[[ -n $id ]] || return 1
	docker tag "$id" "$image"
	step "$(short "$image"): up to date (recipe ${recipe:0:12}), nothing to do"
}

# After a rebuild the previous image is left untagged; drop it so repeated
# builds do not pile up. rmi refuses when a container still uses it: fine.
drop_old_image() {
	local old=$1 image=$2 new
	new=$(docker image inspect --format '{{.Id}}' "$image")
	if [[ -n $old && $old != "$new" ]]; then
		docker rmi "$old" >/dev/null 2>&1 || true
	fi
}

short() { local s=${1#threadbox/}; printf '%s' "${s%%:*}"; }
image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

report() {
	local image=$1 start=$2 size
	size=$(docker image inspect --format '{{.Size}}' "$image" | awk '{ printf "%.1f MB", $1 / 1e6 }')
	step "$(short "$image"): built $image ($size) in $((SECONDS - start)) s"
}

###############################################################################
# test: FROM scratch + busybox

build_test() {
	local start=$SECONDS ctx root recipe old applet
	need_docker
	step "sandbox-test: assembling rootfs from /bin/busybox"
	[[ -x /bin/busybox ]] || die "/bin/busybox not found: apt-get install busybox-static"
	# FROM scratch has no libc, so only the static build can run there. ldd
	# fails ("not a dynamic executable") exactly when the binary is static.
	if ldd /bin/busybox >/dev/null 2>&1; then
		die "/bin/busybox is dynamically linked: apt-get install busybox-static (replaces package busybox)"
	fi

	ctx=$WORK/test
	root=$ctx/root
	mkdir -p "$root"/{bin,etc,root,tmp,usr,workspace}
	install -m 0755 /bin/busybox "$root/bin/busybox"
	/bin/busybox --list | while read -r applet; do
		[[ -n $applet && $applet != busybox && $applet != */* ]] || continue
		ln -s busybox "$root/bin/$applet"
	done
	# Scripts hard-code /usr/bin/env, /sbin/ip, ...: point the usual
	# directories at /bin so those paths resolve too.
	ln -s ../bin "$root/usr/bin"
	ln -s ../bin "$root/usr/sbin"
	ln -s bin "$root/sbin"
	cat >"$root/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/bin/sh
		agent:x:1000:1000:agent:/workspace:/bin/sh
	EOF
	cat >"$root/etc/group" <<-'EOF'
		root:x:0:
		agent:x:1000:
	EOF
	chmod 0700 "$root/root"
	chmod 1777 "$root/tmp"
	chmod 0755 "$root/workspace"

	# Ownership lives in the tar, not on disk, so this step needs no root:
	# everything root-owned, then /workspace appended as 1000:1000. Fixed order
	# and mtimes make the tar (and so the recipe hash) reproducible.
	local tar_opts=(--sort=name --mtime=@0 --numeric-owner --format=gnu)
	tar -C "$root" "${tar_opts[@]}" --owner=0 --group=0 --exclude=./workspace -cf "$ctx/rootfs.tar" .
	tar -C "$root" "${tar_opts[@]}" --owner=1000 --group=1000 -rf "$ctx/rootfs.tar" ./workspace

	cat >"$ctx/Dockerfile" <<-EOF
		FROM scratch
		ADD rootfs.tar /
		ENV PATH=$DEFAULT_PATH
		USER 1000:1000
		WORKDIR /workspace
		CMD $TEST_CMD
	EOF

	recipe=$(cat "$ctx/Dockerfile" "$ctx/rootfs.tar" | sha256)
	reuse_image "$TEST_IMAGE" "$recipe" && return 0

	step "sandbox-test: docker build (recipe ${recipe:0:12})"
	old=$(image_id "$TEST_IMAGE")
	# Without the buildx plugin the CLI cannot use BuildKit; fall back to the
	# classic builder, which this one-layer Dockerfile needs nothing more than.
	local env=()
	docker buildx version >/dev/null 2>&1 || env=(DOCKER_BUILDKIT=0)
	run_logged sandbox-test-build env "${env[@]}" docker build \
		--label "$RECIPE_LABEL=$recipe" --tag "$TEST_IMAGE" "$ctx"
	drop_old_image "$old" "$TEST_IMAGE"
	report "$TEST_IMAGE" "$start"
}

###############################################################################
# base: debootstrap + docker import

# Prints "URI SUITE" for every enabled binary source in this machine's apt
# configuration: deb822 *.sources files and classic one-line *.list files.
apt_sources() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		awk '
			function flush(   n, m, i, j, u, s) {
				if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no") {
					n = split(uris, u); m = split(suites, s)
					for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j]
				}
				types = uris = suites = enabled = last = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			/^[ \t]/ { # continuation of a multi-line field
				if (last == "uris") uris = uris " " $0
				else if (last == "suites") suites = suites " " $0
				next
			}
			{
				key = tolower($0); sub(/:.*/, "", key)
				val = $0; sub(/^[^:]*:[ \t]*/, "", val)
				last = key
				if (key == "types") types = val
				else if (key == "uris") uris = val
				else if (key == "suites") suites = val
				else if (key == "enabled") enabled = tolower(val)
			}
			END { flush() }' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -r $f ]] || continue
		# deb [option=value ...] URI SUITE COMPONENT...
		sed 's/#.*//' "$f" | awk '$1 == "deb" {
			i = 2
			if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
			if (i + 1 <= NF) print $i, $(i + 1)
		}'
	done
}

# Sets MIRROR, the archive debootstrap downloads from: $THREADBOX_DEBIAN_MIRROR,
# else the source this machine already uses for $SUITE, else any .../debian
# archive (e.g. on a trixie host). Read at run time, never hard-coded: build
# hosts often may reach only their own configured mirror. (A variable, not
# output: die inside $(...) would only end the subshell.)
MIRROR=
debian_mirror() {
	if [[ -n ${THREADBOX_DEBIAN_MIRROR:-} ]]; then
		MIRROR=${THREADBOX_DEBIAN_MIRROR%/}
		return
	fi
	local sources uri
	sources=$(apt_sources | awk '$1 ~ /^(https?|file):/')
	uri=$(awk -v s="$SUITE" '$2 == s { print $1; exit }' <<<"$sources")
	[[ -n $uri ]] || uri=$(awk '$2 !~ /-security$/ && $1 ~ /\/debian\/?$/ { print $1; exit }' <<<"$sources")
	[[ -n $uri ]] ||
		die "no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/: set THREADBOX_DEBIAN_MIRROR=<uri>"
	MIRROR=${uri%/}
}

# packages.txt without comments and blank lines, sorted, comma-separated.
base_packages() {
	sed 's/#.*//' "$HERE/packages.txt" | tr -s ' \t' '\n\n' | grep -v '^$' | sort -u | paste -sd, -
}

# docker import applies these to the imported filesystem.
readonly BASE_CHANGES=(
	"ENV PATH=$DEFAULT_PATH"
	"ENV LANG=C.UTF-8"
	"USER 1000:1000"
	"WORKDIR /workspace"
	"CMD $BASE_CMD"
)

# Everything done to the debootstrap'd tree before import. Its source text is
# part of the recipe hash (declare -f), so editing it triggers a rebuild.
customize_base_rootfs() {
	local root=$1
	# The agent runs unprivileged as 1000:1000, like in the test image.
	chroot "$root" groupadd --gid 1000 agent
	chroot "$root" useradd --uid 1000 --gid 1000 --create-home --home-dir /home/agent \
		--shell /bin/bash agent
	install -d -o 1000 -g 1000 -m 0755 "$root/workspace"

	# debootstrap copied these from the build host. Docker bind-mounts its own
	# at run time; in the image they would only leak the host's identity.
	: >"$root/etc/resolv.conf"
	echo localhost >"$root/etc/hostname"
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"

	# debootstrap wrote the mirror it used into sources.list: a THREADBOX_DEBIAN_MIRROR
	# with credentials (https://user:token@mirror/) would ship them in every sandbox.
	if [[ -f $root/etc/apt/sources.list ]]; then
		sed -i -E 's#(://)[^/@[:space:]]+@#\1#g' "$root/etc/apt/sources.list"
	fi

	# Like debian:*-slim: no docs, man pages or translations, neither now nor
	# in whatever gets apt-installed on top later (licences are kept).
	cat >"$root/etc/dpkg/dpkg.cfg.d/threadbox-slim" <<-'EOF'
		path-exclude /usr/share/doc/*
		path-include /usr/share/doc/*/copyright
		path-exclude /usr/share/man/*
		path-exclude /usr/share/info/*
		path-exclude /usr/share/locale/*
		path-include /usr/share/locale/locale.alias
	EOF
	find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
	find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/*
	find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +

	# No package indexes, .debs or logs in the image, and apt keeps none later.
	cat >"$root/etc/apt/apt.conf.d/threadbox-clean" <<-'EOF'
		Binary::apt::APT::Keep-Downloaded-Packages "false";
		Dir::Cache::pkgcache "";
		Dir::Cache::srcpkgcache "";
	EOF
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
		"$root"/var/lib/dpkg/*-old "$root"/var/log/apt/* \
		"$root"/var/log/{dpkg,alternatives,bootstrap}.log
}

build_base() {
	local start=$SECONDS arch packages pkg_hash recipe tarball root old
	need_docker
	((EUID == 0)) || die "sandbox-base needs root (debootstrap, chroot): run it as root or with sudo"
	command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap"
	[[ -r $HERE/packages.txt ]] || die "$HERE/packages.txt is missing"

	arch=$(dpkg --print-architecture)
	packages=$(base_packages)
	# The package cache depends only on what is downloaded; the recipe also on
	# what is done with it.
	pkg_hash=$(printf '%s\n' "$SUITE" "$arch" "$VARIANT" "$packages" | sha256 | cut -c1-16)
	recipe=$(printf '%s\n' "$RECIPE_VERSION" "$SUITE" "$arch" "$VARIANT" "$packages" \
		"$(declare -f customize_base_rootfs)" "${BASE_CHANGES[@]}" | sha256)
	reuse_image "$BASE_IMAGE" "$recipe" && return 0

	debian_mirror
	local dbs=(debootstrap --arch="$arch" --variant="$VARIANT" --include="$packages" --force-check-gpg)
	tarball=$CACHE_DIR/debootstrap/$SUITE-$arch-$pkg_hash.tgz
	mkdir -p "${tarball%/*}"
	if [[ ! -s $tarball ]]; then
		step "sandbox-base: downloading $SUITE packages from $MIRROR (cached in $tarball)"
		# Write next to the target and rename, so an interrupted download never
		# leaves a truncated cache entry behind.
		PARTIAL=${tarball%/*}/.partial-$$-${tarball##*/}
		run_logged sandbox-base-download "${dbs[@]}" --make-tarball="$PARTIAL" \
			"$SUITE" "$WORK/download" "$MIRROR"
		mv -f "$PARTIAL" "$tarball"
		PARTIAL=
	else
		step "sandbox-base: using cached packages $tarball"
	fi

	root=$WORK/rootfs
	step "sandbox-base: installing rootfs (debootstrap --unpack-tarball)"
	run_logged sandbox-base-debootstrap "${dbs[@]}" --unpack-tarball="$tarball" \
		"$SUITE" "$root" "$MIRROR"

	step "sandbox-base: adding user agent, /workspace; trimming docs and apt caches"
	customize_base_rootfs "$root"

	step "sandbox-base: docker import (recipe ${recipe:0:12})"
	old=$(image_id "$BASE_IMAGE")
	local changes=() c
	for c in "${BASE_CHANGES[@]}" "LABEL $RECIPE_LABEL=$recipe"; do changes+=(--change "$c"); done
	# /dev, /proc and /sys are provided by the runtime; ship them empty.
	run_logged sandbox-base-import bash -o pipefail -c '
		tar -C "$1" --numeric-owner --exclude="./dev/*" --exclude="./proc/*" --exclude="./sys/*" -c . |
			docker import "${@:3}" - "$2"' _ "$root" "$BASE_IMAGE" "${changes[@]}"
	drop_old_image "$old" "$BASE_IMAGE"
	report "$BASE_IMAGE" "$start"
}

###############################################################################
# runtimes: sandbox-base + the agent runtimes from npm (see build-runtimes.sh)

# shellcheck source=build-runtimes.sh
source "$HERE/build-runtimes.sh"

###############################################################################

main() {
	local targets=() arg
	for arg in "$@"; do
		case $arg in
		-h | --help)
			usage
			return 0
			;;
		--force) FORCE=1 ;;
		test | base | runtimes) targets+=("$arg") ;;
		all) targets+=(test base) ;;
		full) targets+=(test base runtimes) ;;
		*) die "unknown argument '$arg' (see $PROG --help)" ;;
		esac
	done
	((${#targets[@]})) || {
		usage >&2
		exit 2
	}

	mkdir -p "$LOG_DIR"
	# Parallel callers (e.g. several test packages) would otherwise build the
	# same image twice; the second one now waits, then finds it up to date.
	exec 9>"$CACHE_DIR/build.lock"
	if ! flock --nonblock 9; then
		step "waiting for another $PROG run to finish"
		flock 9
	fi
	WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/threadbox-sandbox-image.XXXXXX")

	local t
	for t in "${targets[@]}"; do "build_$t"; done
}

main "$@"
