#!/usr/bin/env bash
# run.sh is `make run`: start the bot on embedded defaults, picking what this machine can offer.
#   - Docker answers: make sure a sandbox image exists (the debootstrap'd base, or if that cannot be
#     built here, the busybox test image; the shell runtime works in both) and use it.
#   - No Docker: the local provider, which runs agent commands on this host with no isolation. Running
#     `make run` is the acknowledgement; the bot warns loudly on the console and on the page.
# Anything set in the environment or a config file still wins.
set -euo pipefail
cd "$(dirname "$0")/.."
here=deploy/sandbox-image

if [[ -z "${THREADBOX_SANDBOX_IMAGE:-}" ]] && docker info >/dev/null 2>&1; then
	if "$here/build.sh" base; then
		export THREADBOX_SANDBOX_IMAGE=threadbox/sandbox-base:latest
	else
		echo "run: the Debian base image could not be built here; using the busybox test image" >&2
		"$here/build.sh" test
		export THREADBOX_SANDBOX_IMAGE=threadbox/sandbox-test:latest
	fi
fi
export THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true
# The person at this machine administers the local web chat: trust loopback clients (never do this
# behind a reverse proxy or tunnel on this machine), and print a one-time login link for the browser.
export THREADBOX_ADMIN_USERS="${THREADBOX_ADMIN_USERS:-web:local}"
export THREADBOX_HTTP_TRUST_LOOPBACK="${THREADBOX_HTTP_TRUST_LOOPBACK:-true}"
# Static (no cgo): the model gateway mounts this binary into Docker sandboxes as their forwarder.
CGO_ENABLED=0 exec go run -ldflags "-X main.version=${VERSION:-dev}" ./cmd/threadbox serve --login-link "$@"
