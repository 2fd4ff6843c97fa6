#!/usr/bin/env bash
# A longer Foundry invariant campaign over the contracts (contracts/test/*Invariant*), beyond
# the short one `make forge-test` runs; prints each invariant's runs and calls and the totals.
#
# usage: scripts/invariant_campaign.sh [RUNS] [DEPTH] [SEED]
#   RUNS   sequences per invariant (default 512; make forge-test uses 32)
#   DEPTH  calls per sequence (default 128; make forge-test uses 64)
#   SEED   fuzz seed (default: random, printed so that a failure can be replayed)
# Needs node_modules (scripts/install_tools.sh). Runs under nice; the log of the run is kept in
# .forge/invariant_campaign.log.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
FORGE="$ROOT/node_modules/@foundry-rs/forge-linux-amd64/bin/forge"
[ -x "$FORGE" ] || {
    echo "invariant_campaign.sh: $FORGE is missing: run scripts/install_tools.sh" >&2
    exit 1
}

runs=${1:-512}
depth=${2:-128}
seed=${3:-$(printf '0x%x' "$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')")}
mkdir -p "$ROOT/.forge"
log="$ROOT/.forge/invariant_campaign.log"

echo "invariant campaign: runs=$runs depth=$depth seed=$seed (log: ${log#"$ROOT"/})"
t0=$SECONDS
status=0
(cd contracts && FOUNDRY_INVARIANT_RUNS=$runs FOUNDRY_INVARIANT_DEPTH=$depth \
    nice -n 19 "$FORGE" test --match-test '^invariant_' --fuzz-seed "$seed") >"$log" 2>&1 || status=$?

# "[PASS] invariant_x() (runs: 512, calls: 65536, reverts: 3)"
grep -E '^\[(PASS|FAIL)' "$log" | grep invariant_ || true
awk '/^\[(PASS|FAIL).*invariant_/ {
        if (match($0, /runs: [0-9]+/)) r += substr($0, RSTART + 6, RLENGTH - 6)
        if (match($0, /calls: [0-9]+/)) c += substr($0, RSTART + 7, RLENGTH - 7)
        n += 1
     }
     END { printf "total: %d invariants, %d runs, %d calls\n", n, r, c }' "$log"
echo "elapsed: $((SECONDS - t0)) s"
if [ "$status" != 0 ]; then
    echo "invariant_campaign.sh: FAILED (seed $seed); the failing sequence is in ${log#"$ROOT"/}" >&2
    grep -E -A30 '^\[FAIL' "$log" | head -80 >&2 || true
fi
exit "$status"
