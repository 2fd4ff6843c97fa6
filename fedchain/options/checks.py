"""What every ``fedchain`` command checks before doing any work, and the configuration it
builds from its options (shared by the command line and the dashboard's control panel)."""

from __future__ import annotations

import argparse
import contextlib
import io
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedchain.options.parser import build_parser
from fedchain.options.values import funding_key
from protocol.errors import ConfigError, FedchainError


def engine_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The engine options given on the command line (--ray-address implies --engine ray)."""
    out: dict[str, Any] = {}
    engine = getattr(args, "engine", None)
    if engine is None and getattr(args, "ray_address", None) is not None:
        engine = "ray"
    if engine is not None:
        out["engine"] = engine
    for key in ("ray_address", "ray_cpus", "update_batch"):
        if getattr(args, key, None) is not None:
            out[key] = getattr(args, key)
    return out


def demo_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Any:
    from fedchain.sim.runner import DemoConfig

    return DemoConfig(
        clients=args.clients,
        aggregators=args.aggregators,
        rounds=args.rounds,
        dataset=args.dataset,
        partition=args.partition,
        alpha=args.alpha,
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        momentum=args.momentum,
        prox_mu=args.prox_mu,
        rule=args.rule,
        rule_params=dict(args.rule_param),
        frac_bits=args.frac_bits,
        clip=args.clip,
        stop_norm=args.stop_norm,
        stop_patience=args.stop_patience,
        min_updates=args.min_updates,
        collect_window=args.collect_window,
        submit_timeout=args.submit_timeout,
        challenge_window=args.challenge_window,
        attest_window=args.attest_window,
        dispute_timeout=args.dispute_timeout,
        client_deposit=args.client_deposit,
        abort_timeout=args.abort_timeout,
        leave_after_blocks=args.leave_after_blocks,
        min_collection_blocks=args.min_collection_blocks,
        rotation=args.rotation,
        dispute=args.dispute,
        seed=args.seed,
        out=args.out,
        name=args.name,
        rpc_url=args.rpc_url,
        funding_key=funding_key(args.funding_key, args.funding_key_file, environ),
        store=args.store,
        data_path=args.data_path,
        privacy=args.privacy,
        dp_mechanism=args.dp_mechanism,
        target_epsilon=args.target_epsilon,
        target_delta=args.target_delta,
        noise_multiplier=args.noise_multiplier,
        clip_norm=args.clip_norm,
        sample_rate=args.sample_rate,
        budget_policy=args.budget_policy,
        adaptive_clip=args.adaptive_clip,
        clip_quantile=args.clip_quantile,
        clip_learning_rate=args.clip_learning_rate,
        clip_bit_epsilon=args.clip_bit_epsilon,
        dropout_fraction=args.dropout_fraction,
        ddp_scale=args.ddp_scale,
        he_key_bits=args.he_key_bits,
        he_threshold=args.he_threshold,
        reveal_window=args.reveal_window,
        sample_counts=args.sample_counts,
        mask_graph=args.mask_graph,
        graph_degree=args.graph_degree,
        graph_threshold=args.graph_threshold,
        corrupt_fraction=args.corrupt_fraction,
        **engine_overrides(args),
    )


def preflight_demo(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """What ``fedchain demo`` refuses before any work (the run configuration's checks)."""
    demo_config(args, environ).validate()


def preflight_run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """What ``fedchain run`` refuses before any work: every scenario file, validated with
    the command line's overrides (``--seed``, the engine options) applied as the run will."""
    from dataclasses import replace

    from fedchain.sim.scenario import load_scenario

    overrides = engine_overrides(args)
    if args.seed is not None:
        overrides["seed"] = args.seed
    for path in args.scenarios:
        scenario = load_scenario(path)
        if overrides:
            replace(scenario.config, **overrides).validate()


def experiment_spec(args: argparse.Namespace) -> Any:
    """The grid ``fedchain experiment`` would run (a builtin or a TOML file, --quick and
    --seeds applied); ``ConfigError`` naming the bad value."""
    from dataclasses import replace

    from fedchain.experiments.builtin import BUILTINS, builtin
    from fedchain.experiments.grid import load_grid, parse_seeds

    target = args.experiment
    if target in BUILTINS:
        spec = builtin(target, quick=args.quick)
    elif target.endswith(".toml") or Path(target).exists():
        if args.quick:
            raise ConfigError(f"--quick: only for the builtin experiments {sorted(BUILTINS)}")
        spec = load_grid(target)
    else:
        raise ConfigError(
            f"experiment {target!r}: neither a builtin ({', '.join(BUILTINS)}) nor a .toml file"
        )
    if args.seeds is not None:
        spec = replace(spec, seeds=parse_seeds(args.seeds))
    return spec


def experiment_out(args: argparse.Namespace, spec: Any, runs: str | Path = "runs") -> str:
    """The experiment's run directory: ``--out``, else ``RUNS/experiments/NAME[-quick]``."""
    if args.out:
        return str(args.out)
    return str(Path(runs) / "experiments" / (spec.name + ("-quick" if args.quick else "")))


def preflight_experiment(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> None:
    """What ``fedchain experiment`` refuses before any work: the grid (every cell's values),
    --seeds and --jobs."""
    from fedchain.experiments.execute import check_run

    check_run(experiment_spec(args), args.jobs)


def error_line(exc: BaseException) -> str | None:
    """The one line ``fedchain`` prints for bad input that raised ``exc`` (None: a bug)."""
    if isinstance(exc, FedchainError):
        return f"fedchain: error: {exc}"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"fedchain: error: {str(exc.filename)!r}: {exc.strerror}"
    return None  # not a bad path given by the user: a bug, shown whole


_PARSE_LOCK = threading.Lock()


def check_command(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """The error ``fedchain ARGV`` would stop with before doing any work, or None.

    ARGV is parsed exactly as on the command line, then the subcommand's pre-flight checks
    run (``preflight``: the run configuration, scenario files). The dashboard's control
    panel shows this line for bad form input, so it reads as the CLI's own message.
    ``environ`` is the environment the command would run with (its secrets: the funding
    key), by default this process's.
    """
    stderr = io.StringIO()
    with _PARSE_LOCK:  # argparse prints its one-line error to sys.stderr: capture it
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                args = build_parser().parse_args(list(argv))
        except SystemExit as exc:
            lines = stderr.getvalue().strip().splitlines()
            return lines[-1] if lines else f"fedchain: exit status {exc.code}"
    try:
        preflight(args, environ)
    except (FedchainError, OSError) as exc:
        line = error_line(exc)
        if line is None:
            raise
        return line
    return None


def preflight(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """The checks of ``args.command`` that run before any work (the CLI runs them first,
    and the control panel runs the same ones before it starts a process)."""
    check = PREFLIGHT.get(str(getattr(args, "command", "")))
    if check is not None:
        check(args, environ)


def preflight_testnet(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """What ``fedchain testnet up`` refuses before starting anything (the run configuration)."""
    if args.action != "up":
        return
    if args.scenario:
        from fedchain.sim.scenario import load_scenario

        load_scenario(args.scenario)
    else:
        demo_config(args, environ).validate()


PREFLIGHT: dict[str, Callable[[argparse.Namespace, Mapping[str, str] | None], None]] = {
    "demo": preflight_demo,
    "run": preflight_run,
    "experiment": preflight_experiment,
    "testnet": preflight_testnet,
}
