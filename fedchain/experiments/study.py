"""The issue-23 robustness study on Fashion-MNIST: grids and headline statistics.

``robustness-fmnist``: Byzantine clients (20 %) against aggregation rules, each alone and
after nearest-neighbour mixing (NNM), IID and Dirichlet(0.1), five seeds. The headline
metric of a (rule, partition) pair is its **worst case over attacks** of the mean of the
last five rounds' test accuracy, with the attack that achieves it named
(:func:`worst_case_table`). Every setting runs under fedchain's fixed-point format with
``clip = 4.0``: every coordinate of an update is saturated to [-4, 4] before any rule sees
it, an always-on coordinate clip that is part of every defence here (declared in the grid's
fixed settings; the ``robustness-fmnist-clip`` grid ablates it once).

Hyperparameters were fixed before any test accuracy was seen: local training is the MLP's
default (lr 0.1, momentum 0.9) with one epoch of batch 32; centred clipping's radius
tau = 1.0 is below the clients' round-1 update norms measured on the *training* split
(1.3-1.5); the geometric median uses ByzFL's defaults (nu 0.1, 3 iterations). The
``robustness-fmnist-val`` grid re-checks those choices on the validation split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fedchain.experiments.grid import ExperimentSpec, PlotSpec
from fedchain.experiments.stats import describe

__all__ = [
    "AGGREGATOR_BEHAVIOURS",
    "STUDY_ATTACKS",
    "STUDY_RULES",
    "aggregator_table",
    "aggregators_fmnist",
    "clients_centralized",
    "clients_control",
    "privacy_clip_only",
    "privacy_controls",
    "recovery_real",
    "robustness_fmnist",
    "robustness_fmnist_alpha",
    "robustness_fmnist_clip",
    "robustness_fmnist_f10",
    "robustness_fmnist_overf",
    "robustness_fmnist_probe",
    "robustness_fmnist_sweep",
    "robustness_fmnist_tau",
    "robustness_fmnist_val",
    "setting_label",
    "worst_case_table",
]

BASE_RULES = ("fedavg", "median", "trimmed_mean", "krum", "geomedian", "centered_clip")
STUDY_RULES = BASE_RULES + tuple(f"nnm+{r}" for r in BASE_RULES)
STUDY_ATTACKS = (
    "none",
    "sign_flip",
    "gaussian_noise(sigma=1.0, replace=true)",
    "label_flip",
    "alie",
    "inner_product_manipulation(epsilon=0.1)",
    "min_max",
    "min_sum",
    "fang_trmean",
    "fang_krum",
    "alie_opt",
    "ipm_opt",
    "mimic",
)
STUDY_FIXED: dict[str, Any] = {
    "dataset": "fashion",
    "train_samples": 4000,
    "clients": 20,
    "byzantine": 0.2,
    "rounds": 10,
    "epochs": 1,
    "batch_size": 32,
    "model": "mlp",
    # the always-on fixed-point saturation: every coordinate in [-4, 4] (declared)
    "clip": 4.0,
    "frac_bits": 16,
    "aggregators": 4,
    "attest_window": 0,
    "challenge_window": 1,
}


_HEADLINE_PLOTS = (
    PlotSpec(
        "heatmap",
        x="rule",
        y="attack",
        metrics=("last5_accuracy",),
        select={"partition": ("iid",)},
        file="heatmap-iid",
        title="IID: last-5 accuracy",
    ),
    PlotSpec(
        "heatmap",
        x="rule",
        y="attack",
        metrics=("last5_accuracy",),
        select={"partition": ("dirichlet",)},
        file="heatmap-dirichlet",
        title="Dirichlet alpha = 0.1: last-5 accuracy",
    ),
)


_DESCRIPTION = (
    "20 % of 20 clients are Byzantine (the last ones); rules are told the true f. "
    "Fashion-MNIST (4,000 training images, stratified, fixed data seed; test set "
    "10,000), MLP, 10 rounds of 1 local epoch. Every coordinate is saturated to "
    "[-4, 4] by the fixed-point format (clip = 4.0). Metric: mean test accuracy of "
    "the last 5 rounds."
)


def _spec(
    name: str,
    fixed: Mapping[str, Any],
    axes: Mapping[str, tuple[Any, ...]],
    seeds: int,
    description: str = _DESCRIPTION,
    plots: tuple[PlotSpec, ...] | None = None,
) -> ExperimentSpec:
    if plots is None:
        plots = (
            _HEADLINE_PLOTS
            if "partition" in axes
            else (
                PlotSpec("bars", x=next(iter(axes)), series="attack", metrics=("last5_accuracy",)),
            )
        )
    return ExperimentSpec(
        name=name,
        kind="fedchain",
        fixed=dict(fixed),
        axes=dict(axes),
        seeds=tuple(range(seeds)),
        title="Byzantine clients against robust rules and NNM on Fashion-MNIST",
        description=description,
        metric="last5_accuracy",
        plots=plots,
    )


def robustness_fmnist(quick: bool) -> ExperimentSpec:
    if quick:
        fixed = {**STUDY_FIXED, "rounds": 3, "train_samples": 1000, "clients": 10}
        axes = {
            "partition": ("iid",),
            "rule": ("fedavg", "nnm+median"),
            "attack": ("sign_flip",),
        }
        return _spec("robustness-fmnist", {**fixed, "alpha": 0.1}, axes, 1)
    axes = {
        "partition": ("iid", "dirichlet"),
        "rule": STUDY_RULES,
        "attack": STUDY_ATTACKS,
    }
    return _spec("robustness-fmnist", {**STUDY_FIXED, "alpha": 0.1}, axes, 5)


def robustness_fmnist_sweep(quick: bool) -> ExperimentSpec:
    """The issue's full factorial: heterogeneity alpha in {1, 0.3, 0.1}, f in {10 %, 20 %},
    rules told the true f or a larger one (30 %); 3 seeds, 5,616 units (about 12 core-hours
    here). The three slices below measure its off-headline axes one at a time."""
    axes = {
        "alpha": (1.0, 0.3, 0.1),
        "byzantine": (0.1, 0.2),
        "assumed_byzantine": ("true", 0.3),
        "rule": STUDY_RULES,
        "attack": STUDY_ATTACKS,
    }
    if quick:
        axes = {
            "alpha": (0.3,),
            "byzantine": (0.1,),
            "assumed_byzantine": (0.3,),
            "rule": ("nnm+median",),
            "attack": ("alie",),
        }
    fixed = {**STUDY_FIXED, "partition": "dirichlet"}
    fixed.pop("byzantine")
    return _spec("robustness-fmnist-sweep", fixed, axes, 1 if quick else 3)


_SLICE_QUICK = {"rule": ("nnm+median",), "attack": ("alie",)}


def robustness_fmnist_alpha(quick: bool) -> ExperimentSpec:
    """Slice of the sweep: milder heterogeneity, Dirichlet alpha in {1, 0.3}, at the
    headline's f = 20 % (rules told the true f); the headline grid has IID and 0.1."""
    axes: dict[str, tuple[Any, ...]] = {
        "alpha": (1.0, 0.3),
        "rule": STUDY_RULES,
        "attack": STUDY_ATTACKS,
    }
    if quick:
        axes = {"alpha": (0.3,), **_SLICE_QUICK}
    fixed = {**STUDY_FIXED, "partition": "dirichlet"}
    plots = tuple(
        PlotSpec(
            "heatmap",
            x="rule",
            y="attack",
            metrics=("last5_accuracy",),
            select={"alpha": (a,)},
            file=f"heatmap-alpha-{a:g}",
            title=f"Dirichlet alpha = {a:g}: last-5 accuracy",
        )
        for a in axes["alpha"]
    )
    text = _DESCRIPTION.replace("10,000), MLP", "10,000), Dirichlet alpha 1 or 0.3, MLP")
    return _spec("robustness-fmnist-alpha", fixed, axes, 1 if quick else 2, text, plots)


def _partition_slice(
    name: str, quick: bool, change: Mapping[str, Any], text: str
) -> ExperimentSpec:
    """A sweep slice over IID and Dirichlet alpha = 0.1 (quick: Dirichlet only), every rule
    and attack, 2 seeds: the headline's setting with ``change`` on top."""
    axes: dict[str, tuple[Any, ...]] = {
        "partition": ("iid", "dirichlet"),
        "rule": STUDY_RULES,
        "attack": STUDY_ATTACKS,
    }
    if quick:
        axes = {"partition": ("dirichlet",), **_SLICE_QUICK}
    fixed = {**STUDY_FIXED, **change, "alpha": 0.1}
    return _spec(name, fixed, axes, 1 if quick else 2, text)


def robustness_fmnist_f10(quick: bool) -> ExperimentSpec:
    """Slice of the sweep: f = 10 % (2 of 20 clients Byzantine, rules told the true f),
    IID and Dirichlet alpha = 0.1 (the headline's partitions at half its f)."""
    text = _DESCRIPTION.replace("20 % of 20 clients", "10 % of 20 clients")
    return _partition_slice("robustness-fmnist-f10", quick, {"byzantine": 0.1}, text)


def robustness_fmnist_overf(quick: bool) -> ExperimentSpec:
    """Slice of the sweep: rules told a larger f (30 %, 6 of 20) than the real 20 % (4),
    IID and Dirichlet alpha = 0.1: what over-provisioning f costs and buys."""
    text = _DESCRIPTION.replace("rules are told the true f", "rules are told f = 30 % (6)")
    return _partition_slice("robustness-fmnist-overf", quick, {"assumed_byzantine": 0.3}, text)


def robustness_fmnist_probe(quick: bool) -> ExperimentSpec:
    """An early look at Dirichlet alpha = 0.1 while the headline grid runs IID first: four
    rules with and without NNM under four attacks, seed 0 (same setting as the headline)."""
    axes = {
        "rule": ("median", "nnm+median", "krum", "nnm+krum"),
        "attack": (
            "none",
            "alie",
            "inner_product_manipulation(epsilon=0.1)",
            "alie_opt",
            "min_max",
        ),
    }
    if quick:
        axes = {"rule": ("nnm+median",), "attack": ("alie",)}
    fixed = {**STUDY_FIXED, "partition": "dirichlet", "alpha": 0.1}
    return _spec("robustness-fmnist-probe", fixed, axes, 1)


def robustness_fmnist_val(quick: bool) -> ExperimentSpec:
    """The hyperparameter check on the validation split (never the test set)."""
    fixed = {**STUDY_FIXED, "dataset": "fashion-val", "alpha": 0.1, "partition": "dirichlet"}
    axes = {
        "rule": ("centered_clip", "geomedian", "fedavg"),
        "lr": (0.05, 0.1),
        "attack": ("none", "alie"),
    }
    return _spec("robustness-fmnist-val", fixed, axes, 1 if quick else 2)


def robustness_fmnist_tau(quick: bool) -> ExperimentSpec:
    """Centred clipping's radius on the validation split (never the test set)."""
    fixed = {
        **STUDY_FIXED,
        "dataset": "fashion-val",
        "alpha": 0.1,
        "partition": "dirichlet",
        "rule": "centered_clip",
    }
    axes = {
        "rule_params": ({"tau": 0.5}, {"tau": 1.0}, {"tau": 2.0}),
        "attack": ("none", "alie"),
    }
    return _spec("robustness-fmnist-tau", fixed, axes, 1 if quick else 2)


def robustness_fmnist_clip(quick: bool) -> ExperimentSpec:
    """The ablation of the always-on saturation: clip 4 against clip 64 (frac_bits 12)."""
    fixed = {k: v for k, v in STUDY_FIXED.items() if k not in ("clip", "frac_bits")}
    axes = {
        "clip": (4.0, 64.0),
        "rule": ("fedavg", "median", "krum"),
        "attack": ("sign_flip", "alie", "gaussian_noise(sigma=1.0, replace=true)"),
    }
    return _spec(
        "robustness-fmnist-clip",
        {**fixed, "frac_bits": 12, "alpha": 0.1},
        axes,
        1 if quick else 3,
    )


def clients_control(quick: bool) -> ExperimentSpec:
    """The clients experiment's control: the total data is fixed (2,000 Fashion-MNIST
    training images, stratified) while K grows, next to the centralized model trained on
    the same union. In the ``clients`` grid every client brings 100 samples, so data grows
    with K and a centralized run on the same data rises as much (``clients-centralized``)."""
    clients = (5, 10) if quick else (5, 10, 20, 50, 100)
    fixed = {
        "dataset": "fashion",
        "train_samples": 2000,
        "rounds": 2 if quick else 5,
        "epochs": 1,
        "batch_size": 32,
        "model": "mlp",
        "aggregators": 4,
        "attest_window": 0,
        "challenge_window": 1,
    }
    return ExperimentSpec(
        name="clients-control",
        kind="fedchain",
        fixed=fixed,
        axes={"clients": clients, "kind": ("fedchain", "centralized")},
        seeds=tuple(range(1 if quick else 3)),
        title="Number of clients K at a fixed total of 2,000 training images",
        description=(
            "FedAvg, IID, MLP; the centralized line trains the same architecture on the same "
            "2,000 images for rounds x epochs epochs, so it is flat in K by construction."
        ),
        metric="final_accuracy",
        plots=(PlotSpec("lines", x="clients", series="kind", metrics=("final_accuracy",)),),
    )


def clients_centralized(quick: bool) -> ExperimentSpec:
    """The centralized line of the ``clients`` grid: the union of K clients' mixture data
    (100 samples each, so it grows with K), trained centrally for rounds x epochs epochs."""
    return ExperimentSpec(
        name="clients-centralized",
        kind="centralized",
        fixed={"dataset": "mixture", "rounds": 2 if quick else 5},
        axes={"clients": (4, 16) if quick else (5, 10, 20, 50, 100, 200)},
        seeds=tuple(range(1 if quick else 3)),
        title="Centralized training on the clients grid's data (grows with K)",
        metric="final_accuracy",
        plots=(PlotSpec("lines", x="clients", metrics=("final_accuracy",)),),
    )


def recovery_real(quick: bool) -> ExperimentSpec:
    """Data recovery against the update clients really send (16 images, batch 16, 1 or 10
    local epochs, round 1 or 5), Geiping et al.'s cosine + TV attack with Adam and
    restarts, next to the class-mean prior."""
    fixed: dict[str, Any] = {
        "model": "mlp",
        "samples": 16,
        "batch_size": 16,
        "iterations": 50 if quick else 1000,
        "restarts": 1 if quick else 4,
    }
    return ExperimentSpec(
        name="recovery-real",
        kind="recovery-real",
        fixed=fixed,
        axes={"epochs": (1, 10), "round": (1,) if quick else (1, 5)},
        seeds=tuple(range(1 if quick else 5)),
        title="Data recovery against real client updates (cosine + TV, Adam, restarts)",
        description=(
            "An aggregator inverts a client's decoded update: 16 digits images, batch 16, "
            "the MLP's lr and momentum, 1 or 10 local epochs, from the initial model "
            "(round 1) or one trained for 4 epochs on other images (round 5). Baseline: "
            "each image guessed as its class's mean image (prior_psnr)."
        ),
        metric="psnr",
        plots=(PlotSpec("bars", x="epochs", series="round", metrics=("psnr", "prior_psnr")),),
    )


#: A trusted aggregator's central DP, measured with fedchain's distributed DP: with no
#: dropout margin the Skellam noise of the sum is exactly what the budget needs for the
#: sum of K clipped updates - the noise a central curator would add (Skellam for Gaussian).
CENTRAL_DP = "ddp+secagg(clip_norm=10.0, dropout_fraction=0.0)"
#: Clip-only points: the local-DP clip with a negligible noise multiplier (1e-4), so the
#: cost of clipping alone is separated from the cost of noise at the same clip.
CLIP_ONLY = (
    'ldp(dp_mechanism="gaussian", clip_norm=10.0, noise_multiplier=0.0001)',
    'ldp(dp_mechanism="laplace", clip_norm=150.0, noise_multiplier=0.0001)',
)


def _privacy_fixed() -> dict[str, Any]:
    return {
        "dataset": "mixture",
        "model": "logreg",
        "target_delta": 1e-5,
        "clients": 200,
        "rounds": 1,
        "aggregators": 4,
        "attest_window": 0,
        "challenge_window": 1,
    }


def privacy_controls(quick: bool) -> ExperimentSpec:
    """The privacy experiment's controls: the central-DP line (``CENTRAL_DP``) over
    epsilon, at the same L2 clip (10) as the local-DP Gaussian and DDP lines."""
    fixed = {**_privacy_fixed(), **({"clients": 40} if quick else {})}
    return ExperimentSpec(
        name="privacy-controls",
        kind="fedchain",
        fixed=fixed,
        axes={
            "privacy": (CENTRAL_DP,),
            "target_epsilon": (8.0,) if quick else (8.0, 4.0, 2.0, 1.0, 0.5),
        },
        seeds=tuple(range(1 if quick else 3)),
        title="Central DP (trusted aggregator) at the local-DP lines' clip",
        metric="final_accuracy",
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


def privacy_clip_only(quick: bool) -> ExperimentSpec:
    """Clip-only points at the privacy experiment's clips (L2 10, L1 150)."""
    fixed = {**_privacy_fixed(), **({"clients": 40} if quick else {})}
    return ExperimentSpec(
        name="privacy-clip-only",
        kind="fedchain",
        fixed=fixed,
        axes={"privacy": CLIP_ONLY},
        seeds=tuple(range(1 if quick else 3)),
        title="Clipping alone (noise multiplier 1e-4) at the privacy experiment's clips",
        metric="final_accuracy",
        plots=(PlotSpec("bars", x="privacy", metrics=("final_accuracy",)),),
    )


#: The faulty-aggregator behaviours of ``aggregators-fmnist`` (aggregators.behaviours):
#: ``honest`` is every cell's twin, the rest publish a faulty aggregate in every round in
#: which the contract chooses them (or none: withhold; or bytes nobody can fetch:
#: unavailable).
AGGREGATOR_BEHAVIOURS = (
    "honest",
    "noise(sigma=0.1)",
    "sign_flip",
    "scale(factor=10.0)",
    "substitute",
    "wrong_rule",
    "drop",
    "stale",
    "withhold",
    "unavailable",
)


def aggregators_fmnist(quick: bool) -> ExperimentSpec:
    """The same study for malicious *aggregators*: each faulty behaviour in committees of
    n = 4 (1 faulty) and n = 7 (2 faulty) under FedAvg and the median, honest clients,
    IID Fashion-MNIST at a cheaper size than the headline (3 seeds).
    :func:`aggregator_table` compares every cell with its honest twin (same rule,
    committee and seed)."""
    fixed: dict[str, Any] = {
        k: v for k, v in STUDY_FIXED.items() if k not in ("byzantine", "aggregators")
    }
    # a cheaper size than the headline's (10 clients, 2,000 images, 8 rounds): every unit
    # also runs its disputes on the embedded chain
    fixed.update(
        partition="iid",
        byzantine_aggregators="max",
        challenge_window=2,
        clients=10,
        train_samples=2000,
        rounds=8,
    )
    axes: dict[str, tuple[Any, ...]] = {
        "rule": ("fedavg", "median"),
        "aggregators": (4, 7),
        "aggregator_behaviour": AGGREGATOR_BEHAVIOURS,
    }
    seeds = 3
    if quick:
        fixed.update(rounds=3, train_samples=1000, clients=10)
        axes = {
            "rule": ("fedavg",),
            "aggregators": (4,),
            "aggregator_behaviour": ("honest", "sign_flip", "withhold"),
        }
        seeds = 1
    return ExperimentSpec(
        name="aggregators-fmnist",
        kind="fedchain",
        fixed=fixed,
        axes=axes,
        seeds=tuple(range(seeds)),
        title="Malicious aggregators on Fashion-MNIST",
        description=(
            "f = (n - 1) // 3 aggregators (the first committee members) misbehave whenever "
            "the contract chooses them; 10 honest clients, IID Fashion-MNIST (2,000 "
            "training images), MLP, 8 rounds of 1 local epoch, clip 4. Every faulty "
            "aggregate is re-executed by the others, challenged and decided by the "
            "committee; the cell's final model is compared byte for byte with its honest "
            "twin (same rule, committee, seed)."
        ),
        metric="last5_accuracy",
        plots=(
            PlotSpec(
                "bars",
                x="aggregator_behaviour",
                series="aggregators",
                metrics=("last5_accuracy",),
            ),
        ),
    )


AGGREGATOR_TABLE_KEYS = ("rule", "aggregators", "aggregator_behaviour")


def aggregator_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (rule, committee, behaviour): final and last-5 accuracy (mean over seeds), how
    many seeds ended byte-identical to the honest twin (same rule, committee and seed),
    rounds lost, faulty aggregates submitted / rejected / finalized, disputes, withheld
    slots, blocks from a faulty submission to its rejection, dispute gas and total gas per
    run (means), and the seeds counted."""
    twins = {
        (r.get("rule"), r.get("aggregators"), r.get("seed")): r.get("final_model_digest")
        for r in rows
        if r.get("aggregator_behaviour") == "honest"
    }
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in AGGREGATOR_TABLE_KEYS), []).append(r)
    out = []
    for key, members in groups.items():
        same = [
            r.get("final_model_digest") is not None
            and twins.get((r.get("rule"), r.get("aggregators"), r.get("seed")))
            == r.get("final_model_digest")
            for r in members
        ]
        row: dict[str, Any] = dict(zip(AGGREGATOR_TABLE_KEYS, key, strict=True))

        def mean(metric: str, ms: Sequence[Mapping[str, Any]] = members) -> float:
            return describe(r.get(metric) for r in ms).mean

        row.update(
            final_accuracy=mean("final_accuracy"),
            last5_accuracy=mean("last5_accuracy"),
            identical=sum(same),
            seeds=len(members),
            rounds_lost=mean("rounds_lost"),
            faulty_aggregates=mean("faulty_aggregates"),
            rejected=mean("rejected"),
            faulty_finalized=mean("faulty_finalized"),
            disputes=mean("disputes"),
            withheld=mean("withheld"),
            detection_blocks=mean("detection_blocks_mean"),
            dispute_gas=mean("dispute_gas_total"),
            total_gas=mean("total_gas"),
        )
        out.append(row)
    return out


def setting_label(row: Mapping[str, Any], keys: Sequence[str] = ()) -> str:
    """``iid``, or ``dirichlet`` with its concentration (``dirichlet alpha=0.1``): the data
    setting a row was run in, then ``key=value`` for each of ``keys`` (e.g. ``byzantine``,
    to keep grids of different f apart; a missing value reads ``-``). A row without
    ``alpha`` is labelled by its partition alone."""
    partition = str(row.get("partition"))
    alpha = row.get("alpha")
    label = partition
    if partition == "dirichlet" and alpha not in (None, ""):
        label = f"dirichlet alpha={float(alpha):g}"
    extra = [f"{k}={row.get(k) if row.get(k) not in (None, '') else '-'}" for k in keys]
    return " ".join([label, *extra])


def _setting_order(row: Mapping[str, Any], label: str) -> tuple[int, float, str]:
    """IID (and any other partition) first, then Dirichlet from the mildest (largest alpha)
    down; ``label`` (the setting's full label) breaks ties."""
    alpha = row.get("alpha")
    if row.get("partition") != "dirichlet" or alpha in (None, ""):
        return (0, 0.0, label)
    return (1, -float(alpha), label)


def worst_case_table(
    rows: Sequence[Mapping[str, Any]],
    metric: str = "last5_accuracy",
    keys: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Per (setting, rule): every attack's mean over seeds, and the worst attack's mean,
    95 % Student-t CI and seed count (``attack`` names it). Attack ``none`` is not an
    attack: it is reported as ``clean``. The setting is the data partition, with the
    Dirichlet concentration and ``keys`` (:func:`setting_label`), so a grid over several
    alphas, or grids of different f, keep them apart."""
    groups: dict[tuple[str, str], dict[str, list[float]]] = {}
    order: dict[str, tuple[int, float, str]] = {}
    for r in rows:
        v = r.get(metric)
        if v is None:
            continue
        label = setting_label(r, keys)
        order.setdefault(label, _setting_order(r, label))
        key = (label, str(r.get("rule")))
        groups.setdefault(key, {}).setdefault(str(r.get("attack")), []).append(float(v))
    out = []
    for (setting, rule), by_attack in sorted(
        groups.items(), key=lambda item: (order[item[0][0]], item[0][1])
    ):
        stats = {a: describe(vals) for a, vals in by_attack.items()}
        attacked = {a: s for a, s in stats.items() if a != "none"}
        if not attacked:
            continue
        worst = min(attacked, key=lambda a: attacked[a].mean)
        w = attacked[worst]
        out.append(
            {
                "setting": setting,
                "partition": setting.split(" ", 1)[0],
                "rule": rule,
                "clean": stats["none"].mean if "none" in stats else None,
                "worst_attack": worst,
                "worst_mean": w.mean,
                "worst_ci95": w.ci95,
                "worst_n": w.n,
                "attacks": len(attacked),
                "min_seeds": min(st.n for st in stats.values()),
            }
        )
    return out
