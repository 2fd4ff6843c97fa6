"""The one-run privacy audit (Steinke, Nasr & Jagielski 2023) next to the accountant's ε.

For local DP (Gaussian, Laplace) and distributed DP (Skellam shares inside a securely
aggregated sum) at each target ε, with the noise the task would use over one round, it
runs ``privacy.audit`` with ``--canaries`` canary clients (10 % guesses on each side, 95 %
confidence, δ = 1e-5) and prints a Markdown table: the accountant's ε, the empirical ε
lower bound, the correct guesses. A last row per family audits a mechanism with a tenth of
the noise it claims, which the audit must catch (its lower bound above the claimed ε).

    .venv/bin/python scripts/audit_privacy.py [--canaries 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from privacy.audit import AuditResult, audit_distributed_mechanism, audit_local_mechanism
from privacy.spec import PrivacySpec

TARGETS = (1.0, 4.0, 8.0)


def _row(label: str, claimed: float, result: AuditResult) -> str:
    flag = " (caught)" if result.epsilon_lower_bound > claimed else ""
    return (
        f"| {label} | {claimed:.2f} | {result.epsilon_lower_bound:.2f}{flag} | "
        f"{result.correct} / {result.guesses} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--canaries", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"# one-run audit: {args.canaries} canaries, 1 round, delta 1e-5, 95 % confidence")
    print("| release | accountant ε | empirical ε lower bound | correct / guesses |")
    print("|---|---|---|---|")
    for mechanism in ("gaussian", "laplace"):
        for target in TARGETS:
            spec, _ = PrivacySpec(mode="ldp", mechanism=mechanism, target_epsilon=target).resolve(1)
            rng = np.random.default_rng(args.seed)
            result = audit_local_mechanism(spec, args.canaries, 1, rng)
            print(_row(f"ldp {mechanism}", spec.accountant().epsilon(1), result))
    for target in TARGETS:
        spec, _ = PrivacySpec(
            mode="ddp+secagg", mechanism="skellam", target_epsilon=target, num_clients=10
        ).resolve(1)
        rng = np.random.default_rng(args.seed)
        result = audit_distributed_mechanism(spec, args.canaries, 1, rng)
        print(_row("ddp+secagg skellam (K 10)", spec.accountant().epsilon(1), result))
    spec, _ = PrivacySpec(mode="ldp", target_epsilon=1.0).resolve(1)
    broken = replace(spec, noise_multiplier=(spec.noise_multiplier or 1.0) / 10)
    rng = np.random.default_rng(args.seed)
    result = audit_local_mechanism(broken, args.canaries, 1, rng)
    print(_row("ldp gaussian, noise ÷ 10 (claims ε 1)", 1.0, result))
    spec, _ = PrivacySpec(
        mode="ddp+secagg", mechanism="skellam", target_epsilon=1.0, num_clients=10
    ).resolve(1)
    broken = replace(spec, noise_multiplier=(spec.noise_multiplier or 1.0) / 10)
    rng = np.random.default_rng(args.seed)
    result = audit_distributed_mechanism(broken, args.canaries, 1, rng)
    print(_row("ddp skellam, noise ÷ 10 (claims ε 1)", 1.0, result))


if __name__ == "__main__":
    main()
