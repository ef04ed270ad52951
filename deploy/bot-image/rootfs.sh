#!/usr/bin/env bash
# Writes the bot image's files other than the binaries into the directory $1:
#   etc/passwd, etc/group   user and group threadbox (65532, distroless's "nonroot" id), so the
#                           image runs unprivileged and user lookups work without a shell;
#   etc/nsswitch.conf       hosts from /etc/hosts first, then DNS (Go's resolver reads it);
#   etc/ssl/certs/…         the CA bundle for Slack, Discord and the cloud providers over TLS;
#   tmp (1777), var/lib/threadbox (the working directory: SQLite data, the runtime secret).
# Both deploy/Dockerfile (in its build stage) and the offline deploy/bot-image/build.sh use it, so
# the two images cannot drift apart. It sets no ownership: each caller gives var/lib/threadbox to
# 65532 its own way (chown in the Dockerfile; tar --owner offline, which needs no root).
set -Eeuo pipefail
root=${1:?usage: rootfs.sh DIR}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[[ -s $ca ]] || { echo "rootfs.sh: no CA bundle at $ca (apt-get install ca-certificates)" >&2; exit 1; }

install -d -m 0755 "$root/etc/ssl/certs" "$root/var/lib"
install -d -m 1777 "$root/tmp"
install -d -m 0700 "$root/var/lib/threadbox"
install -m 0644 "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
threadbox:x:65532:65532:threadbox:/var/lib/threadbox:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
threadbox:x:65532:
nogroup:x:65534:
GROUP
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
