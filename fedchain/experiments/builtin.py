"""The named experiments (``fedchain experiment NAME``): full and ``--quick`` grids, findings.

* ``privacy``: final accuracy against ε for local DP (Laplace, Gaussian) and distributed
  DP with secure aggregation (seed experiment 1); a mode joins the grid when this build
  runs it.
* ``robustness``: Byzantine clients (20 %) x aggregation rules, final accuracy heatmap and
  accuracy over rounds.
* ``collusion``: FedAvg under IPM and ALIE, the papers' collusion model against the
  sequential one (the issue-10 anomaly).
* ``clients``: accuracy, wall time per round and gas per round against the number of
  clients K (seed experiment 2); ``privacy`` is an axis so distributed DP is one more value.
* ``recovery``: gradient inversion (DLG + iDLG) per defence, local DP included (seed
  experiment 3).
* ``models``: each model's federated accuracy next to its centralized baseline, with the
  per-model training defaults.

Each builtin is a function of ``quick`` returning an :class:`ExperimentSpec`; the quick
grids run in CI in about a minute each and must still show the facts the tests check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedchain.experiments import study
from fedchain.experiments.grid import ExperimentSpec, PlotSpec
from fedchain.experiments.plots import value_label
from fedchain.experiments.stats import describe, group_rows

__all__ = ["BUILTINS", "builtin", "findings_for"]

IPM_SMALL = "inner_product_manipulation(epsilon=0.1)"
IPM_LARGE = "inner_product_manipulation(epsilon=10.0)"
ATTACKS = (
    "none",
    "sign_flip",
    "scale(factor=10.0)",
    "gaussian_noise(sigma=1.0, replace=true)",
    "label_flip",
    "alie",
    IPM_SMALL,
    IPM_LARGE,
)
RULES = ("fedavg", "median", "trimmed_mean", "krum", "multikrum", "bulyan")
#: Client robustness does not depend on the aggregator committee: the smallest committee the
#: contract accepts (n = 4, issue 20) and no attestations keep each run's chain work small;
#: the rule runs bit-exactly as always.
LEAN_PROTOCOL = {"aggregators": 4, "attest_window": 0, "challenge_window": 1}


def robustness(quick: bool) -> ExperimentSpec:
    if quick:
        fixed = {"clients": 10, "rounds": 3, "epochs": 2, "byzantine": 0.2, **LEAN_PROTOCOL}
        axes = {"attack": ("sign_flip(scale=4.0)", IPM_LARGE), "rule": ("fedavg", "median", "krum")}
        seeds: tuple[int, ...] = (0, 1)
    else:
        # 15 clients (3 Byzantine: Bulyan's n >= 4f + 3 holds exactly), 8 rounds of 5 local
        # epochs: the grid's 96 runs share a 2-core machine; the issue's own setting (20
        # clients, 15 rounds, 10 epochs) is the collusion experiment's
        fixed = {"clients": 15, "rounds": 8, "epochs": 5, "byzantine": 0.2, **LEAN_PROTOCOL}
        axes = {"attack": ATTACKS, "rule": RULES}
        seeds = (0, 1)
    return ExperimentSpec(
        name="robustness",
        kind="fedchain",
        fixed=fixed,
        axes=axes,
        seeds=seeds,
        title="Byzantine clients against aggregation rules",
        description=(
            "20 % of the clients are Byzantine (the last ones); robust rules are told the "
            "true number f (Krum, Multi-Krum, Bulyan: f; trimmed mean: beta = f / n). "
            "Omniscient attacks (ALIE, IPM) collude as in the papers: one vector from the "
            "honest updates, sent by every attacker. Digits, IID, MLP."
        ),
        plots=(
            PlotSpec("heatmap", x="rule", y="attack", metrics=("final_accuracy",)),
            PlotSpec(
                "rounds",
                select={
                    "rule": ("fedavg", "krum"),
                    "attack": ("none", "alie", IPM_SMALL, IPM_LARGE),
                },
                title="Accuracy over rounds",
            ),
        ),
    )


def collusion(quick: bool) -> ExperimentSpec:
    if quick:
        fixed = {"clients": 10, "rounds": 3, "epochs": 2, "byzantine": 0.2, "rule": "fedavg"}
        axes = {"attack": (IPM_LARGE,), "collusion": ("paper", "sequential")}
        seeds: tuple[int, ...] = (0,)
    else:
        fixed = {"clients": 20, "rounds": 15, "byzantine": 0.2, "rule": "fedavg"}
        axes = {"attack": (IPM_LARGE,), "collusion": ("paper", "sequential")}
        seeds = (0, 1)
    # Each client registers alone (as before issue 12's relayed batches): sequential
    # crafting differs from the paper's only when an attacker sees the earlier ones' vectors.
    fixed["update_batch"] = 0
    return ExperimentSpec(
        name="collusion",
        kind="fedchain",
        fixed={**fixed, **LEAN_PROTOCOL},
        axes=axes,
        seeds=seeds,
        title="Omniscient attackers: paper collusion vs sequential crafting (FedAvg)",
        description=(
            "paper: the colluders send one vector computed from the honest updates only "
            "(Baruch et al. 2019, Xie et al. 2019). sequential: each attacker crafts its "
            "vector from every update registered before it, earlier attackers' included "
            "(fedchain before issue 10)."
        ),
        plots=(
            PlotSpec("rounds", title="FedAvg under colluding clients"),
            PlotSpec("bars", x="attack", series="collusion", metrics=("final_accuracy",)),
        ),
    )


def clients(quick: bool) -> ExperimentSpec:
    if quick:
        fixed: dict[str, Any] = {"dataset": "mixture", "rounds": 2, "epochs": 2}
        axes: dict[str, tuple[Any, ...]] = {"clients": (4, 16), "privacy": ("none",)}
        seeds: tuple[int, ...] = (0, 1)
    else:
        fixed = {"dataset": "mixture", "rounds": 5}
        axes = {
            "clients": (5, 10, 20, 50, 100, 200),
            "privacy": ("none", *runnable_modes((CLIENTS_DDP,))),
        }
        seeds = (0, 1, 2)
    return ExperimentSpec(
        name="clients",
        kind="fedchain",
        fixed=fixed,
        axes=axes,
        seeds=seeds,
        title="Number of clients K",
        description=(
            "Gaussian-mixture task with 100 samples per client (more clients, more data), "
            "MLP, FedAvg, 4 aggregators with attestations (the default protocol). Gas per "
            "round and seconds per round are read from each run's summary.json."
        ),
        plots=(
            PlotSpec(
                "lines",
                x="clients",
                series="privacy",
                metrics=("final_accuracy", "seconds_per_round", "gas_per_round"),
            ),
        ),
    )


#: The privacy curves: local DP with each noise (each with its own clip, see below) and
#: distributed DP with secure aggregation. A value is a ``--privacy`` mode with settings.
LDP_LAPLACE = 'ldp(dp_mechanism="laplace", clip_norm=150.0)'
LDP_GAUSSIAN = 'ldp(dp_mechanism="gaussian", clip_norm=10.0)'
DDP_SECAGG = "ddp+secagg(clip_norm=10.0)"
PRIVACY_MODES = (LDP_LAPLACE, LDP_GAUSSIAN, DDP_SECAGG)
EPSILONS = (math.inf, 8.0, 4.0, 2.0, 1.0, 0.5)


def runnable_modes(values: Sequence[str]) -> tuple[str, ...]:
    """The privacy values whose mode this build runs end to end (``privacy.spec``): a
    builtin lists every mode of its study, and gains a line when a mode lands (the run
    directory is then extended, the finished cells reused)."""
    from fedchain.experiments.grid import parse_call
    from privacy.spec import IMPLEMENTED_MODES, parse_mode

    return tuple(v for v in values if parse_mode(parse_call(v)[0]) in IMPLEMENTED_MODES)


#: The clients experiment's distributed-DP line: (8, 1e-5) over its 5 rounds, the L2 clip
#: at the median update norm of the MLP on this task (about 10). The total noise of the sum
#: is fixed, so the noise per client, and its share of the average, shrinks as K grows.
CLIENTS_DDP = "ddp+secagg(target_epsilon=8.0, clip_norm=10.0)"


def privacy(quick: bool) -> ExperimentSpec:
    # Local DP adds noise of the full scale to each update, so the aggregate's noise shrinks
    # only as 1/sqrt(K) against a signal of at most the clip norm: K must be large and the
    # model small for any epsilon <= 8 to learn. The Gaussian-mixture task grows with K
    # (100 samples per client, 32 features) and logistic regression has 330 parameters;
    # with K = 200 the Gaussian line leaves chance at epsilon 8 (docs/experiments.md; K =
    # 500 does better but a unit took over 5 minutes on the shared machine). The clip
    # norms are the median update norms of this task (L2 about 10, L1 about 150).
    if quick:
        fixed: dict[str, Any] = {"clients": 40, "rounds": 1, "epochs": 2}
        axes: dict[str, tuple[Any, ...]] = {
            "privacy": (LDP_GAUSSIAN,),
            "target_epsilon": (math.inf, 8.0, 0.5),
        }
        seeds: tuple[int, ...] = (0, 1)
    else:
        # one round: local DP's Gaussian noise costs about the same for one round or
        # several (the budget splits as sqrt(T)), Laplace's grows linearly in T, and each
        # unit trains 200 clients on a shared 2-core machine
        fixed = {"clients": 200, "rounds": 1}
        axes = {"privacy": runnable_modes(PRIVACY_MODES), "target_epsilon": EPSILONS}
        seeds = (0, 1, 2)
    return ExperimentSpec(
        name="privacy",
        kind="fedchain",
        fixed={
            "dataset": "mixture",
            "model": "logreg",
            "target_delta": 1e-5,
            **fixed,
            **LEAN_PROTOCOL,
        },
        axes=axes,
        seeds=seeds,
        title="Final accuracy against the privacy budget",
        description=(
            "Client-level (epsilon, delta = 1e-5) over all rounds, accounted by dp-accounting; "
            "epsilon = inf is the same task without privacy. Local DP: each client clips "
            "(L2 for Gaussian, L1 for Laplace noise) and perturbs its own update. "
            "Distributed DP: each client adds a Skellam share, secure aggregation reveals "
            "only the sum. Gaussian-mixture task (100 samples per client), logistic "
            "regression, FedAvg."
        ),
        plots=(
            PlotSpec(
                "lines",
                x="target_epsilon",
                series="privacy",
                metrics=("final_accuracy",),
                logx=True,
            ),
        ),
    )


def recovery(quick: bool) -> ExperimentSpec:
    if quick:
        axes: dict[str, tuple[Any, ...]] = {"defence": ("none", "secagg(k=10)", "ldp(epsilon=1.0)")}
        fixed: dict[str, Any] = {"iterations": 100}
        seeds: tuple[int, ...] = (0, 1)
    else:
        axes = {
            "defence": (
                "none",
                "steps(n=5)",
                "batch(size=4)",
                "batch(size=16)",
                "secagg(k=5)",
                "secagg(k=10)",
                "secagg(k=50)",
                "ldp(epsilon=1000.0)",
                "ldp(epsilon=100.0)",
                "ldp(epsilon=8.0)",
                "ldp(epsilon=1.0)",
            )
        }
        fixed = {"iterations": 200}
        seeds = tuple(range(8))
    return ExperimentSpec(
        name="recovery",
        kind="recovery",
        # clip 0.25: just above the median one-image update norm (0.19), so local DP
        # clips nothing and its noise is as small as the budget allows: the attacker's
        # best case
        fixed={"model": "mlp", "clip_norm": 0.25, **fixed},
        axes=axes,
        seeds=seeds,
        metric="psnr",
        title="Data recovery by gradient inversion (DLG + iDLG)",
        description=(
            "An aggregator reconstructs a client's training images from the decoded "
            "fixed-point update it sees (round 1, MLP, the model's default lr and momentum). "
            "secagg(k=K): it sees only the sum of K clients' updates, as under secure "
            "aggregation. ldp(epsilon=E): the client releases its update through Gaussian "
            "local DP at (E, 1e-5) for this round (L2 clip 0.25). Scores: best PSNR / SSIM "
            "per original image, averaged."
        ),
        plots=(
            PlotSpec("images", x="defence", title="Reconstructions"),
            PlotSpec("bars", x="defence", metrics=("psnr", "ssim")),
        ),
    )


def models(quick: bool) -> ExperimentSpec:
    if quick:
        fixed: dict[str, Any] = {"clients": 4, "rounds": 2, "epochs": 2}
        axes: dict[str, tuple[Any, ...]] = {
            "model": ("logreg", "mlp"),
            "kind": ("fedchain", "centralized"),
        }
        seeds: tuple[int, ...] = (0,)
    else:
        fixed = {"clients": 10, "rounds": 5, **LEAN_PROTOCOL}
        axes = {"model": ("logreg", "mlp", "cnn", "mlp-wide"), "kind": ("fedchain", "centralized")}
        seeds = (0, 1)
    return ExperimentSpec(
        name="models",
        kind="fedchain",
        fixed=fixed,
        axes=axes,
        seeds=seeds,
        title="Per-model training defaults: federated vs centralized",
        description=(
            "Each model with its default local training (clients.training.MODEL_TRAINING): "
            "10 IID digits clients, FedAvg, 5 rounds (a committee of 4: the committee does "
            "not change the model) next to the "
            "same architecture and optimiser trained centrally on the union of the clients' "
            "data for rounds x epochs epochs."
        ),
        plots=(
            PlotSpec("bars", x="model", series="kind", metrics=("final_accuracy",)),
            PlotSpec("rounds", select={"kind": ("fedchain",)}, title="Federated accuracy"),
        ),
    )


BUILTINS: dict[str, Callable[[bool], ExperimentSpec]] = {
    "privacy": privacy,
    "robustness": robustness,
    "collusion": collusion,
    "clients": clients,
    "recovery": recovery,
    "models": models,
    "robustness-fmnist": study.robustness_fmnist,
    "robustness-fmnist-val": study.robustness_fmnist_val,
    "robustness-fmnist-clip": study.robustness_fmnist_clip,
    "robustness-fmnist-tau": study.robustness_fmnist_tau,
    "robustness-fmnist-sweep": study.robustness_fmnist_sweep,
    "robustness-fmnist-alpha": study.robustness_fmnist_alpha,
    "robustness-fmnist-f10": study.robustness_fmnist_f10,
    "robustness-fmnist-overf": study.robustness_fmnist_overf,
    "robustness-fmnist-probe": study.robustness_fmnist_probe,
    "clients-control": study.clients_control,
    "clients-centralized": study.clients_centralized,
    "recovery-real": study.recovery_real,
    "privacy-controls": study.privacy_controls,
    "privacy-clip-only": study.privacy_clip_only,
    "aggregators-fmnist": study.aggregators_fmnist,
}


def builtin(name: str, quick: bool = False) -> ExperimentSpec:
    """The named experiment's grid (``KeyError`` for an unknown name)."""
    return BUILTINS[name](quick)


# ---------------------------------------------------------------------------------------
# findings


def _means(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str
) -> dict[tuple[Any, ...], float]:
    return {
        k: describe(r.get(metric) for r in members).mean
        for k, members in group_rows(rows, keys).items()
    }


def _robustness_findings(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    acc = _means(rows, ["attack", "rule"], "final_accuracy")
    out = []
    for attack in spec.axes["attack"]:
        cells = {r: acc[(attack, r)] for r in spec.axes["rule"] if (attack, r) in acc}
        if not cells:
            continue
        best = max(cells, key=lambda r: cells[r])
        worst = min(cells, key=lambda r: cells[r])
        text = ", ".join(f"{value_label('rule', r)} {v:.3f}" for r, v in cells.items())
        out.append(
            f"{value_label('attack', attack)}: {text} (best {value_label('rule', best)}, "
            f"worst {value_label('rule', worst)})"
        )
    return out


def _clients_findings(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for metric, fmt in (
        ("final_accuracy", "{:.3f}"),
        ("seconds_per_round", "{:.1f} s"),
        ("gas_per_round", "{:,.0f}"),
    ):
        means = _means(rows, ["privacy", "clients"], metric)
        for privacy in spec.axes.get("privacy", ("none",)):
            pts = [(k, means[(privacy, k)]) for k in spec.axes["clients"] if (privacy, k) in means]
            if pts:
                text = ", ".join(f"K={k}: " + fmt.format(v) for k, v in pts)
                out.append(f"{metric.replace('_', ' ')} (privacy {privacy}): {text}")
    gas = _means(rows, ["clients"], "gas_per_round")
    ks = sorted(k for (k,) in gas)
    if len(ks) >= 2:
        slope = (gas[(ks[-1],)] - gas[(ks[0],)]) / (ks[-1] - ks[0])
        out.append(f"gas per round grows by {slope:,.0f} per additional client")
    return out


def _privacy_findings(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    acc = _means(rows, ["privacy", "target_epsilon"], "final_accuracy")
    out = []
    for mode in spec.axes["privacy"]:
        pts = [(e, acc[(mode, e)]) for e in spec.axes["target_epsilon"] if (mode, e) in acc]
        if pts:
            text = ", ".join(f"ε={value_label('target_epsilon', e)}: {v:.3f}" for e, v in pts)
            out.append(f"{value_label('privacy', mode)}: {text}")
    classes = {r.get("dataset") for r in rows}
    if classes <= {"digits", "mixture", "mnist"}:
        out.append("chance is 0.100 (ten classes)")
    return out


def _recovery_findings(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    psnr = group_rows(rows, ["defence"], spec.axes)
    for (defence,), members in psnr.items():
        p = describe(r.get("psnr") for r in members)
        s = describe(r.get("ssim") for r in members)
        lab = describe(r.get("label_accuracy") for r in members)
        out.append(
            f"{value_label('defence', defence)}: PSNR {p.text(1)} dB, SSIM {s.text(3)}, "
            f"labels {lab.mean:.2f}"
        )
    return out


def _models_findings(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    acc = _means(rows, ["model", "kind"], "final_accuracy")
    out = []
    for model in spec.axes["model"]:
        fed, cen = acc.get((model, "fedchain")), acc.get((model, "centralized"))
        mine = [r for r in rows if r.get("model") == model]
        drops = [
            max([0.0, *(c[i] - c[i + 1] for i in range(len(c) - 1))])
            for r in mine
            if r.get("kind") == "fedchain" and isinstance(c := r.get("accuracy_per_round"), list)
        ]
        peaks = [
            max(c)
            for r in mine
            if r.get("kind") == "centralized" and isinstance(c := r.get("accuracy_per_epoch"), list)
        ]
        collapsed = [
            f"seed {r['seed']} fell to {r['final_accuracy']:.3f} after peaking at "
            f"{max(r['accuracy_per_epoch']):.3f}"
            for r in mine
            if r.get("kind") == "centralized"
            and isinstance(r.get("accuracy_per_epoch"), list)
            and max(r["accuracy_per_epoch"]) - r["final_accuracy"] > 0.2
        ]
        out.append(
            f"{model}: federated {_fmt(fed)} (largest round-to-round drop "
            f"{max(drops, default=0.0):.3f}), centralized {_fmt(cen)} (peak "
            f"{_fmt(sum(peaks) / len(peaks) if peaks else None)})"
            + (f"; centralized {', '.join(collapsed)}" if collapsed else "")
        )
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _collusion_findings(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    acc = _means(rows, ["attack", "collusion"], "final_accuracy")
    return [
        f"{value_label('attack', a)}: paper {acc.get((a, 'paper'), float('nan')):.3f}, "
        f"sequential {acc.get((a, 'sequential'), float('nan')):.3f}"
        for a in spec.axes["attack"]
    ]


FINDINGS: dict[str, Callable[[ExperimentSpec, Sequence[Mapping[str, Any]]], list[str]]] = {
    "privacy": _privacy_findings,
    "robustness": _robustness_findings,
    "clients": _clients_findings,
    "recovery": _recovery_findings,
    "models": _models_findings,
    "collusion": _collusion_findings,
}


def findings_for(spec: ExperimentSpec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Key findings of a builtin experiment (empty for custom grids: generic ones apply)."""
    fn = FINDINGS.get(spec.name)
    if fn is None or spec.source is not None:
        return []
    return fn(spec, rows)
