#!/usr/bin/env bash
# Make sure a headless Chromium is there for the docs render check
# (tests/test_docs_render.py): Debian's `chromium` package, installed with
# apt-get when it is missing (as root; about 100 MB of downloads the first time).
#
#   CHROMIUM_BIN   a browser to use instead; nothing is installed then.
#
# Exit status: 0 when a browser is there, or could not be installed outside CI
# (the docs render check then skips, loudly); non-zero under CI=true when none
# could be had.
set -euo pipefail

log() { echo "[get-browser] $*"; }

found() {
    if [[ -n "${CHROMIUM_BIN:-}" ]]; then
        command -v "$CHROMIUM_BIN" 2>/dev/null
        return
    fi
    command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null ||
        command -v google-chrome 2>/dev/null
}

version() { "$1" --version 2>/dev/null | head -n 1; }

if browser="$(found)"; then
    log "cached: $browser ($(version "$browser"))"
    exit 0
fi

why=""
if [[ -n "${CHROMIUM_BIN:-}" ]]; then
    why="CHROMIUM_BIN=$CHROMIUM_BIN is not an executable"
elif ! command -v apt-get >/dev/null 2>&1; then
    why="no chromium on PATH, and no apt-get to install Debian's"
elif [[ "$(id -u)" != 0 ]]; then
    why="no chromium on PATH; installing it needs root: sudo apt-get install chromium"
else
    log "apt-get install chromium (Debian's package; about 100 MB the first time)"
    logfile="$(mktemp)"
    if apt-get -qq update >"$logfile" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get -qq install -y chromium >>"$logfile" 2>&1 &&
        browser="$(found)"; then
        rm -f "$logfile"
        log "ready: $browser ($(version "$browser"))"
        exit 0
    fi
    why="apt-get install chromium failed; last lines of its output:
$(tail -n 15 "$logfile")"
    rm -f "$logfile"
fi

outcome="will be SKIPPED"
[[ "${CI:-}" == true ]] && outcome="cannot run (CI=true: this fails)"
{
    echo
    echo "==== NO BROWSER: the docs render check $outcome ===="
    echo "$why" | sed 's/^/    /'
    echo "==== (set CHROMIUM_BIN, or install Debian's chromium) ===="
    echo
} >&2
if [[ "${CI:-}" == true ]]; then
    log "CI=true: failing, since the docs would go unchecked"
    exit 1
fi
exit 0
