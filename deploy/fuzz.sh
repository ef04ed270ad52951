#!/usr/bin/env bash
# Runs every fuzz target of the module (each func Fuzz… in a _test.go file), one at a time, for
# FUZZTIME each (default 10s). Extra arguments go to go test (-parallel=1 on a busy machine).
#
# A target that writes a crasher to its testdata/fuzz/ fails the run; make test then replays it.
# Go's fuzz coordinator can also fail a target with a bare "context deadline exceeded" when
# -fuzztime ends while a worker is still busy, which happens on a loaded machine and writes
# nothing: that one is reported and not counted as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
# Go minimizes each input that finds new coverage for up to a minute by default; with the large
# recorded streams among the seeds that would eat a short run whole.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-2s}

# crashers counts the inputs saved for a target (its directory may not exist yet).
crashers() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }

# The module's own packages only (go list): a plain grep of the tree would also find testdata and
# data/ (make run's local sandboxes, where a thread may have checked out any Go repository), which
# go test refuses, failing the run.
files=()
while IFS= read -r dir; do
	for f in "$dir"/*_test.go; do
		if [ -f "$f" ] && grep -q '^func Fuzz' "$f"; then files+=("${f#"$PWD"/}"); fi
	done
done < <("$GO" list -f '{{.Dir}}' ./...)

failed=0
for file in "${files[@]}"; do
	pkg=./$(dirname "$file")
	for fn in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		echo "== $pkg $fn ($FUZZTIME)"
		corpus=$pkg/testdata/fuzz/$fn
		before=$(crashers "$corpus")
		log=$(mktemp)
		if "$GO" test -run '^$' -fuzz "^$fn\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$@" "$pkg" 2>&1 | tee "$log"; then
			rm -f "$log"
			continue
		fi
		after=$(crashers "$corpus")
		if [ "$after" = "$before" ] && grep -qx '    context deadline exceeded' "$log"; then
			echo "== $fn: the fuzz coordinator stopped late (machine busy); no crasher written, not a failure"
		else
			echo "== $fn FAILED" >&2
			failed=1
		fi
		rm -f "$log"
	done
done
exit "$failed"
