# shellcheck shell=bash
# The `runtimes` target of build.sh, which sources this file (it is not run on
# its own): threadbox/sandbox:latest = threadbox/sandbox-base:latest plus the
# agent runtimes pinned in runtimes.lock.
#
# Why it is built this way:
#   - The binaries come from the npm registry (the only registry this machine
#     reaches), fetched with `npm pack` (npm checks the registry's sha512), then
#     checked against the sha256 in runtimes.lock. They are kept in the cache
#     under their checksum, so a rebuild downloads nothing.
#   - No RUN step: everything the image adds is one tar with its ownership set
#     in the headers (root for the binaries, agent for agent's home), ADDed in
#     a single layer. So the build needs no network and no package manager
#     inside, and the classic builder (no BuildKit here) is enough.
#   - The recipe hash covers runtimes.lock, the base image id and this file's
#     functions, not the 600 MB of binaries: they are pinned by the lock.
#   - The Docker provider reaches ports in the sandbox by piping an exec to
#     `nc` (its bash /dev/tcp fallback keeps a tunnel open after the server
#     side closed, so a client waits forever on a dead keep-alive connection):
#     the image gets nc from the host's static busybox (Debian busybox-static,
#     as in the test image), only as /usr/local/bin/{busybox,nc}.
#   - None of the runtimes needs Node: opencode and claude are self-contained
#     executables (Bun), sandbox-agent is static. So the image has no node; the
#     sandbox-agent runtime drives the opencode agent (`opencode acp`), whose
#     launcher is pre-placed because sandbox-agent's installer needs the
#     internet. Its claude agent would need Node and @zed-industries/claude-agent-acp.

# Fields of the lock's non-comment lines: spec sha256 member dest.
runtimes_entries() { sed 's/#.*//' "$RUNTIMES_LOCK" | awk 'NF { if (NF != 4) exit 1; print }'; }

# fetch_npm SPEC SHA256: makes sure the cache holds the tarball, verified, and
# sets FETCHED to its path. Downloads into WORK first, so an interrupted
# download never leaves a cache entry (and an entry is re-checked on every use).
FETCHED=
fetch_npm() {
	local spec=$1 sum=$2 dir=$CACHE_DIR/npm name got tmp
	name=${spec#@}
	name=${name//\//-}
	FETCHED=$dir/$name-${sum:0:12}.tgz
	if [[ -s $FETCHED ]] && [[ $(sha256 <"$FETCHED") == "$sum" ]]; then
		return 0
	fi
	command -v npm >/dev/null ||
		die "npm not found: it is needed once, to download $spec (apt-get install npm)"
	step "sandbox: downloading $spec from the npm registry (cached in $dir)"
	mkdir -p "$dir"
	tmp=$WORK/npm-$name
	mkdir -p "$tmp"
	run_logged "npm-pack-$name" npm pack --silent --pack-destination "$tmp" "$spec"
	got=$(cat "$tmp"/*.tgz | sha256)
	[[ $got == "$sum" ]] ||
		die "$spec: the registry's tarball has sha256 $got, runtimes.lock pins $sum (a republished version? check and update the lock)"
	mv -f "$tmp"/*.tgz "$FETCHED.partial"
	mv -f "$FETCHED.partial" "$FETCHED"
}

# What the image adds besides the binaries. Its source is part of the recipe.
customize_runtimes_overlay() {
	local root=$1 sa
	# sandbox-agent looks for its agents under ~/.local/share/sandbox-agent/bin and
	# would download them (from GitHub and npx) on the first request: pre-place
	# the opencode agent so that it is "installed" offline.
	sa=$root/home/agent/.local/share/sandbox-agent/bin
	mkdir -p "$sa/agent_processes"
	ln -s /usr/local/bin/opencode "$sa/opencode"
	cat >"$sa/agent_processes/opencode-acp" <<-'EOF'
		#!/usr/bin/env sh
		exec /usr/local/bin/opencode acp "$@"
	EOF
	chmod 0755 "$sa/agent_processes/opencode-acp"
	# The runtimes keep their state (sessions, transcripts) under these; make
	# them agent's now so that no tool ever creates them root-owned.
	mkdir -p "$root/home/agent/.local/state" "$root/home/agent/.config" "$root/home/agent/.cache" \
		"$root/home/agent/.claude"
}

build_runtimes() {
	local start=$SECONDS base_id recipe ctx root old spec sum member dest entries
	need_docker
	[[ -r $RUNTIMES_LOCK ]] || die "$RUNTIMES_LOCK is missing"
	entries=$(runtimes_entries) || die "$RUNTIMES_LOCK: every line must be: package@version sha256 member dest"
	base_id=$(image_id "$BASE_IMAGE")
	if [[ -z $base_id ]]; then
		step "sandbox: $BASE_IMAGE is missing, building it first"
		build_base
		base_id=$(image_id "$BASE_IMAGE")
	fi
	[[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 ||
		die "/bin/busybox is missing or not static: apt-get install busybox-static (it provides nc in the image)"
	recipe=$(printf '%s\n' "$RECIPE_VERSION" "$base_id" "$entries" "$(sha256 </bin/busybox)" \
		"$(declare -f customize_runtimes_overlay build_runtimes)" | sha256)
	reuse_image "$FULL_IMAGE" "$recipe" && return 0

	ctx=$WORK/runtimes
	root=$ctx/root
	mkdir -p "$root"
	local files=()
	while read -r spec sum member dest; do
		fetch_npm "$spec" "$sum"
		step "sandbox: unpacking $spec"
		mkdir -p "$root${dest%/*}"
		tar -xzf "$FETCHED" -O "$member" >"$root$dest"
		chmod 0755 "$root$dest" # the sandbox-agent tarball ships its binary 0644
		files+=(".$dest")
	done <<<"$entries"
	customize_runtimes_overlay "$root"
	install -m 0755 /bin/busybox "$root/usr/local/bin/busybox"
	ln -s busybox "$root/usr/local/bin/nc"
	files+=(./usr/local/bin/busybox ./usr/local/bin/nc)

	# Binaries root-owned (the agent cannot replace them), agent's home agent's.
	# Only the listed paths go in: no entry for /usr/local/bin or /home/agent,
	# whose existing owner and mode must stay as the base image has them.
	local tar_opts=(--sort=name --mtime=@0 --numeric-owner --format=gnu)
	tar -C "$root" "${tar_opts[@]}" --owner=0 --group=0 -cf "$ctx/overlay.tar" "${files[@]}"
	tar -C "$root" "${tar_opts[@]}" --owner=1000 --group=1000 -rf "$ctx/overlay.tar" \
		./home/agent/.local ./home/agent/.config ./home/agent/.cache ./home/agent/.claude
	rm -rf "$root"

	cat >"$ctx/Dockerfile" <<-EOF
		FROM $BASE_IMAGE
		ADD overlay.tar /
	EOF

	step "sandbox: docker build (recipe ${recipe:0:12})"
	old=$(image_id "$FULL_IMAGE")
	local env=()
	docker buildx version >/dev/null 2>&1 || env=(DOCKER_BUILDKIT=0)
	run_logged sandbox-build env "${env[@]}" docker build \
		--label "$RECIPE_LABEL=$recipe" --tag "$FULL_IMAGE" "$ctx"

	# A broken binary (wrong libc, truncated) must fail the build, not the
	# first chat turn. Runs offline, as agent, like a sandbox.
	step "sandbox: smoke test (each runtime prints its version)"
	if ! docker run --rm --network none "$FULL_IMAGE" sh -ec '
		opencode --version; sandbox-agent --version; claude --version; nc --help 2>&1 | grep -q BusyBox
		test -x "$HOME/.local/share/sandbox-agent/bin/agent_processes/opencode-acp"' \
		>"$LOG_DIR/sandbox-smoke.log" 2>&1; then
		docker rmi "$FULL_IMAGE" >/dev/null 2>&1 || true
		die "the built image failed its smoke test, removed it: $(tail -n 1 "$LOG_DIR/sandbox-smoke.log") (full log: $LOG_DIR/sandbox-smoke.log)"
	fi
	drop_old_image "$old" "$FULL_IMAGE"
	report "$FULL_IMAGE" "$start"
}
