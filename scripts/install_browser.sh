#!/usr/bin/env bash
# Install Debian's Chromium for the dashboard's browser tests (called by `make setup`; safe to
# re-run: a second run takes well under a second when /usr/bin/chromium is there).
#
# The tests drive it with Playwright from PyPI through `executable_path=/usr/bin/chromium`;
# Playwright's own browser download (`playwright install`) is never used: it needs a CDN this
# project does not rely on.
#
# usage: scripts/install_browser.sh [--check]
#   --check   only report whether chromium is installed (exit 1 if not); install nothing
set -euo pipefail

CHROMIUM=${FEDCHAIN_CHROMIUM:-/usr/bin/chromium}
check=0
for arg in "$@"; do
    case "$arg" in
        --check) check=1 ;;
        -h | --help)
            sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "install_browser.sh: unknown option $arg (try --help)" >&2
            exit 2
            ;;
    esac
done

if [ -x "$CHROMIUM" ]; then
    echo "install_browser.sh: chromium up to date ($("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM"))"
    exit 0
fi
if [ "$check" = 1 ]; then
    echo "install_browser.sh: $CHROMIUM not found" >&2
    exit 1
fi
# Without a way to install it, setup goes on (the browser tests then skip, saying why),
# unless the browser tests are required (CI: FEDCHAIN_REQUIRE_REALNET=1).
cannot() {
    echo "install_browser.sh: $*" >&2
    if [ "${FEDCHAIN_REQUIRE_REALNET:-}" = 1 ] || [ "${FEDCHAIN_REQUIRE_BROWSER:-}" = 1 ]; then
        exit 1
    fi
    echo "install_browser.sh: continuing without chromium (the dashboard's browser tests will skip)" >&2
    exit 0
}
command -v apt-get >/dev/null 2>&1 ||
    cannot "no apt-get here: install Chromium yourself and set FEDCHAIN_CHROMIUM to its path"
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || cannot "installing chromium needs root (or sudo)"
    sudo="sudo"
fi
echo "install_browser.sh: installing Debian's chromium (apt-get) ..."
t0=$SECONDS
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
[ -x "$CHROMIUM" ] || {
    echo "install_browser.sh: apt-get finished but $CHROMIUM is missing" >&2
    exit 1
}
echo "install_browser.sh: $("$CHROMIUM" --version) installed in $((SECONDS - t0)) s"
