#!/usr/bin/env bash
# Builds the Threadbox bot image with no registry: nothing is pulled.
#
#   deploy/bot-image/build.sh [--tag IMAGE] [--version V]
#
# deploy/Dockerfile compiles in a golang image, which cannot be pulled here. This script does that
# stage on the host instead (the same go build commands and rootfs.sh), packs the result as a tar with
# the same ownership, and builds the Dockerfile's final stage, taken from deploy/Dockerfile itself,
# with `ADD rootfs.tar /` in place of `COPY --from=build /out/ /`. Prints the image tag on stdout.
#
# Defaults: --tag threadbox/threadbox:latest, --version from `git describe` (else dev).
# Needs: Go (the version go.mod asks for), Docker, and a CA bundle (package ca-certificates).
set -Eeuo pipefail
umask 022 # file modes in the image must not depend on the caller's umask

readonly HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly REPO=$(cd "$HERE/../.." && pwd)
readonly PROG=${0##*/}
readonly DOCKERFILE=$REPO/deploy/Dockerfile
readonly COPY_LINE='COPY --from=build /out/ /'

die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}
trap 'die "line $LINENO: command failed: $BASH_COMMAND"' ERR

tag=threadbox/threadbox:latest
version=
while (($#)); do
	case $1 in
	--tag) tag=${2:?--tag needs a value}; shift 2 ;;
	--version) version=${2:?--version needs a value}; shift 2 ;;
	-h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see $PROG --help)" ;;
	esac
done
[[ -n $version ]] || version=$(git -C "$REPO" describe --tags --always --dirty 2>/dev/null || echo dev)
command -v docker >/dev/null || die "docker not found"
docker info >/dev/null 2>&1 || die "the Docker daemon is not answering (deploy/test-services.sh starts one)"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/threadbox-bot-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

# The build stage of deploy/Dockerfile, on the host. CGO off gives a static binary: it has to run
# on an empty base with no libc.
cd "$REPO"
export CGO_ENABLED=0
go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$root/usr/local/bin/threadbox" ./cmd/threadbox
go build -trimpath -ldflags "-s -w" -o "$root/usr/local/bin/healthcheck" ./deploy/bot-image/healthcheck
"$HERE/rootfs.sh" "$root"

# Ownership lives in the tar, so this needs no root: everything root's, the working directory the
# user's (as the Dockerfile's chown). Fixed order and mtimes keep the layer reproducible.
tar_opts=(--sort=name --mtime=@0 --numeric-owner --format=gnu)
tar -C "$root" "${tar_opts[@]}" --owner=0 --group=0 --exclude=./var/lib/threadbox -cf "$work/rootfs.tar" .
tar -C "$root" "${tar_opts[@]}" --owner=65532 --group=65532 -rf "$work/rootfs.tar" ./var/lib/threadbox

# The final stage, verbatim but for where the files come from.
awk -v copy="$COPY_LINE" '
	/^FROM scratch AS image$/ { on = 1 }
	on && $0 == copy { $0 = "ADD rootfs.tar /"; n++ }
	on { print }
	END { if (n != 1) exit 1 }' "$DOCKERFILE" >"$work/Dockerfile" ||
	die "$DOCKERFILE: expected a stage 'FROM scratch AS image' with exactly one '$COPY_LINE'"

old=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
# Without the buildx plugin the CLI cannot use BuildKit; the classic builder does this single stage.
env=()
docker buildx version >/dev/null 2>&1 || env=(DOCKER_BUILDKIT=0)
env "${env[@]}" docker build --quiet --label "org.opencontainers.image.version=$version" \
	--tag "$tag" "$work" >/dev/null
new=$(docker image inspect --format '{{.Id}}' "$tag")
# A rebuild leaves the previous image untagged; drop it unless a container still uses it.
if [[ -n $old && $old != "$new" ]]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
echo "$tag"
