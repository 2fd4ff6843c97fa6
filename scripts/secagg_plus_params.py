"""SecAgg+ parameters (``privacy.secagg_graph.find_parameters``) next to the full graph.

For each number of clients K, corrupt fraction γ and dropout fraction δ it prints a Markdown
row: the Harary graph's degree k and threshold t (σ = 40, η = 20, curious server), n_min =
⌈(1 − δ)K⌉, the share holders per client (k + 1 against K for the full graph), the full
graph's threshold ⌈(1 − δ)K⌉ and whether the full graph's floor accepts it (t > K/2 and
t > γK), and the finder's CPU time (first call, not memoized).

    .venv/bin/python scripts/secagg_plus_params.py [--clients 100 1000 10000]
        [--corrupt 0.05 0.1 0.2] [--dropout 0.1 0.3] [--adversary curious]
"""

from __future__ import annotations

import argparse
import time

from privacy.reveal_safety import check_threshold_floor, min_included
from privacy.secagg_graph import ADVERSARIES, SecAggParameterError, find_parameters
from protocol.errors import ConfigError


def row(clients: int, gamma: float, delta: float, adversary: str) -> str:
    """One Markdown row of the table (module docstring)."""
    full_t = min_included(clients, delta)
    try:
        check_threshold_floor(clients, full_t, gamma)
        full = f"{full_t:,} (ok)"
    except ConfigError:
        full = f"{full_t:,} (refused)"
    start = time.process_time()
    try:
        p = find_parameters(clients, gamma, delta, adversary=adversary)
    except SecAggParameterError as exc:
        seconds = time.process_time() - start
        cells = f"infeasible: {exc} | | | | {full} | {seconds:.3f}"
        return f"| {clients:,} | {gamma:g} | {delta:g} | {cells} |"
    seconds = time.process_time() - start
    return (
        f"| {clients:,} | {gamma:g} | {delta:g} | {p.degree} | {p.threshold} | {p.n_min:,} | "
        f"{p.degree + 1} / {clients:,} | {full} | {seconds:.3f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--corrupt", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    parser.add_argument("--dropout", type=float, nargs="+", default=[0.1, 0.3])
    parser.add_argument("--adversary", choices=ADVERSARIES, default="curious")
    args = parser.parse_args()
    print(f"# SecAgg+ parameters: sigma 40, eta 20, adversary {args.adversary}")
    print(
        "| K | γ | δ | k | t | n_min | share holders per client (SecAgg+ / full) "
        "| full graph t | finder CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for clients in args.clients:
        for gamma in args.corrupt:
            for delta in args.dropout:
                print(row(clients, gamma, delta, args.adversary))


if __name__ == "__main__":
    main()
