# The Debian mirror configured on this machine, for the private apt of
# get-servers.sh and get-pythons.sh (sourced by both): the URIs of a deb822 stanza
# (/etc/apt/sources.list.d/*.sources) or of a one-line `deb` entry
# (/etc/apt/sources.list*), preferring a main-archive ".../debian" URI over
# security/third-party ones. DEBIAN_MIRROR overrides it.
detect_mirror() {
    if [[ -n "${DEBIAN_MIRROR:-}" ]]; then
        echo "${DEBIAN_MIRROR%/}"
        return
    fi
    local candidates=() f u
    shopt -s nullglob
    for f in /etc/apt/sources.list.d/*.sources; do
        while read -r u; do candidates+=("$u"); done < <(
            awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' "$f")
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "$f" ]] || continue
        while read -r u; do candidates+=("$u"); done < <(
            awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/ && $i !~ /=/) { print $i; break } }' "$f")
    done
    shopt -u nullglob
    for u in "${candidates[@]}"; do  # best: a plain .../debian archive
        [[ "$u" =~ ^https?://[^[:space:]]*/debian/?$ ]] && { echo "${u%/}"; return; }
    done
    for u in "${candidates[@]}"; do  # next: anything Debian-ish but not security
        [[ "$u" == http*debian* && "$u" != *security* ]] && { echo "${u%/}"; return; }
    done
    echo "http://deb.debian.org/debian"
}
