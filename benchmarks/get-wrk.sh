#!/usr/bin/env bash
# wrk (the HTTP load generator of benchmarks/webapp.py) from Debian, with its
# LuaJIT library, into a cache folder: $SERVERS_CACHE_DIR/wrk (default
# <repo root>/.cache/servers/wrk). Prints the path of a `wrk` wrapper that sets
# LD_LIBRARY_PATH. Through a *private* apt configuration, as
# scripts/get-servers.sh does: the system's apt sources, lists and dpkg
# database are never touched. Suite: this machine's Debian release.
#
# Exit status: non-zero (with the reason on stderr) when wrk could not be
# installed; webapp.py then says so and skips what needs it, except under CI.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SERVERS_CACHE_DIR:-$REPO_ROOT/.cache/servers}"
DIR="$CACHE/wrk"
WRAPPER="$DIR/wrk"
if [[ -x "$WRAPPER" ]] && { "$WRAPPER" -v 2>&1 || true; } | grep -q '^wrk'; then
    echo "$WRAPPER"
    exit 0
fi
for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || { echo "get-wrk: $tool not found" >&2; exit 1; }
done
# shellcheck source=../scripts/lib/debian-mirror.sh
source "$REPO_ROOT/scripts/lib/debian-mirror.sh"
MIRROR="$(detect_mirror)"
SUITE="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
APT="$DIR/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/debs" "$DIR/root"
signed=""
[[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
    signed="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
echo "deb ${signed}${MIRROR} ${SUITE} main" > "$APT/sources.list"
: > "$APT/status"
cat > "$APT/apt.conf" <<CONF
Dir::Etc::SourceList "$APT/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Dir::State::Lists "$APT/lists";
Dir::State::status "$APT/status";
Dir::Cache "$APT/cache";
Dir::Cache::archives "$APT/cache/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Sandbox::User "root";
Acquire::Languages "none";
CONF
log="$DIR/get-wrk.log"
apt-get -c "$APT/apt.conf" -qq update >"$log" 2>&1 ||
    { echo "get-wrk: apt-get update ($SUITE, $MIRROR) failed: see $log" >&2; exit 1; }
# wrk needs LuaJIT (libluajit2-5.1-2 or libluajit-5.1-2) and libssl3, which Debian's
# Python images have; only the first two are fetched.
lua="$(apt-cache -c "$APT/apt.conf" show libluajit2-5.1-2 >/dev/null 2>&1 && echo libluajit2-5.1-2 || echo libluajit-5.1-2)"
(cd "$APT/debs" && rm -f ./*.deb && apt-get -c "$APT/apt.conf" -qq download wrk "$lua" "${lua/-2/-common}") >>"$log" 2>&1 ||
    (cd "$APT/debs" && apt-get -c "$APT/apt.conf" -qq download wrk "$lua") >>"$log" 2>&1 ||
    { echo "get-wrk: apt-get download wrk $lua failed: see $log" >&2; exit 1; }
for deb in "$APT/debs"/*.deb; do dpkg-deb -x "$deb" "$DIR/root"; done
libdir="$(dirname "$(find "$DIR/root" -name 'libluajit*.so*' | head -n 1)")"
cat > "$WRAPPER" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$DIR/root/usr/bin/wrk" "\$@"
WRAP
chmod +x "$WRAPPER"
{ "$WRAPPER" -v 2>&1 || true; } | grep -q '^wrk' || { echo "get-wrk: $WRAPPER does not run" >&2; exit 1; }
echo "$WRAPPER"
