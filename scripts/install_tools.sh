#!/usr/bin/env bash
# Install fedchain's node tools into the project (called by `make setup`; safe to re-run).
#
#   node_modules/            root package.json: solc-js, OpenZeppelin, anvil, forge
#   tools/ipfs/node_modules/ tools/ipfs/package.json: js-ipfs 0.66.1, the real IPFS daemon
#                            for the real-backend tests and testnet (~290 MB, ~1000 packages)
#
# Each part is installed only when its stamp file (node_modules/.installed) is missing or
# older than its package.json / package-lock.json, so a second run takes well under a second.
# Needs Node >= 18 with npm and access to the npm registry (first install only).
#
# usage: scripts/install_tools.sh [--force] [--no-ipfs]
#   --force    reinstall both parts even if their stamps are fresh
#   --no-ipfs  skip js-ipfs (the realnet tests then skip, saying how to install it)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

force=0
ipfs=1
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        --no-ipfs) ipfs=0 ;;
        -h | --help)
            sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "install_tools.sh: unknown option $arg (try --help)" >&2
            exit 2
            ;;
    esac
done

die() {
    echo "install_tools.sh: error: $*" >&2
    exit 1
}

command -v node >/dev/null 2>&1 || die "node not found on PATH: install Node.js 20 (with npm)"
command -v npm >/dev/null 2>&1 || die "npm not found on PATH: install Node.js 20 (with npm)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || die "Node.js >= 18 needed (js-ipfs, solc-js), found $(node --version)"

# stale STAMP FILE...: true if STAMP is missing or older than any FILE
stale() {
    local stamp=$1
    shift
    [ "$force" = 1 ] && return 0
    [ -f "$stamp" ] || return 0
    local f
    for f in "$@"; do
        [ -e "$f" ] && [ "$f" -nt "$stamp" ] && return 0
    done
    return 1
}

rel() { if [ "$1" = "$ROOT" ]; then echo "."; else echo "${1#"$ROOT"/}"; fi; }

# install DIR WHAT CHECK_FILE NPM_ARGS...
install_dir() {
    local dir=$1 what=$2 check=$3
    shift 3
    local stamp="$dir/node_modules/.installed"
    if ! stale "$stamp" "$dir/package.json" "$dir/package-lock.json" && [ -e "$dir/$check" ]; then
        echo "install_tools.sh: $what up to date"
        return 0
    fi
    echo "install_tools.sh: installing $what into $(rel "$dir")/node_modules ..."
    local t0=$SECONDS log
    log=$(mktemp)
    if ! (cd "$dir" && npm install --no-audit --no-fund "$@") >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "npm install failed in $(rel "$dir") (it needs the npm registry on first install; \
a partial node_modules there can be removed and the script re-run)"
    fi
    grep -v -e '^npm warn' -e '^$' "$log" || true
    rm -f "$log"
    [ -e "$dir/$check" ] || die "npm install in $(rel "$dir") did not produce $check"
    touch "$stamp"
    echo "install_tools.sh: $what installed in $((SECONDS - t0)) s"
}

install_dir "$ROOT" "root node tools (solc, OpenZeppelin, anvil, forge)" \
    node_modules/@foundry-rs/forge-linux-amd64/bin/forge --fetch-retries=1
for tool in anvil forge; do
    "$ROOT/node_modules/@foundry-rs/$tool-linux-amd64/bin/$tool" --version >/dev/null 2>&1 ||
        die "node_modules/@foundry-rs/$tool-linux-amd64/bin/$tool does not run on this machine \
(it is the linux-amd64 build)"
done

if [ "$ipfs" = 1 ]; then
    # No `npm ci`: npm 11 calls this lockfile out of sync ("Missing: headless@ from lock
    # file", a dependency npm does not record deep in js-ipfs's tree); `npm install` honours
    # the lockfile and the mortice 3.0.6 override in package.json.
    # --prefer-offline: packages already in the npm cache are not revalidated (the lockfile
    # pins their integrity hashes), which saves ~25 s on a reinstall.
    install_dir "$ROOT/tools/ipfs" "js-ipfs (IPFS daemon)" \
        node_modules/ipfs/src/cli.js --fetch-retries=0 --prefer-offline
else
    echo "install_tools.sh: js-ipfs skipped (--no-ipfs)"
fi
