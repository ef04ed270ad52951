#!/usr/bin/env bash
# run.sh is `make run`: start the bot on embedded defaults, picking what this machine can offer.
#   - Docker answers and a model key is set (ANTHROPIC_API_KEY or OPENAI_API_KEY, and runtime.name is
#     not shell): make sure the image with the agent runtimes exists (built on first use, from the
#     debootstrap'd base and the npm registry; cached after that) and use it. The bot's model gateway
#     serves the runtimes, so the key stays in this process and the sandbox keeps network none.
#   - Docker answers, no model key: make sure a sandbox image exists (the debootstrap'd base, or if
#     that cannot be built here, the busybox test image; the shell runtime works in both) and use it.
#   - No Docker: the local provider, which runs agent commands on this host with no isolation. Running
#     `make run` is the acknowledgement; the bot warns loudly on the console and on the page.
# GO picks the go that builds the bot (make run GO=go1.26.1).
# Anything set in the environment or a config file still wins (THREADBOX_SANDBOX_IMAGE skips all of
# the above; THREADBOX_RUNTIME_NAME=shell ignores the model keys).
set -euo pipefail
cd "$(dirname "$0")/.."
here=deploy/sandbox-image

ai_runtime() {
	[[ ${THREADBOX_RUNTIME_NAME:-auto} != shell ]] &&
		[[ -n ${ANTHROPIC_API_KEY:-} || -n ${OPENAI_API_KEY:-} || ${THREADBOX_RUNTIME_NAME:-auto} != auto ]]
}

if [[ -z "${THREADBOX_SANDBOX_IMAGE:-}" ]] && docker info >/dev/null 2>&1; then
	if ai_runtime; then
		# The first build downloads Debian packages and the runtimes (a few minutes); build.sh prints
		# each step. Later runs find the image by its recipe label and take seconds.
		echo "run: a model key is set: using the image with the agent runtimes (threadbox/sandbox)" >&2
		if ! "$here/build.sh" runtimes; then
			echo "run: the agent runtimes image could not be built (see above). Fix that, or start without" >&2
			echo "run: the AI runtime: THREADBOX_RUNTIME_NAME=shell make run" >&2
			exit 1
		fi
		export THREADBOX_SANDBOX_IMAGE=threadbox/sandbox:latest
	elif "$here/build.sh" base; then
		export THREADBOX_SANDBOX_IMAGE=threadbox/sandbox-base:latest
	else
		echo "run: the Debian base image could not be built here; using the busybox test image" >&2
		"$here/build.sh" test
		export THREADBOX_SANDBOX_IMAGE=threadbox/sandbox-test:latest
	fi
fi
export THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true
# data/ (the database, the gateway's sockets, the local provider's sandboxes, where agents write what
# they like) is inside this Go module: a go.mod of its own keeps any Go file there out of the module's
# packages (go test ./..., go vet ./..., make fuzz).
mkdir -p data
[[ -f data/go.mod ]] || printf '// The data of make run (deploy/run.sh): a module of its own, not part of threadbox.\nmodule threadbox.local/data\n' >data/go.mod
# The person at this machine administers the local web chat: trust loopback clients (never do this
# behind a reverse proxy or tunnel on this machine), and print a one-time login link for the browser.
export THREADBOX_ADMIN_USERS="${THREADBOX_ADMIN_USERS:-web:local}"
export THREADBOX_HTTP_TRUST_LOOPBACK="${THREADBOX_HTTP_TRUST_LOOPBACK:-true}"
# Static (no cgo): the model gateway mounts this binary into Docker sandboxes as their forwarder.
# Built, then exec'd (not `go run`), so that Ctrl-C and SIGTERM reach the bot itself and it shuts down
# cleanly.
CGO_ENABLED=0 "${GO:-go}" build -ldflags "-X main.version=${VERSION:-dev}" -o bin/threadbox ./cmd/threadbox
exec bin/threadbox serve --login-link "$@"
