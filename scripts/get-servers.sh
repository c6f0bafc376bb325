#!/usr/bin/env bash
# Install the real OTLP servers used by the end-to-end tests into a cache folder.
#
#   * VictoriaMetrics (OTLP/HTTP metrics backend), from Debian trixie's
#     `victoria-metrics` package  -> $CACHE/bin/victoria-metrics
#   * A minimal OpenTelemetry Collector, built offline from Debian sid's Go
#     source packages (golang-opentelemetry-collector-dev + its golang-*
#     dependency closure + a golang-1.N-go toolchain) -> $CACHE/bin/otelcol
#     (source: scripts/otelcol/*.go)
#   * Prometheus (a backend that stores exemplars), from Debian trixie's
#     `prometheus` package -> $CACHE/bin/prometheus
#
# All come through a *private* apt configuration kept under $CACHE/apt; the
# system's apt sources, lists and dpkg database are never touched.
#
# Cache folder: $SERVERS_CACHE_DIR, default <repo root>/.cache/servers.
#
# Usage: scripts/get-servers.sh [--refresh]
#   --refresh   (or GET_SERVERS_REFRESH=1) ask the Debian archive whether the
#               package versions changed and reinstall/rebuild if they did.
#               Without it, a server that is already in the cache is reused
#               without any network access.
#
# Servers of your own: VICTORIA_METRICS_BIN, OTELCOL_BIN and PROMETHEUS_BIN (paths
# to the binaries) skip the install of that server; the tests then use them.
#
# Needs apt-get, dpkg-deb and the Debian archive (about 250 MB of downloads and
# a 1-2 minute Go build the first time). Without them, the servers are reported
# unavailable and the end-to-end tests skip, except under CI=true, where a missing
# VictoriaMetrics makes this script fail.
#
# Other environment knobs:
#   DEBIAN_MIRROR        mirror URI to use instead of the one configured for apt
#   OTELCOL_RETRY_AFTER  seconds during which a failed collector build is not
#                        retried (default 21600 = 6 h; 0 = always retry)
#   OTELCOL_KEEP_BUILD=1 keep the downloaded .debs / extracted tree (~2.3 GB)
#                        in $CACHE/otelcol-build after a build (default: delete)
#
# Exit status: non-zero if VictoriaMetrics or Prometheus could not be installed
# under CI=true (outside CI: a banner, exit 0, and the end-to-end tests that need
# it skip). A failed collector build is NOT fatal: the reason goes to
# $CACHE/otelcol.unavailable, a banner is printed, and the script exits 0 (tests
# then skip the collector).
set -euo pipefail

# Binaries the user gives (read before this script's own OTELCOL_BIN is set).
GIVEN_VICTORIA_METRICS_BIN="${VICTORIA_METRICS_BIN:-}"
GIVEN_OTELCOL_BIN="${OTELCOL_BIN:-}"
GIVEN_PROMETHEUS_BIN="${PROMETHEUS_BIN:-}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SERVERS_CACHE_DIR:-$REPO_ROOT/.cache/servers}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
BIN="$CACHE/bin"
LOGS="$CACHE/logs"
APT_ROOT="$CACHE/apt"
OTELCOL_SRC_DIR="$REPO_ROOT/scripts/otelcol"
OTELCOL_SRC="$OTELCOL_SRC_DIR/main.go"
OTELCOL_BUILD="$CACHE/otelcol-build"
OTELCOL_STAMP="$CACHE/otelcol.stamp"
OTELCOL_UNAVAILABLE="$CACHE/otelcol.unavailable"
VM_STAMP="$CACHE/victoria-metrics.stamp"
PROM_STAMP="$CACHE/prometheus.stamp"
COLLECTOR_PKG="golang-opentelemetry-collector-dev"
# Bump when the build recipe below changes in a way that needs a rebuild.
BUILD_RECIPE=1

REFRESH="${GET_SERVERS_REFRESH:-0}"
for arg in "$@"; do
    case "$arg" in
        --refresh) REFRESH=1 ;;
        -h|--help) sed -n '2,45p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "[get-servers] unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
done

mkdir -p "$BIN" "$LOGS" "$APT_ROOT"

log() { echo "[get-servers] $*"; }

die() {  # die STEP MESSAGE [LOGFILE]
    echo "[get-servers] ERROR: $1 failed: $2" >&2
    if [[ -n "${3:-}" && -s "$3" ]]; then
        echo "[get-servers] ---- last 40 lines of $3 ----" >&2
        tail -n 40 "$3" >&2
        echo "[get-servers] ----" >&2
    fi
    exit 1
}

# Serialise concurrent runs (e.g. several test workers calling the script).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.lock"
    flock 9
fi

# --------------------------------------------------------------------------
# Private apt configuration
# --------------------------------------------------------------------------

# detect_mirror: the Debian mirror this machine uses (shared with get-pythons.sh).
# shellcheck source=lib/debian-mirror.sh
source "$REPO_ROOT/scripts/lib/debian-mirror.sh"

# setup_apt SUITE -> prints the apt.conf path; creates dirs and config.
setup_apt() {
    local suite="$1" dir="$APT_ROOT/$1" signed=""
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/etc"
    [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
        signed="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    echo "deb ${signed}${MIRROR} ${suite} main" > "$dir/etc/sources.list.new"
    # A changed mirror/suite line means the old lists are for another source.
    if ! cmp -s "$dir/etc/sources.list.new" "$dir/etc/sources.list" 2>/dev/null; then
        mv "$dir/etc/sources.list.new" "$dir/etc/sources.list"
        rm -f "$dir/lists/"*_Packages* "$dir/lists/"*Release* "$dir/cache/"*.bin
    else
        rm -f "$dir/etc/sources.list.new"
    fi
    [[ -f "$dir/status" ]] || : > "$dir/status"
    cat > "$dir/apt.conf" <<EOF
// Private apt configuration written by scripts/get-servers.sh ($suite).
Dir::Etc::SourceList "$dir/etc/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Dir::State::Lists "$dir/lists";
Dir::State::status "$dir/status";
Dir::State::extended_states "$dir/extended_states";
Dir::Cache "$dir/cache";
Dir::Cache::archives "$dir/cache/archives";
// In-memory package caches: ~1 s per apt-cache call instead of ~90 MB on disk.
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Sandbox::User "root";
Acquire::Languages "none";
#clear APT::Update::Post-Invoke-Success;
#clear APT::Update::Post-Invoke;
#clear APT::Update::Pre-Invoke;
#clear DPkg::Post-Invoke;
#clear DPkg::Pre-Invoke;
#clear DPkg::Pre-Install-Pkgs;
EOF
    echo "$dir/apt.conf"
}

# Package=Version lines (sorted) for the given packages, from a private apt.
pkg_versions() {
    local conf="$1"; shift
    apt-cache -c "$conf" show --no-all-versions "$@" |
        awk '/^Package:/ { p = $2 } /^Version:/ { print p "=" $2 }' | sort -u
}

MIRROR="$(detect_mirror)"

# --------------------------------------------------------------------------
# 1. VictoriaMetrics (fatal on failure) and 2. Prometheus, from trixie
# --------------------------------------------------------------------------
VM_BIN="$BIN/victoria-metrics"
VM_LOG="$LOGS/victoria-metrics.log"
PROM_BIN="$BIN/prometheus"
PROM_LOG="$LOGS/prometheus.log"

# runs BINARY FLAG: the binary answers FLAG (its version) with exit status 0.
# NB: Debian's VictoriaMetrics prints an empty version string, but exits 0.
runs() { [[ -x "$1" ]] && "$1" "$2" >/dev/null 2>&1; }
vm_ok() { runs "$VM_BIN" -version; }
prom_ok() { runs "$PROM_BIN" --version; }

# A binary given by the user: VICTORIA_METRICS_BIN / OTELCOL_BIN / PROMETHEUS_BIN.
given_bin() {  # given_bin VAR  -> true when the user's VAR names a binary to use
    local given="GIVEN_$1"
    local path="${!given}"
    [[ -n "$path" ]] || return 1
    if [[ -x "$path" ]]; then
        log "$1=$path: using it, not installing"
    else
        log "WARNING: $1=$path is not executable; the tests will say so"
    fi
}

needs_debian_tools() {  # needs_debian_tools STEP -> dies when apt-get or dpkg-deb is missing
    local tool
    for tool in apt-get dpkg-deb; do
        command -v "$tool" >/dev/null 2>&1 ||
            die "$1" "$tool not found: the servers come from Debian packages (set VICTORIA_METRICS_BIN, OTELCOL_BIN and PROMETHEUS_BIN to use your own)"
    done
}

# install_trixie PACKAGE DEST VERSION_FLAG STAMP LOG: ./usr/bin/PACKAGE of trixie's
# package PACKAGE, installed as DEST unless the stamp says it is that version already.
install_trixie() {
    local pkg="$1" dest="$2" flag="$3" stamp="$4" logfile="$5" conf debs deb want
    : > "$logfile"
    needs_debian_tools "$pkg"
    log "$pkg: apt-get update (private apt: trixie from $MIRROR)"
    conf="$(setup_apt trixie)" || die "$pkg: apt setup (trixie)" "cannot write the private apt config under $APT_ROOT"
    apt-get -c "$conf" -qq update --error-on=any >>"$logfile" 2>&1 ||
        die "$pkg: apt-get update (trixie, $MIRROR)" "could not fetch the trixie package lists" "$logfile"
    want="$(pkg_versions "$conf" "$pkg" 2>>"$logfile")" ||
        die "$pkg: resolve" "package $pkg not found in trixie" "$logfile"
    if [[ -n "$want" ]] && runs "$dest" "$flag" && [[ "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
        log "$pkg: up to date ($want)"
        return
    fi
    log "$pkg: apt-get download $pkg ($want)"
    debs="$APT_ROOT/trixie/debs-$pkg"
    { rm -rf "$debs" && mkdir -p "$debs"; } || die "$pkg: download" "cannot create $debs"
    (cd "$debs" && apt-get -c "$conf" -qq download "$pkg") >>"$logfile" 2>&1 ||
        die "$pkg: apt-get download" "could not download package $pkg from trixie" "$logfile"
    deb="$(compgen -G "$debs/${pkg}_*.deb" | head -n 1 || true)"
    [[ -n "$deb" ]] || die "$pkg: apt-get download" "no ${pkg}_*.deb in $debs" "$logfile"
    log "$pkg: extracting ./usr/bin/$pkg"
    dpkg-deb --fsys-tarfile "$deb" | tar -x -O "./usr/bin/$pkg" > "$dest.tmp" 2>>"$logfile" ||
        die "$pkg: extract" "could not extract ./usr/bin/$pkg from $(basename "$deb")" "$logfile"
    chmod 0755 "$dest.tmp" || die "$pkg: extract" "chmod $dest.tmp"
    "$dest.tmp" "$flag" >>"$logfile" 2>&1 ||
        die "$pkg: check" "the extracted binary does not run ('$pkg $flag')" "$logfile"
    mv -f "$dest.tmp" "$dest" || die "$pkg: install" "cannot move the binary to $dest"
    echo "$want" > "$stamp" || die "$pkg: install" "cannot write $stamp"
    rm -rf "$debs"
}

install_vm() { install_trixie victoria-metrics "$VM_BIN" -version "$VM_STAMP" "$VM_LOG"; }
install_prom() { install_trixie prometheus "$PROM_BIN" --version "$PROM_STAMP" "$PROM_LOG"; }

vm_unavailable() {  # outside CI the end-to-end tests skip; under CI=true this fails
    {
        echo
        echo "==== VICTORIAMETRICS UNAVAILABLE: the end-to-end tests will be skipped ===="
        echo "    (the reason is above; set VICTORIA_METRICS_BIN to use your own binary)"
        echo "===="
        echo
    } >&2
    if [[ "${CI:-}" == true ]]; then
        exit 1
    fi
    log "done without servers (cache: $CACHE)"
    exit 0
}

prom_unavailable() {  # outside CI the exemplar tests skip; under CI=true this fails
    {
        echo
        echo "==== PROMETHEUS UNAVAILABLE: the exemplar end-to-end tests will be skipped ===="
        echo "    (the reason is above; set PROMETHEUS_BIN to use your own binary)"
        echo "===="
        echo
    } >&2
    if [[ "${CI:-}" == true ]]; then
        exit 1
    fi
}

if given_bin VICTORIA_METRICS_BIN; then
    :
elif vm_ok && [[ "$REFRESH" != 1 ]]; then
    log "victoria-metrics: cached ($(cat "$VM_STAMP" 2>/dev/null || echo "version unknown"))"
elif vm_ok; then
    # --refresh with a working cached binary: a failed refresh is not fatal.
    ( install_vm ) || log "WARNING: victoria-metrics refresh failed; keeping the cached $VM_BIN"
else
    ( install_vm ) || vm_unavailable
    log "victoria-metrics: ready: $VM_BIN ($(cat "$VM_STAMP" 2>/dev/null))"
fi

# Prometheus stores exemplars (--enable-feature=exemplar-storage), which
# VictoriaMetrics does not. Debian's build has no OTLP receiver: the tests feed
# it through the collector's remotewrite exporter (scripts/otelcol/remotewrite.go).
if given_bin PROMETHEUS_BIN; then
    :
elif prom_ok && [[ "$REFRESH" != 1 ]]; then
    log "prometheus: cached ($(cat "$PROM_STAMP" 2>/dev/null || echo "version unknown"))"
elif prom_ok; then
    ( install_prom ) || log "WARNING: prometheus refresh failed; keeping the cached $PROM_BIN"
elif ( install_prom ); then
    log "prometheus: ready: $PROM_BIN ($(cat "$PROM_STAMP" 2>/dev/null))"
else
    prom_unavailable
fi

# --------------------------------------------------------------------------
# 3. OpenTelemetry Collector built from Debian sid Go sources (non-fatal)
# --------------------------------------------------------------------------
OTELCOL_BIN="$BIN/otelcol"
OTELCOL_LOG="$LOGS/otelcol-build.log"
OTEL_STEP=""
OTEL_REASON=""

# Every Go file of scripts/otelcol (main.go and its own components), in name order.
src_hash() { cat "$OTELCOL_SRC_DIR"/*.go | sha256sum | awk '{print $1}'; }

# Header of the stamp that does not depend on the archive (checked offline).
stamp_header() { printf 'recipe=%s\nsources-sha256=%s\n' "$BUILD_RECIPE" "$(src_hash)"; }

otelcol_ok() { [[ -x "$OTELCOL_BIN" ]] && "$OTELCOL_BIN" --version >/dev/null 2>&1; }

otel_fail() {  # otel_fail STEP REASON  (always returns 1)
    OTEL_STEP="$1"
    OTEL_REASON="$2"
    return 1
}

check_components() {  # check_components BINARY
    local out c
    out="$("$1" components)" || return 1
    for c in otlp batch debug otlp_grpc otlp_http remotewrite; do
        grep -qx -- " *- name: $c" <<<"$out" || { echo "missing component: $c"; return 1; }
    done
}

otel_run() {  # otel_run STEP REASON CMD...  (output appended to the build log)
    local step="$1" reason="$2"; shift 2
    {
        echo "+ [$step] $*"
    } >>"$OTELCOL_LOG"
    "$@" >>"$OTELCOL_LOG" 2>&1 || otel_fail "$step" "$reason"
}

# NB: called in an `if` context, so `set -e` does not apply here: every
# command that may fail is checked explicitly.
build_otelcol() {
    local conf names wanted toolchain versions stamp root goroot gopath gover colver n
    : > "$OTELCOL_LOG"

    [[ -f "$OTELCOL_SRC" ]] || { otel_fail "source" "missing $OTELCOL_SRC"; return 1; }
    command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 ||
        { otel_fail "tools" "apt-get or dpkg not found: the collector is built from Debian packages"; return 1; }

    log "otelcol: apt-get update (private apt: sid from $MIRROR)"
    conf="$(setup_apt sid)" || { otel_fail "apt setup (sid)" "could not write the private apt config"; return 1; }
    otel_run "apt-get update (sid)" "could not fetch the sid package lists from $MIRROR" \
        apt-get -c "$conf" -qq update --error-on=any || return 1

    log "otelcol: resolving the golang-* dependency closure of $COLLECTOR_PKG + golang-go"
    local pkg
    for pkg in "$COLLECTOR_PKG" golang-go; do
        if [[ -z "$(pkg_versions "$conf" "$pkg" 2>>"$OTELCOL_LOG")" ]]; then
            otel_fail "resolve (sid)" "package $pkg is not available in sid"
            return 1
        fi
    done
    names="$(apt-cache -c "$conf" depends --recurse --no-recommends --no-suggests \
                 --no-conflicts --no-breaks --no-replaces --no-enhances \
                 "$COLLECTOR_PKG" golang-go 2>>"$OTELCOL_LOG" | grep -v '^[[:space:]<]' | sort -u)" ||
        { otel_fail "resolve (sid)" "apt-cache depends --recurse $COLLECTOR_PKG golang-go failed"; return 1; }
    # The newest Go toolchain in the closure (golang-1.N-go + golang-1.N-src).
    toolchain="$(grep -E '^golang-1\.[0-9]+-go$' <<<"$names" | sort -V | tail -n 1 || true)"
    if [[ -z "$toolchain" ]]; then
        otel_fail "resolve (sid)" "no golang-1.N-go toolchain package in the dependency closure of golang-go"
        return 1
    fi
    wanted="$(grep -E '^golang-.*-dev$' <<<"$names" || true)"
    wanted="$(printf '%s\n%s\n%s\n' "$wanted" "$toolchain" "${toolchain%-go}-src" | grep -v '^$' | sort -u)"
    local -a pkgs
    mapfile -t pkgs <<<"$wanted"
    n="${#pkgs[@]}"
    versions="$(pkg_versions "$conf" "${pkgs[@]}" 2>>"$OTELCOL_LOG")" ||
        { otel_fail "resolve (sid)" "apt-cache show failed for the closure"; return 1; }
    colver="$(awk -F= -v p="$COLLECTOR_PKG" '$1 == p { print $2 }' <<<"$versions")"
    gover="$(awk -F= -v p="$toolchain" '$1 == p { print $2 }' <<<"$versions")"
    stamp="$(stamp_header; echo "$versions")"

    if otelcol_ok && [[ "$(cat "$OTELCOL_STAMP" 2>/dev/null)" == "$stamp" ]]; then
        log "otelcol: up to date ($COLLECTOR_PKG $colver, $toolchain $gover)"
        return 0
    fi

    log "otelcol: apt-get download $n packages ($COLLECTOR_PKG $colver, $toolchain $gover, ~250 MB)"
    rm -rf "$OTELCOL_BUILD"
    mkdir -p "$OTELCOL_BUILD/debs" "$OTELCOL_BUILD/root" "$OTELCOL_BUILD/gopath/src/otelcol-e2e"
    echo "+ [apt-get download (sid)] $n packages: ${pkgs[*]:0:3} ..." >>"$OTELCOL_LOG"
    (cd "$OTELCOL_BUILD/debs" && apt-get -c "$conf" -qq download "${pkgs[@]}") >>"$OTELCOL_LOG" 2>&1 || {
        local failed
        failed="$(grep -oE '(Failed to fetch|Unable to locate package|Can.t select candidate version from package|has no installation candidate)[^ ]* *[^ ]+' "$OTELCOL_LOG" | head -n 5 | tr '\n' ';')"
        otel_fail "apt-get download (sid)" "could not download the closure packages${failed:+: $failed}"
        return 1
    }

    log "otelcol: extracting $n packages (dpkg -x)"
    local deb
    for deb in "$OTELCOL_BUILD"/debs/*.deb; do
        dpkg -x "$deb" "$OTELCOL_BUILD/root" 2>>"$OTELCOL_LOG" ||
            { otel_fail "extract" "dpkg -x failed for package $(basename "$deb")"; return 1; }
    done
    root="$OTELCOL_BUILD/root"
    goroot="$(compgen -G "$root/usr/lib/go-1.*" | sort -V | tail -n 1 || true)"
    if [[ -z "$goroot" || ! -x "$goroot/bin/go" ]]; then
        otel_fail "extract" "no Go toolchain (usr/lib/go-1.*/bin/go) found after extracting $toolchain"
        return 1
    fi
    if [[ ! -d "$root/usr/share/gocode/src/go.opentelemetry.io/collector/otelcol" ]]; then
        otel_fail "extract" "$COLLECTOR_PKG did not provide go.opentelemetry.io/collector/otelcol"
        return 1
    fi

    log "otelcol: go build (GOPATH mode, offline, $("$goroot/bin/go" env GOVERSION 2>/dev/null || echo "$toolchain")) - about a minute"
    cp "$OTELCOL_SRC_DIR"/*.go "$OTELCOL_BUILD/gopath/src/otelcol-e2e/"
    gopath="$OTELCOL_BUILD/gopath:$root/usr/share/gocode"
    echo "+ [go build] GOROOT=$goroot GOPATH=$gopath GO111MODULE=off GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 go build" >>"$OTELCOL_LOG"
    (
        cd "$OTELCOL_BUILD/gopath/src/otelcol-e2e" &&
        env -i PATH="$goroot/bin:/usr/bin:/bin" HOME="$OTELCOL_BUILD" TMPDIR="${TMPDIR:-/tmp}" \
            GOROOT="$goroot" GOPATH="$gopath" GOCACHE="$OTELCOL_BUILD/gocache" \
            GO111MODULE=off GOPROXY=off GOTOOLCHAIN=local GOFLAGS= GOWORK=off GOENV=off \
            GOTELEMETRY=off CGO_ENABLED=0 \
            go build -trimpath -ldflags "-s -w -X main.version=${colver%-*}" -o "$OTELCOL_BIN.tmp" .
    ) >>"$OTELCOL_LOG" 2>&1 ||
        { otel_fail "go build" "compiling scripts/otelcol/*.go against $COLLECTOR_PKG $colver with $toolchain $gover failed"; return 1; }

    otel_run "check" "the built binary does not run ('otelcol --version')" "$OTELCOL_BIN.tmp" --version || return 1
    otel_run "check" "the built binary lacks a required component" \
        check_components "$OTELCOL_BIN.tmp" || return 1
    mv -f "$OTELCOL_BIN.tmp" "$OTELCOL_BIN" || { otel_fail "install" "could not move the binary to $OTELCOL_BIN"; return 1; }
    echo "$stamp" > "$OTELCOL_STAMP"
    if [[ "${OTELCOL_KEEP_BUILD:-0}" != 1 ]]; then
        rm -rf "$OTELCOL_BUILD"
    fi
    return 0
}

otel_banner() {  # print the contents of the unavailable marker prominently
    {
        echo
        echo "==== OTEL COLLECTOR UNAVAILABLE ===="
        sed 's/^/    /' "$OTELCOL_UNAVAILABLE"
        echo "==== (VictoriaMetrics is fine; collector tests will be skipped) ===="
        echo
    } >&2
}

marker_age() { echo $(( $(date +%s) - $(stat -c %Y "$OTELCOL_UNAVAILABLE") )); }

stamp_head_matches() {  # offline check: scripts/otelcol/*.go + recipe unchanged since the build
    [[ "$(head -n 2 "$OTELCOL_STAMP" 2>/dev/null)" == "$(stamp_header)" ]]
}

if given_bin OTELCOL_BIN; then
    :
elif [[ "$REFRESH" != 1 ]] && otelcol_ok && stamp_head_matches; then
    log "otelcol: cached ($("$OTELCOL_BIN" --version 2>/dev/null); $(grep -E "^($COLLECTOR_PKG|golang-1\.[0-9]+-go)=" "$OTELCOL_STAMP" | paste -sd " " -))"
    rm -f "$OTELCOL_UNAVAILABLE"
elif [[ "$REFRESH" != 1 && -f "$OTELCOL_UNAVAILABLE" ]] && ! otelcol_ok &&
     (( $(marker_age) < ${OTELCOL_RETRY_AFTER:-21600} )); then
    log "otelcol: previous build failed $(( $(marker_age) / 60 )) min ago; not retrying yet (use --refresh or OTELCOL_RETRY_AFTER=0)"
    otel_banner
else
    if build_otelcol; then
        rm -f "$OTELCOL_UNAVAILABLE"
        log "otelcol: ready: $OTELCOL_BIN ($("$OTELCOL_BIN" --version 2>/dev/null))"
    elif otelcol_ok && stamp_head_matches; then
        # Only a --refresh failed (e.g. network); the cached binary is still
        # current for scripts/otelcol/*.go, so keep using it.
        rm -f "$OTELCOL_BIN.tmp"
        [[ "${OTELCOL_KEEP_BUILD:-0}" == 1 ]] || rm -rf "$OTELCOL_BUILD"
        log "WARNING: otelcol refresh failed at step '$OTEL_STEP': $OTEL_REASON"
        log "WARNING: keeping the cached $OTELCOL_BIN (log: $OTELCOL_LOG)"
    else
        # No usable binary (or one built from older sources): unavailable.
        rm -f "$OTELCOL_BIN.tmp" "$OTELCOL_BIN" "$OTELCOL_STAMP"
        [[ "${OTELCOL_KEEP_BUILD:-0}" == 1 ]] || rm -rf "$OTELCOL_BUILD"
        {
            echo "step: $OTEL_STEP"
            echo "reason: $OTEL_REASON"
            echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
            echo "log: $OTELCOL_LOG"
            echo "---- last 40 lines of the build log ----"
            tail -n 40 "$OTELCOL_LOG" 2>/dev/null || true
        } > "$OTELCOL_UNAVAILABLE"
        log "otelcol: FAILED at step '$OTEL_STEP': $OTEL_REASON"
        otel_banner
    fi
fi

log "done (cache: $CACHE)"
