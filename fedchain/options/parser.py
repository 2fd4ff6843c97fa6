"""The ``fedchain`` argument parser: every command's options, their help and defaults.

One parser serves the command line (:mod:`fedchain.cli`), the control panel's forms and its
pre-flight checks (:mod:`fedchain.dashboard`), so both read the same options.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

DEMO_EPILOG = """\
examples:
  fedchain demo                                   # 10 clients, 4 aggregators, 5 rounds, FedAvg
  fedchain demo --rule median --rounds 3
  fedchain demo --partition dirichlet --alpha 0.3 --model cnn
  fedchain demo --rpc-url http://127.0.0.1:8545   # any Ethereum JSON-RPC node (e.g. anvil)
  fedchain demo --privacy ldp --target-epsilon 8  # local DP, noise derived from the budget
  fedchain demo --privacy ddp+secagg --target-epsilon 4 --clients 20  # recommended privacy
  fedchain demo --privacy he --clients 5          # Paillier: only the key holder decrypts the sum

outputs: RUN_DIR/summary.json (config, rounds finalized, final accuracy, gas per operation,
timings) and RUN_DIR/rounds.jsonl (one JSON record per finalized round); the content store
lives in RUN_DIR/store unless --store is given. Exit status 0 when every round finalized.
"""


def _rule_param(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def _add_backend_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument(
        "--backend",
        choices=["embedded", "real"],
        default="embedded",
        help="embedded: in-process chain and on-disk store (default); real: start a local "
        "anvil and IPFS daemon for this command (needs scripts/install_tools.sh)",
    )


def _model_defaults_text() -> str:
    from clients.training import MODEL_TRAINING

    return "; ".join(
        f"{m} {t.epochs} epochs, batch {t.batch_size}, lr {t.lr}, momentum {t.momentum}"
        for m, t in MODEL_TRAINING.items()
    )


def _add_demo_options(p: argparse.ArgumentParser) -> None:
    from fedchain.sim.runner import DemoConfig

    d = DemoConfig()
    g = p.add_argument_group("federation")
    g.add_argument(
        "--clients", type=int, default=d.clients, help="number of FL clients (%(default)s)"
    )
    g.add_argument(
        "--aggregators",
        type=int,
        default=d.aggregators,
        help="number of aggregator nodes in the committee (%(default)s)",
    )
    g.add_argument("--rounds", type=int, default=d.rounds, help="training rounds (%(default)s)")
    g.add_argument(
        "--min-updates",
        type=int,
        default=None,
        help="updates needed before a round can close (default: all clients)",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="seed for data split, model init, client shuffling, rotation (%(default)s)",
    )
    g = p.add_argument_group("data and model")
    g.add_argument(
        "--dataset",
        default=d.dataset,
        help="digits (bundled with scikit-learn), synthetic, mixture (a Gaussian-mixture task "
        "with 100 samples per client, for many clients), or mnist (local IDX files, see "
        "--data-path) (%(default)s)",
    )
    g.add_argument(
        "--data-path",
        default=None,
        metavar="DIR",
        help="directory of the four MNIST-format IDX files for --dataset mnist (default: "
        "$FEDCHAIN_MNIST_PATH)",
    )
    g.add_argument(
        "--partition",
        default=d.partition,
        choices=["iid", "dirichlet", "shards"],
        help="how training data is split among clients (%(default)s)",
    )
    g.add_argument(
        "--alpha",
        type=float,
        default=d.alpha,
        help="Dirichlet concentration for --partition dirichlet; smaller is more "
        "skewed (%(default)s)",
    )
    g.add_argument(
        "--model",
        default=d.model,
        choices=["logreg", "mlp", "mlp-wide", "cnn"],
        help="client model architecture; mlp-wide has 10.5 M parameters (%(default)s)",
    )
    g = p.add_argument_group(
        "local training",
        "defaults depend on --model: " + _model_defaults_text(),
    )
    g.add_argument("--epochs", type=int, default=d.epochs, help="local epochs per round")
    g.add_argument("--batch-size", type=int, default=d.batch_size, help="local mini-batch size")
    g.add_argument("--lr", type=float, default=d.lr, help="client SGD learning rate")
    g.add_argument("--momentum", type=float, default=d.momentum, help="client SGD momentum")
    g.add_argument(
        "--prox-mu",
        type=float,
        default=d.prox_mu,
        help="FedProx proximal coefficient on clients; 0 = plain FedAvg (%(default)s)",
    )
    g = p.add_argument_group("aggregation")
    g.add_argument(
        "--rule",
        default=d.rule,
        help="aggregation rule by name (see 'fedchain rules') (%(default)s)",
    )
    g.add_argument(
        "--rule-param",
        type=_rule_param,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="rule parameter, repeatable, e.g. --rule-param f=1",
    )
    g.add_argument(
        "--frac-bits",
        type=int,
        default=d.frac_bits,
        help="fixed-point fractional bits of the canonical arithmetic (%(default)s)",
    )
    g.add_argument(
        "--clip",
        type=float,
        default=d.clip,
        help="largest |value| of an update coordinate; larger ones saturate (%(default)s)",
    )
    g.add_argument(
        "--stop-norm",
        type=float,
        default=d.stop_norm,
        help="verifiable stopping rule: end the task early once the global model's update "
        "norm (fixed point, re-executed by every aggregator) stays below this for "
        "--stop-patience rounds (default: off)",
    )
    g.add_argument(
        "--stop-patience",
        type=int,
        default=d.stop_patience,
        help="consecutive quiet rounds the stopping rule waits for (%(default)s)",
    )
    g = p.add_argument_group(
        "privacy (docs/privacy.md)",
        "ldp: each client clips and perturbs its update. secagg: clients mask their updates "
        "in the 32-bit fixed-point ring (pairwise X25519 masks, Shamir-shared for dropouts); "
        "aggregators unmask only the sum. he: clients encrypt under the task key holder's "
        "Paillier key; the key holder publishes a verifiable decryption of the sum. ddp+secagg "
        "(recommended) and ddp+he add distributed DP: each client adds its Skellam share of "
        "the noise. Every aggregator still re-executes the round byte for byte from published "
        "material. The parameters go into the task manifest (hence ruleParamsHash); epsilon "
        "after every round (dp-accounting) goes to rounds.jsonl and summary.json.",
    )
    g.add_argument(
        "--privacy",
        default=d.privacy,
        metavar="MODE",
        help="none, ldp, secagg, ddp+secagg, he or ddp+he (components join with '+'; "
        "nonsense combinations are refused with the reason) (%(default)s)",
    )
    g.add_argument(
        "--dp-mechanism",
        default=d.dp_mechanism,
        choices=["gaussian", "laplace"],
        help="local noise: gaussian (L2 clip) or laplace (L1 clip); distributed DP uses "
        "Skellam, the integer analogue of gaussian (%(default)s)",
    )
    g.add_argument(
        "--target-epsilon",
        type=float,
        default=None,
        help="privacy budget over all rounds; without --noise-multiplier the noise is derived "
        "from it for --rounds rounds",
    )
    g.add_argument(
        "--target-delta",
        type=float,
        default=d.target_delta,
        help="delta at which epsilon is reported (%(default)s)",
    )
    g.add_argument(
        "--noise-multiplier",
        type=float,
        default=None,
        help="noise std (Gaussian), scale (Laplace) or the sum's Skellam std (ddp) divided by "
        "the sensitivity (2 x clip-norm; ddp: 2 x ddp-scale) (default: derived from "
        "--target-epsilon)",
    )
    g.add_argument(
        "--clip-norm",
        type=float,
        default=d.clip_norm,
        help="each client's update is clipped to this L2 (gaussian, ddp) or L1 (laplace) norm "
        "before noise; the initial clip norm with --adaptive-clip (%(default)s)",
    )
    g.add_argument(
        "--adaptive-clip",
        action="store_true",
        default=d.adaptive_clip,
        help="set each round's clip norm to track --clip-quantile of the update norms (Andrew "
        "et al. 2021): clients release an epsilon-DP bit (exponential mechanism), the "
        "aggregation publishes the next clip norm; the accountant charges the bits",
    )
    g.add_argument(
        "--clip-quantile",
        type=float,
        default=d.clip_quantile,
        help="target quantile of the update norms (%(default)s)",
    )
    g.add_argument(
        "--clip-learning-rate",
        type=float,
        default=d.clip_learning_rate,
        help="geometric step of the clip norm per round (%(default)s)",
    )
    g.add_argument(
        "--clip-bit-epsilon",
        type=float,
        default=d.clip_bit_epsilon,
        help="epsilon of each client's clip bit per round (%(default)s)",
    )
    g.add_argument(
        "--dropout-fraction",
        type=float,
        default=d.dropout_fraction,
        help="secagg/he: fraction of clients a round survives losing; the Shamir threshold is "
        "ceil((1 - f) x clients), and distributed DP sizes each client's noise share so the "
        "survivors' sum still carries the full noise (%(default)s)",
    )
    g.add_argument(
        "--ddp-scale",
        type=int,
        default=d.ddp_scale,
        help="distributed DP: integer L2 bound of one client's clipped update in the 32-bit "
        "ring; too large for --clients is refused (%(default)s)",
    )
    g.add_argument(
        "--reveal-window",
        type=int,
        default=d.reveal_window,
        help="secagg/he: blocks of the reveal phase between attestation and aggregation, when "
        "clients reveal shares (the HE key holder its decryption) (%(default)s)",
    )
    g.add_argument(
        "--sample-counts",
        choices=["exact", "bucket", "hidden"],
        default=d.sample_counts,
        help="secagg/he: the numSamples each client registers on-chain (public forever; the "
        "sum modes weigh every update 1): exact, bucket (next power of two) or hidden (1) "
        "(%(default)s)",
    )
    g.add_argument(
        "--mask-graph",
        choices=["auto", "full", "harary"],
        default=d.mask_graph,
        help="secagg: whom a client masks with and shares its secrets among: full (every "
        "client, Bonawitz et al.), harary (SecAgg+: a random Harary graph from on-chain "
        "randomness, Bell et al.), auto (harary from 200 clients on) (%(default)s)",
    )
    g.add_argument(
        "--graph-degree",
        type=int,
        default=d.graph_degree,
        help="secagg with --mask-graph harary: neighbours per client (0: from the parameter "
        "finder) (%(default)s)",
    )
    g.add_argument(
        "--graph-threshold",
        type=int,
        default=d.graph_threshold,
        help="secagg with --mask-graph harary: Shamir threshold among a client's neighbours "
        "(0: from the parameter finder) (%(default)s)",
    )
    g.add_argument(
        "--corrupt-fraction",
        type=float,
        default=d.corrupt_fraction,
        help="secagg: fraction of clients assumed corrupt (colluding with an aggregator); "
        "SecAgg+'s parameter finder sizes k and t for it, and the threshold must exceed what "
        "they hold (%(default)s)",
    )
    g.add_argument(
        "--he-threshold",
        type=int,
        default=d.he_threshold,
        help="he: threshold decryption by t of the aggregators' decryptor identities (t-of-n "
        "Paillier from a trusted dealer at deployment) instead of one key holder; 0: key "
        "holder (%(default)s)",
    )
    g.add_argument(
        "--he-key-bits",
        type=int,
        default=d.he_key_bits,
        help="he: Paillier modulus size of the task key holder's key (%(default)s)",
    )
    g.add_argument(
        "--sample-rate",
        type=float,
        default=d.sample_rate,
        help="probability a client takes part in a round (its own private coin); it amplifies "
        "privacy only against observers who cannot see who took part, so reported epsilon "
        "ignores it (needs --min-updates when < 1) (%(default)s)",
    )
    g.add_argument(
        "--budget-policy",
        default=d.budget_policy,
        choices=["refuse", "stop"],
        help="when --noise-multiplier and --target-epsilon overspend the rounds: refuse the "
        "task before it starts, or run the rounds the budget affords and stop (%(default)s)",
    )
    g = p.add_argument_group("protocol (windows are in blocks)")
    g.add_argument(
        "--collect-window",
        type=int,
        default=d.collect_window,
        help="blocks after which a round with >= min-updates closes (%(default)s)",
    )
    g.add_argument(
        "--submit-timeout",
        type=int,
        default=d.submit_timeout,
        help="blocks the chosen aggregator has to submit (%(default)s)",
    )
    g.add_argument(
        "--challenge-window",
        type=int,
        default=d.challenge_window,
        help="blocks during which a submitted aggregate can be challenged (%(default)s)",
    )
    g.add_argument(
        "--attest-window",
        type=int,
        default=d.attest_window,
        help="blocks after collection closes during which aggregators attest which updates "
        "they hold; the round includes those attested by f + 1 (0: off) (%(default)s)",
    )
    g.add_argument(
        "--dispute-timeout",
        type=int,
        default=d.dispute_timeout,
        help="blocks after a challenge until an unresolved dispute discards the aggregate "
        "(%(default)s)",
    )
    g.add_argument(
        "--abort-timeout",
        type=int,
        default=d.abort_timeout,
        help="blocks without progress after which the aggregator nodes end the task "
        "(abortTask; every stake comes back) (%(default)s)",
    )
    g.add_argument(
        "--leave-after-blocks",
        type=int,
        default=d.leave_after_blocks,
        help="an aggregator node leaves the committee when the task was not started this "
        "many blocks after deployment (0: never) (%(default)s)",
    )
    g.add_argument(
        "--client-deposit",
        type=int,
        default=d.client_deposit,
        help="wei each client locks when it registers, returned after the task (0: none) "
        "(%(default)s)",
    )
    g.add_argument(
        "--min-collection-blocks",
        type=int,
        default=d.min_collection_blocks,
        help="blocks over which a round opens its update slots progressively, so one batch "
        "at round open cannot take them all (0: all at once) (%(default)s)",
    )
    g.add_argument(
        "--rotation",
        default=d.rotation,
        choices=["round-robin", "random"],
        help="how the contract picks each round's aggregator (%(default)s)",
    )
    g.add_argument(
        "--dispute",
        default=d.dispute,
        choices=["pbft", "fault-proof", "both"],
        help="how a challenged aggregate is settled: the committee's PBFT vote, the one-step "
        "fault proof (one honest aggregator suffices; FedAvg, FedProx, Median, Trimmed mean, "
        "--privacy none or ldp), or both (docs/fault-proof.md) (%(default)s)",
    )
    g = p.add_argument_group("backends and output")
    _add_backend_option(g)
    g.add_argument(
        "--rpc-url",
        default=None,
        help="Ethereum JSON-RPC URL; default: in-process eth-tester chain",
    )
    g.add_argument(
        "--funding-key",
        default=None,
        help=argparse.SUPPRESS,  # refused with the reason: argv is visible to every user
    )
    g.add_argument(
        "--funding-key-file",
        default=None,
        metavar="FILE",
        help="a file (mode 0600) holding the private key that funds the run's accounts on "
        "--rpc-url (default: $FEDCHAIN_FUNDING_KEY, else anvil's first dev key); a key is "
        "never taken on the command line",
    )
    g.add_argument(
        "--store",
        default=None,
        help="content store: a directory, or ipfs:<api multiaddr> for a real IPFS "
        "node (default: RUN_DIR/store)",
    )
    g.add_argument("--out", default=d.out, help="parent directory of run directories (%(default)s)")
    g.add_argument("--name", default=d.name, help="run directory name suffix (%(default)s)")
    g.add_argument("--quiet", action="store_true", help="no progress output")
    g.add_argument("--json", action="store_true", help="print summary.json to stdout at the end")


def _add_engine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training engine (where the in-process clients train)")
    g.add_argument(
        "--engine",
        choices=["sequential", "ray"],
        default=None,
        help="sequential: one client after another in this process (default); ray: Ray "
        "tasks on a local Ray instance started for the run, or on --ray-address",
    )
    g.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="join an existing Ray cluster (its head node's address) instead of starting a "
        "local instance; every node needs this project installed",
    )
    g.add_argument(
        "--ray-cpus",
        type=int,
        default=None,
        metavar="N",
        help="CPUs of the local Ray instance (default: all of this machine's)",
    )
    g.add_argument(
        "--update-batch",
        type=int,
        default=None,
        metavar="N",
        help="the in-process clients sign their update records and the fleet relays them in "
        "submitUpdates batches of N (default 100; 0: every client sends its own submitUpdate)",
    )


def _add_wan_options(tn: argparse.ArgumentParser) -> None:
    wan = tn.add_argument_group(
        "WAN emulation of the PBFT links (user-space proxies, see 'fedchain netem --help')"
    )
    wan.add_argument("--pbft-latency", default="0ms", help="one-way delay, e.g. 150ms")
    wan.add_argument("--pbft-jitter", default="0ms", help="uniform ± jitter, e.g. 30ms")
    wan.add_argument("--pbft-loss", default="0", help="fraction of messages lost, e.g. 0.05")
    wan.add_argument(
        "--pbft-loss-mode",
        default="drop",
        help="drop (message lost), reset (connection reset) or retransmit (late, TCP-like)",
    )


def _add_netem_parser(sub: Any) -> None:
    from fedchain.testnet.netem import add_arguments

    netem = sub.add_parser(
        "netem",
        help="a delaying, dropping TCP proxy for PBFT links (WAN emulation on loopback)",
        description="Relay PBFT frames from 127.0.0.1:PORT to a loopback target, holding each "
        "for a one-way latency plus uniform jitter and losing a fraction of them (whole "
        "messages; or connection resets; or TCP-like late delivery). Runs in the foreground "
        "until SIGTERM or --max-seconds, then prints its counters as JSON. Never changes the "
        "machine's network settings.",
        epilog="example: fedchain netem --target 127.0.0.1:9001 --listen-port 9000 "
        "--latency 150ms --jitter 30ms --loss 0.05 --max-seconds 600",
    )
    add_arguments(netem)


def _add_dashboard_parser(sub: Any) -> None:
    dash = sub.add_parser(
        "dashboard",
        help="a local web dashboard: live runs, testnets, scenario sets, a control panel",
        description="Serve a web dashboard on 127.0.0.1 for the runs under --runs: every demo, "
        "scenario run, scenario set, testnet and experiment there; a live view of a run or "
        "testnet (timeline of rounds and attempts, the contract's chosen aggregator, "
        "submissions, challenges, PBFT votes and view changes, slashing, stakes and bonds, "
        "accuracy and loss, gas, privacy budget), updated by server-sent events; and a "
        "control panel that starts a demo, a scenario or an experiment as a 'fedchain' "
        "subprocess, stops it, and kills or restarts testnet nodes. Everything it serves "
        "ships in the package: it works offline. Stop it with Ctrl-C: it stops the "
        "processes it started.",
        epilog="example: fedchain dashboard --runs runs   # then open the URL it prints",
    )
    dash.add_argument(
        "--runs", default="runs", metavar="DIR", help="directory of runs to show (%(default)s)"
    )
    dash.add_argument(
        "--host",
        default="127.0.0.1",
        help="loopback address to bind: 127.0.0.1 (default), localhost, ::1 or another "
        "127.x.y.z; the dashboard starts processes, so it never listens on other interfaces",
    )
    dash.add_argument(
        "--port",
        type=int,
        default=8765,
        help="TCP port (%(default)s; if it is taken, a free one is used; 0: any free port)",
    )
    dash.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        metavar="S",
        help="stop after S seconds (default: run until Ctrl-C)",
    )
    dash.add_argument(
        "--job-timeout",
        type=float,
        default=3600.0,
        metavar="S",
        help="a process started from the control panel is stopped after S seconds (%(default)s)",
    )
    dash.add_argument(
        "--max-jobs",
        type=int,
        default=2,
        metavar="N",
        help="processes the control panel runs at once (%(default)s)",
    )
    dash.add_argument(
        "--max-streams",
        type=int,
        default=32,
        metavar="N",
        help="live connections (pages open in tabs) served at once; more get 503 and retry "
        "(%(default)s)",
    )


EXPERIMENT_EPILOG = """\
builtin experiments:
  privacy     final accuracy against epsilon: local DP (Laplace, Gaussian) and
              distributed DP with secure aggregation
  robustness  Byzantine clients (sign flip, scaling, Gaussian, label flip, ALIE, IPM
              eps 0.1 and 10) x rules (FedAvg, Median, Trimmed mean, Krum, Multi-Krum,
              Bulyan) at 20 % Byzantine clients: final-accuracy heatmap, accuracy over rounds
  collusion   FedAvg under IPM eps 10: the papers' collusion model vs sequential crafting
  clients     accuracy, wall time per round and gas per round against K clients
  recovery    gradient inversion (DLG + iDLG) by an aggregator, per defence: PSNR, SSIM
  models      each model's federated accuracy next to its centralized baseline
 the robustness study on Fashion-MNIST (docs/robustness.md):
  robustness-fmnist        headline: 12 rules (6 alone, 6 after NNM) x 13 attacks,
                           IID and Dirichlet 0.1, 20 % Byzantine, 5 seeds (1,560 units)
  robustness-fmnist-alpha  the same at Dirichlet alpha 1 and 0.3 (sweep slice)
  robustness-fmnist-f10    the same at f = 10 % (sweep slice)
  robustness-fmnist-overf  rules told f = 30 % while 20 % are Byzantine (sweep slice)
  robustness-fmnist-sweep  the full factorial of the three slices (5,616 units)
  robustness-fmnist-val    hyperparameters on the validation split
  robustness-fmnist-tau    centred clipping's radius on the validation split
  robustness-fmnist-clip   the always-on +-4 saturation, ablated
  robustness-fmnist-probe  an early look at Dirichlet 0.1 (4 rules x 5 attacks)
  aggregators-fmnist       malicious aggregators: 10 behaviours, n = 4 and 7
  clients-control          K clients at a fixed total of 2,000 images, and centralized
  clients-centralized      the clients grid's data trained centrally (grows with K)
  privacy-controls         central DP (trusted aggregator) at the local-DP clip
  privacy-clip-only        clipping alone at the privacy experiment's clips
  recovery-real            data recovery against the updates clients really send

examples:
  fedchain experiment robustness --quick          # the tiny CI grid (about a minute)
  fedchain experiment robustness --jobs 2         # the full grid; re-run to resume
  fedchain experiment my-grid.toml --seeds 5      # a custom grid (format: docs/experiments.md)

outputs (OUT, default runs/experiments/NAME[-quick]): experiment.json, cells.csv,
summary.md, figures/*.png, cells/<cell-id>/seed-<s>/ (each run's directory and result.json).
Exit status: 0 finished, 130 interrupted (re-run the same command to resume), 2 bad input.
"""


def _add_experiment_parser(sub: Any) -> None:
    ex = sub.add_parser(
        "experiment",
        help="run an experiment grid over seeds (CSV, figures, summary; resumable)",
        description="Run a grid of cells (each a fedchain run, a centralized baseline or a "
        "gradient-inversion attack) over several seeds, with progress and ETA. Finished "
        "cells are kept: an interrupted experiment resumes where it stopped when the same "
        "command is run again. Writes cells.csv (one row per cell and seed), figures "
        "(matplotlib PNG with 95 % confidence intervals) and summary.md (mean ± std, 95 % "
        "CI, key findings).",
        epilog=EXPERIMENT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ex.add_argument("experiment", metavar="NAME|FILE.toml", help="a builtin name or a grid file")
    ex.add_argument("--quick", action="store_true", help="the builtin's tiny grid (for CI)")
    ex.add_argument(
        "--seeds",
        default=None,
        metavar="N|S1,S2,...",
        help="a count (3 = seeds 0, 1, 2) or a comma list; overrides the grid's seeds",
    )
    ex.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="the experiment's run directory (default runs/experiments/NAME[-quick]); an "
        "existing one with the same grid is resumed",
    )
    ex.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="units run in parallel worker processes (%(default)s); each unit is "
        "single-threaded, so more than the free cores only adds contention",
    )
    ex.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: write cells.csv, figures and summary.md from the units finished so "
        "far (e.g. of an interrupted grid)",
    )
    ex.add_argument("--quiet", action="store_true", help="no progress output")
    ex.add_argument(
        "--json", action="store_true", help="print per-cell statistics as JSON at the end"
    )


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (naming option and value), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="fedchain",
        description="Blockchain-backed multi-aggregator federated learning: rounds registered "
        "on a Solidity contract, aggregates re-executed bit-exactly by every aggregator, "
        "challengeable inside an optimistic-rollup window.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="run a complete federated training on a local chain",
        description="Deploy a task contract, register clients and aggregators, and run "
        "federated rounds end to end: clients train and register updates, the aggregator the "
        "contract chose aggregates and submits, the others re-execute and verify, the "
        "challenge window passes and the round is finalized. Runs on embedded defaults (an "
        "in-process chain and an on-disk content store): no servers, no network.",
        epilog=DEMO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_demo_options(demo)
    _add_engine_options(demo)
    run = sub.add_parser(
        "run",
        help="run scenario files (faulty aggregators, malicious clients)",
        description="Run one or more TOML scenario files: a demo configuration plus which "
        "aggregators misbehave (noise, scaling, sign flip, stale, wrong rule, dropped or "
        "substituted updates, withholding, unavailable data, frivolous challenges, lying or "
        "equivocating PBFT votes, collusion, crashes) and which clients attack. Each run "
        "writes the demo's run directory plus fault records (who was faulty, who challenged, "
        "the verdict, view changes, blocks and seconds to detection, dispute gas) and "
        "verdict.json. See scenarios/ for the shipped files and fedchain/sim/scenario.py for "
        "the format.",
        epilog="exit status: 0 if every scenario met its [expect] table, 1 otherwise, "
        "2 on invalid input.",
    )
    run.add_argument("scenarios", nargs="+", metavar="SCENARIO.toml")
    run.add_argument(
        "--compare-honest",
        action="store_true",
        help="also run each scenario's all-honest twin and compare final models byte for byte",
    )
    run.add_argument("--out", default="runs", help="parent directory of run directories")
    run.add_argument("--seed", type=int, default=None, help="override every scenario's seed")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    _add_backend_option(run)
    _add_engine_options(run)
    run.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    tn = sub.add_parser(
        "testnet",
        help="a local testnet on real parts: anvil, an IPFS daemon, one process per node",
        description="Manage a local testnet in DIR: 'up' starts anvil and an IPFS daemon "
        "(loopback only, data under DIR), creates the task exactly as 'demo' does, and "
        "launches every aggregator and client as its own OS process with its own key; "
        "'status' shows chain progress and live processes; 'wait' blocks until the task "
        "completes; 'kill NODE' sends SIGKILL to one node and 'start NODE' restarts it "
        "(it resumes from chain and IPFS state); 'restart-chain' stops anvil (it saves its "
        "chain) and starts it again from that state (nodes reconnect and resume); 'down' "
        "stops everything by PID.",
        epilog="example: fedchain testnet up --dir runs/testnet --clients 4 --rounds 3 --wait",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tn.add_argument(
        "action", choices=["up", "status", "wait", "kill", "start", "restart-chain", "down"]
    )
    tn.add_argument("node", nargs="?", help="node name for kill/start, e.g. aggregator-1")
    tn.add_argument("--dir", default="runs/testnet", help="testnet directory (%(default)s)")
    tn.add_argument(
        "--no-ipfs", action="store_true", help="share a store directory instead of an IPFS daemon"
    )
    tn.add_argument(
        "--block-time",
        type=float,
        default=1.0,
        help="anvil interval mining in seconds; windows are counted in blocks (%(default)s)",
    )
    tn.add_argument("--wait", action="store_true", help="with up: wait for completion")
    tn.add_argument(
        "--scenario",
        default=None,
        metavar="SCENARIO.toml",
        help="with up: take the run options and aggregator behaviours from a "
        "scenario file (each faulty aggregator is its own process)",
    )
    tn.add_argument(
        "--timeout", type=float, default=900.0, help="seconds 'wait' waits (%(default)s)"
    )
    _add_wan_options(tn)
    _add_demo_options(tn)
    _add_netem_parser(sub)
    report = sub.add_parser(
        "report",
        help="tabulate scenario runs (the fault-detection table)",
        description="Read run directories (or folders of them) and print the detection "
        "table: behaviour x n x f -> faulty aggregates, rejected, false rejections, faulty "
        "models finalized, view changes, blocks and seconds to detection, dispute gas, and "
        "the outcome (safe / LIVENESS LOST / SAFETY VIOLATED).",
    )
    report.add_argument("paths", nargs="+", metavar="RUN_DIR")
    report.add_argument("--json", action="store_true", help="rows as JSON instead of markdown")
    report.add_argument(
        "--html",
        action="store_true",
        help="write one self-contained HTML file (inline CSS and SVG charts, no external "
        "references) for the run or scenario set RUN_DIR: its timeline, rounds, disputes, "
        "stakes, curves, gas (and the detection table of a set)",
    )
    report.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="with --html: where to write it (default RUN_DIR/report.html; '-' for stdout)",
    )
    _add_dashboard_parser(sub)
    status = sub.add_parser(
        "status",
        help="show a deployed task's state (config, committee, rounds) over JSON-RPC",
        description="Read a deployed fedchain task's views over any Ethereum JSON-RPC node: "
        "its configuration, the committee's stakes and slashing, the current round and phase, "
        "and every finalized round's digest. Read-only: sends no transaction.",
    )
    status.add_argument("--rpc-url", required=True, help="Ethereum JSON-RPC URL, e.g. anvil's")
    status.add_argument("--task", required=True, metavar="ADDRESS", help="the task's address")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    _add_experiment_parser(sub)
    rules = sub.add_parser("rules", help="list the aggregation rules and their parameters")
    rules.add_argument("--json", action="store_true", help="machine-readable output")
    return parser
