#!/usr/bin/env bash
# Valgrind (instructions.py's counter) from Debian into $SERVERS_CACHE_DIR/valgrind (default
# <repo>/.cache/servers/valgrind) through a *private* apt configuration, as get-servers.sh does;
# prints the path of a wrapper that sets VALGRIND_LIB. Non-zero, with the reason on stderr,
# when it cannot: instructions.py then says so, and the smoke run fails under CI only.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${SERVERS_CACHE_DIR:-$REPO_ROOT/.cache/servers}/valgrind"
WRAPPER="$DIR/valgrind"
if [[ -x "$WRAPPER" ]] && "$WRAPPER" --version 2>/dev/null | grep -q '^valgrind'; then
    echo "$WRAPPER"
    exit 0
fi
for t in apt-get dpkg-deb; do command -v "$t" >/dev/null || { echo "get-valgrind: no $t" >&2; exit 1; }; done
# shellcheck source=../scripts/lib/debian-mirror.sh
source "$REPO_ROOT/scripts/lib/debian-mirror.sh"
MIRROR="$(detect_mirror)"
# This machine's Debian release; elsewhere (Ubuntu's CI runners) bookworm's valgrind,
# which needs only a libc of 2.34 or later.
SUITE="$(. /etc/os-release && { [[ "${ID:-}" == debian ]] && echo "${VERSION_CODENAME:-bookworm}" || echo bookworm; })"
APT="$DIR/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/debs" "$DIR/root"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""; [[ -f $keyring ]] && signed="[signed-by=$keyring] "
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
log="$DIR/get-valgrind.log"
apt-get -c "$APT/apt.conf" -qq update >"$log" 2>&1 ||
    { echo "get-valgrind: apt-get update ($SUITE, $MIRROR) failed: see $log" >&2; exit 1; }
# Cachegrind needs neither the debug libc (libc6-dbg: memcheck's) nor anything else.
(cd "$APT/debs" && rm -f ./*.deb && apt-get -c "$APT/apt.conf" -qq download valgrind) >>"$log" 2>&1 ||
    { echo "get-valgrind: apt-get download valgrind failed: see $log" >&2; exit 1; }
for deb in "$APT/debs"/*.deb; do dpkg-deb -x "$deb" "$DIR/root"; done
printf '#!/bin/sh\nVALGRIND_LIB="%s" exec "%s" "$@"\n' "$DIR/root/usr/libexec/valgrind" \
    "$DIR/root/usr/bin/valgrind.bin" > "$WRAPPER" && chmod +x "$WRAPPER"
"$WRAPPER" --version 2>/dev/null | grep -q '^valgrind' || { echo "get-valgrind: $WRAPPER does not run" >&2; exit 1; }
echo "$WRAPPER"
