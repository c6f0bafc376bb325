#!/usr/bin/env bash
# Install the Pythons of the version matrix that pyenv and the system lack into
# a cache folder, and print one line per interpreter: `VERSION PATH`.
#
#   * 3.14 and 3.15: Debian sid's binary packages (python3.14, python3.15 with
#     their -venv parts). They need a newer glibc than Debian 12's, so sid's own
#     loader and libraries are unpacked beside them and each interpreter's ELF
#     interpreter and rpath point there (patchelf, from sid too). The result runs
#     from this machine as an ordinary interpreter: `PATH -m venv DIR` gives a
#     DIR/bin/python that runs here, and child processes see no environment
#     change (no LD_LIBRARY_PATH).                  -> $CACHE/bin/python3.1N
#   * 3.13t: a free-threaded CPython (--disable-gil) built from the source of
#     Debian's python3.13 package (CPython's own tarball), with this machine's
#     compiler and headers.                           -> $CACHE/bin/python3.13t
#
# Packages come through a *private* apt configuration under $CACHE/apt (as in
# scripts/get-servers.sh); the system's apt sources, lists and dpkg database
# are never touched, and nothing needs root.
#
# Cache folder: $PYTHONS_CACHE_DIR, default <repo root>/.cache/pythons.
#
# Usage: scripts/get-pythons.sh [--refresh] [VERSION...]
#   VERSION     3.14, 3.15 or 3.13t (default: all three; also $PYTHONS_WANTED)
#   --refresh   (or GET_PYTHONS_REFRESH=1) ask the archive whether sid's
#               packages changed and reinstall if so. Without it, a cached
#               interpreter that runs is reused without any network access.
#
# Needs apt-get, dpkg-deb, curl and the Debian archive (about 60 MB of
# downloads), and for 3.13t a C compiler, make and the headers of OpenSSL,
# libffi, zlib, bz2, lzma, sqlite3, readline and uuid (about 10 minutes on 2
# cores). A step that fails is reported on stderr and its interpreter is left
# out (exit 0), except under CI=true, where it fails the script.
#
# Other environment knobs:
#   DEBIAN_MIRROR   mirror URI to use instead of the one configured for apt
#   MAKE_JOBS       parallel jobs of the 3.13t build (default: nproc)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${PYTHONS_CACHE_DIR:-$REPO_ROOT/.cache/pythons}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
LOGS="$CACHE/logs"
APT_ROOT="$CACHE/apt"
SID="$CACHE/sid"
SID_STAMP="$CACHE/sid.stamp"
FT="$CACHE/3.13t"
FT_STAMP="$CACHE/3.13t.stamp"
# Bump when a recipe below changes in a way that needs a reinstall.
SID_RECIPE=4
FT_RECIPE=1

REFRESH="${GET_PYTHONS_REFRESH:-0}"
WANTED=()
for arg in "$@"; do
    case "$arg" in
        --refresh) REFRESH=1 ;;
        3.14|3.15|3.13t) WANTED+=("$arg") ;;
        -h|--help) sed -n '2,36p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "[get-pythons] unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
done
if [[ ${#WANTED[@]} -eq 0 ]]; then
    read -r -a WANTED <<<"${PYTHONS_WANTED:-3.14 3.15 3.13t}"
fi
wanted() { [[ " ${WANTED[*]} " == *" $1 "* ]]; }

mkdir -p "$LOGS" "$APT_ROOT"

# Progress goes to stderr: stdout is only the `VERSION PATH` lines.
log() { echo "[get-pythons] $*" >&2; }
now() { date +%s; }

FAILED=0
fail() {  # fail STEP MESSAGE [LOGFILE]  (returns 1)
    echo "[get-pythons] ERROR: $1 failed: $2" >&2
    if [[ -n "${3:-}" && -s "$3" ]]; then
        echo "[get-pythons] ---- last 30 lines of $3 ----" >&2
        tail -n 30 "$3" >&2
        echo "[get-pythons] ----" >&2
    fi
    FAILED=1
    return 1
}

# Serialise concurrent runs (e.g. make and nox at once).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.lock"
    flock 9
fi

# --------------------------------------------------------------------------
# Private apt configuration (the same as scripts/get-servers.sh's)
# --------------------------------------------------------------------------
# detect_mirror: the Debian mirror this machine uses (shared with get-servers.sh).
# shellcheck source=lib/debian-mirror.sh
source "$REPO_ROOT/scripts/lib/debian-mirror.sh"

setup_apt() {  # setup_apt SUITE -> prints the apt.conf path
    local suite="$1" dir="$APT_ROOT/$1" signed=""
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/etc"
    [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
        signed="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    # deb-src too: the 3.13t build takes the source of python3.13.
    printf 'deb %s%s %s main\ndeb-src %s%s %s main\n' "$signed" "$MIRROR" "$suite" \
        "$signed" "$MIRROR" "$suite" > "$dir/etc/sources.list.new"
    if ! cmp -s "$dir/etc/sources.list.new" "$dir/etc/sources.list" 2>/dev/null; then
        mv "$dir/etc/sources.list.new" "$dir/etc/sources.list"
        rm -f "$dir/lists/"*_Packages* "$dir/lists/"*Release*
    else
        rm -f "$dir/etc/sources.list.new"
    fi
    : > "$dir/status"  # nothing is installed: apt resolves the whole closure
    cat > "$dir/apt.conf" <<EOF
// Private apt configuration written by scripts/get-pythons.sh ($suite).
Dir::Etc::SourceList "$dir/etc/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Dir::State::Lists "$dir/lists";
Dir::State::status "$dir/status";
Dir::State::extended_states "$dir/extended_states";
Dir::Cache "$dir/cache";
Dir::Cache::archives "$dir/cache/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Debug::NoLocking "true";
APT::Sandbox::User "root";
APT::Install-Recommends "false";
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

pkg_versions() {  # Package=Version lines (sorted) of the given packages
    local conf="$1"; shift
    apt-cache -c "$conf" show --no-all-versions "$@" |
        awk '/^Package:/ { p = $2 } /^Version:/ { print p "=" $2 }' | sort -u
}

SID_CONF=""
sid_apt() {  # the sid package lists, fetched once per run
    [[ -n "$SID_CONF" ]] && return 0
    local t0
    t0="$(now)"
    MIRROR="$(detect_mirror)"
    SID_CONF="$(setup_apt sid)" || { fail "apt setup (sid)" "cannot write under $APT_ROOT"; return 1; }
    log "sid: apt-get update (private apt, $MIRROR)"
    apt-get -c "$SID_CONF" -qq update --error-on=any >>"$LOGS/apt.log" 2>&1 ||
        { SID_CONF=""; fail "apt-get update (sid)" "could not fetch sid's package lists" "$LOGS/apt.log"; return 1; }
    log "sid: package lists in $(( $(now) - t0 )) s"
}

# --------------------------------------------------------------------------
# 1. 3.14 and 3.15: sid's binaries beside sid's loader and libraries
# --------------------------------------------------------------------------
sid_python() { echo "$SID/usr/bin/python$1"; }

# The interpreter runs, finds its standard library, and makes a venv.
python_ok() {  # python_ok PATH
    [[ -x "$1" ]] && "$1" -c 'import ssl, ctypes, zlib, venv, ensurepip' >/dev/null 2>&1
}

# Both, whichever is wanted: the root is replaced as a whole.
sid_ok() {
    local v
    for v in 3.14 3.15; do
        python_ok "$(sid_python "$v")" || return 1
    done
}

install_sid() {
    local t0 want debs deb loader libdirs rpath v py ver sysconfigdata wheels
    local -a pkgs
    : > "$LOGS/sid.log"
    # -dev: the headers, for the extensions that pip builds from source.
    for v in 3.14 3.15; do pkgs+=("python$v" "python$v-venv" "libpython$v-dev"); done
    pkgs+=(patchelf)
    sid_apt || return 1
    want="$(printf 'recipe=%s\n' "$SID_RECIPE"; pkg_versions "$SID_CONF" "${pkgs[@]}" 2>>"$LOGS/sid.log")" ||
        { fail "resolve (sid)" "${pkgs[*]} not all in sid" "$LOGS/sid.log"; return 1; }
    if sid_ok && [[ "$(cat "$SID_STAMP" 2>/dev/null)" == "$want" ]]; then
        log "sid: up to date"
        return 0
    fi
    t0="$(now)"
    debs="$APT_ROOT/sid/cache/archives"
    rm -f "$debs"/*.deb
    log "sid: apt-get download of ${pkgs[*]} and their dependencies"
    apt-get -c "$SID_CONF" -qq -y -d --no-install-recommends install "${pkgs[@]}" >>"$LOGS/sid.log" 2>&1 ||
        { fail "apt-get install -d (sid)" "could not download ${pkgs[*]}" "$LOGS/sid.log"; return 1; }
    log "sid: $(ls "$debs"/*.deb | wc -l) packages, $(du -sm "$debs" | cut -f1) MB in $(( $(now) - t0 )) s"
    t0="$(now)"
    rm -rf "$SID.new" && mkdir -p "$SID.new"
    for deb in "$debs"/*.deb; do
        dpkg-deb -x "$deb" "$SID.new" 2>>"$LOGS/sid.log" ||
            { fail "extract (sid)" "dpkg-deb -x $(basename "$deb")" "$LOGS/sid.log"; return 1; }
    done
    rm -f "$debs"/*.deb
    # What no interpreter here reads (a smaller cache for CI to keep).
    rm -rf "$SID.new/usr/share/doc" "$SID.new/usr/share/man" "$SID.new/usr/share/locale"
    find "$SID.new" -name '*.a' -type f -delete
    # The root moves to $SID below: every path written into it names $SID.
    loader="$(cd "$SID.new" && compgen -G 'usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.*' | head -n 1 || true)"
    [[ -n "$loader" ]] || { fail "extract (sid)" "no usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.* in sid's libc6"; return 1; }
    libdirs=(usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib)
    rpath="$(for d in "${libdirs[@]}"; do [[ -d "$SID.new/$d" ]] && printf '%s:' "$SID/$d"; done)"
    rpath="${rpath%:}"
    patchelf_() {  # sid's patchelf, run by sid's loader
        "$SID.new/$loader" --library-path "$SID.new/usr/lib/x86_64-linux-gnu" "$SID.new/usr/bin/patchelf" "$@"
    }
    for v in 3.14 3.15; do
        py="$SID.new/usr/bin/python$v"
        [[ -f "$py" ]] || { fail "extract (sid)" "no usr/bin/python$v in python$v-minimal"; return 1; }
        # DT_RPATH (not RUNPATH): it also serves the libraries that the
        # extension modules of lib-dynload load (libssl, libffi, ...).
        # Two calls, rpath first: patchelf 0.18 making both changes at once
        # (in either order in one call, or interpreter first) lays out this
        # non-PIE binary so that it segfaults at start.
        { patchelf_ --force-rpath --set-rpath "$rpath" "$py" &&
            patchelf_ --set-interpreter "$SID/$loader" "$py"; } >>"$LOGS/sid.log" 2>&1 ||
            { fail "patchelf (sid)" "python$v" "$LOGS/sid.log"; return 1; }
        # Debian's pyconfig.h includes <x86_64-linux-gnu/python3.N/pyconfig.h>
        # from the system's include path, which is not this root: the real one
        # takes its place, for the extensions that pip builds from source.
        if [[ -f "$SID.new/usr/include/x86_64-linux-gnu/python$v/pyconfig.h" ]]; then
            cp -f "$SID.new/usr/include/x86_64-linux-gnu/python$v/pyconfig.h" "$SID.new/usr/include/python$v/pyconfig.h"
        fi
        # ensurepip takes pip's wheel from WHEEL_PKG_DIR, an absolute
        # /usr/share/python-wheels: the one of this root, not the machine's.
        wheels="$SID/usr/share/python-wheels"
        for sysconfigdata in "$SID.new/usr/lib/python$v"/_sysconfig*_*; do
            sed -i "s|/usr/share/python-wheels/|$wheels/|g" "$sysconfigdata"
        done
    done
    rm -rf "$SID.old"
    [[ -d "$SID" ]] && mv "$SID" "$SID.old"
    mv "$SID.new" "$SID"
    rm -rf "$SID.old"
    for v in 3.14 3.15; do
        py="$(sid_python "$v")"
        ver="$("$py" -c 'import platform; print(platform.python_version())' 2>>"$LOGS/sid.log")" ||
            { fail "check (sid)" "python$v does not run" "$LOGS/sid.log"; return 1; }
        python_ok "$py" || { fail "check (sid)" "python$v lacks ssl, ctypes, zlib or venv" "$LOGS/sid.log"; return 1; }
        log "sid: python$v $ver ready"
    done
    echo "$want" > "$SID_STAMP"
    log "sid: extracted and patched in $(( $(now) - t0 )) s"
}

if wanted 3.14 || wanted 3.15; then
    if [[ "$REFRESH" != 1 ]] && sid_ok && [[ "$(head -n 1 "$SID_STAMP" 2>/dev/null)" == "recipe=$SID_RECIPE" ]]; then
        log "sid: cached ($(grep -E '^python3\.1[0-9]=' "$SID_STAMP" | paste -sd ' ' -))"
    else
        ( install_sid ) || FAILED=1
    fi
fi

# --------------------------------------------------------------------------
# 2. 3.13t: free-threaded CPython built from Debian's python3.13 source
# --------------------------------------------------------------------------
FT_PY="$FT/bin/python3.13t"

ft_ok() {
    python_ok "$FT_PY" && [[ "$("$FT_PY" -c 'import sys; print(sys._is_gil_enabled())' 2>/dev/null)" == False ]]
}

build_ft() {
    local t0 t1 versions ver upstream url src build jobs tool
    : > "$LOGS/3.13t.log"
    for tool in cc make curl tar; do
        command -v "$tool" >/dev/null 2>&1 || { fail "3.13t" "$tool not found"; return 1; }
    done
    sid_apt || return 1
    # sid's Sources index may list versions whose files are gone (404): the
    # newest whose CPython tarball downloads wins.
    versions="$(apt-cache -c "$SID_CONF" showsrc python3.13 2>>"$LOGS/3.13t.log" |
        awk '/^Package:/ { p = $2 } /^Version:/ && p == "python3.13" { print $2 }' | sort -Vru)"
    [[ -n "$versions" ]] || { fail "resolve (3.13t)" "no python3.13 source package in sid" "$LOGS/3.13t.log"; return 1; }
    src="$CACHE/build-3.13t"
    rm -rf "$src" && mkdir -p "$src"
    t0="$(now)"
    upstream=""
    for ver in $versions; do
        ver="${ver#*:}"
        ver="${ver%-*}"
        if ft_ok && [[ "$(cat "$FT_STAMP" 2>/dev/null)" == "recipe=$FT_RECIPE source=$ver" ]]; then
            log "3.13t: up to date ($ver)"
            rm -rf "$src"
            return 0
        fi
        url="$MIRROR/pool/main/p/python3.13/python3.13_$ver.orig.tar.xz"
        log "3.13t: downloading $url"
        if curl -fsSL --retry 3 -o "$src/source.tar.xz" "$url" 2>>"$LOGS/3.13t.log"; then
            upstream="$ver"
            break
        fi
        log "3.13t: the source of $ver is not downloadable; trying the next older one"
    done
    [[ -n "$upstream" ]] ||
        { fail "download (3.13t)" "no python3.13 tarball of $(echo $versions) downloads" "$LOGS/3.13t.log"; return 1; }
    tar -xJf "$src/source.tar.xz" -C "$src" --strip-components=1 2>>"$LOGS/3.13t.log" ||
        { fail "extract (3.13t)" "python3.13_$upstream.orig.tar.xz" "$LOGS/3.13t.log"; return 1; }
    rm -f "$src/source.tar.xz"
    log "3.13t: source $upstream in $(( $(now) - t0 )) s"
    jobs="${MAKE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
    t0="$(now)"
    log "3.13t: configure --disable-gil (about 1 minute)"
    build="$src"
    (cd "$build" && ./configure --prefix="$FT" --disable-gil --with-ensurepip=no --without-doc-strings \
        --disable-test-modules) >>"$LOGS/3.13t.log" 2>&1 ||
        { fail "configure (3.13t)" "see $LOGS/3.13t.log" "$LOGS/3.13t.log"; return 1; }
    t1="$(now)"
    log "3.13t: configured in $(( t1 - t0 )) s; make -j$jobs (about 7 minutes on 2 cores)"
    (cd "$build" && make -j"$jobs") >>"$LOGS/3.13t.log" 2>&1 ||
        { fail "make (3.13t)" "see $LOGS/3.13t.log" "$LOGS/3.13t.log"; return 1; }
    t0="$(now)"
    log "3.13t: built in $(( t0 - t1 )) s; make install"
    rm -rf "$FT"
    (cd "$build" && make install) >>"$LOGS/3.13t.log" 2>&1 ||
        { fail "make install (3.13t)" "see $LOGS/3.13t.log" "$LOGS/3.13t.log"; return 1; }
    t1="$(now)"
    log "3.13t: installed in $(( t1 - t0 )) s"
    # CPython's own test suite and static library: scripts/compat.py takes Lib/test from
    # the source tarball instead, and tests/test_compat.py skips its regrtest run here.
    rm -rf "$FT/lib/python3.13t/test" "$FT/lib/python3.13t/idlelib/idle_test"
    find "$FT" -name 'libpython*.a' -type f -delete
    ft_ok || { fail "check (3.13t)" "$FT_PY does not run free-threaded with ssl, ctypes, zlib and venv" "$LOGS/3.13t.log"; return 1; }
    echo "recipe=$FT_RECIPE source=$upstream" > "$FT_STAMP"
    rm -rf "$src"
    log "3.13t: python3.13t $("$FT_PY" -c 'import platform; print(platform.python_version())') ready"
}

if wanted 3.13t; then
    if [[ "$REFRESH" != 1 ]] && ft_ok && [[ "$(cut -d ' ' -f 1 "$FT_STAMP" 2>/dev/null)" == "recipe=$FT_RECIPE" ]]; then
        log "3.13t: cached ($(cat "$FT_STAMP"))"
    else
        ( build_ft ) || FAILED=1
    fi
fi

# --------------------------------------------------------------------------
# The interpreters: one `VERSION PATH` line each
# --------------------------------------------------------------------------
# $CACHE/bin holds only the interpreters (sid's usr/bin has other tools), so
# that it can go on PATH: noxfile.py puts it there.
mkdir -p "$CACHE/bin"
link() {  # link NAME TARGET VERSION
    ln -sfn "$2" "$CACHE/bin/$1.new" && mv -fT "$CACHE/bin/$1.new" "$CACHE/bin/$1"
    echo "$3 $CACHE/bin/$1"
}
for v in 3.14 3.15; do
    if wanted "$v" && python_ok "$(sid_python "$v")"; then
        link "python$v" "$(sid_python "$v")" "$v"
    fi
done
if wanted 3.13t && ft_ok; then
    link python3.13t "$FT_PY" 3.13t
fi
if [[ "$FAILED" == 1 && "${CI:-}" == true ]]; then
    exit 1
fi
exit 0
