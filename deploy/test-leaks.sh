#!/usr/bin/env bash
# test-leaks.sh checks that a test run left no Docker container, volume or network behind.
#
#   deploy/test-leaks.sh snapshot FILE   before the tests: record the labelled objects that exist
#   deploy/test-leaks.sh check FILE      after them: fail, listing them, if new ones remain
#
# Objects are found by the sandbox label (threadbox.deployment). Only objects that appeared during the
# run count, and never those of the deployment `make run` uses (THREADBOX_DEPLOYMENT, default
# threadbox), so a bot running on this machine is not mistaken for a leak. Several test runs sharing
# one Docker engine at once can still see each other's live sandboxes: run `make test` alone.
set -euo pipefail

label=threadbox.deployment
own=${THREADBOX_DEPLOYMENT:-threadbox}

list() {
	docker ps -a --filter "label=$label" --format "container {{.ID}} {{.Label \"$label\"}} {{.Names}}"
	docker volume ls --filter "label=$label" --format "volume {{.Name}} {{.Label \"$label\"}}"
	docker network ls --filter "label=$label" --format "network {{.ID}} {{.Label \"$label\"}} {{.Name}}"
}

[[ $# -eq 2 ]] || { echo "usage: $0 snapshot|check FILE" >&2; exit 2; }
if ! docker info >/dev/null 2>&1; then
	echo "test-leaks: no Docker engine; nothing to check" >&2
	[[ $1 == snapshot ]] && : >"$2"
	exit 0
fi
case $1 in
snapshot) list | sort >"$2" ;;
check)
	# New lines only (comm -13), minus the user's own deployment.
	leaked=$(list | sort | comm -13 "$2" - | awk -v own="$own" '$3 != own')
	if [[ -n $leaked ]]; then
		echo "test-leaks: the tests left these behind (remove with docker rm -f / docker volume rm):" >&2
		echo "$leaked" >&2
		exit 1
	fi
	echo "test-leaks: no container, volume or network left behind"
	;;
*) echo "usage: $0 snapshot|check FILE" >&2; exit 2 ;;
esac
