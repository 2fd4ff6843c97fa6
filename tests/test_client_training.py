"""Client models and local training (clients/models.py, clients/training.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from clients.data import Dataset, load_digits, make_synthetic, partition_iid
from clients.models import build_model, get_params, num_parameters, param_spec, set_params
from clients.training import (
    RECOMMENDED_DIGITS_MLP,
    TrainConfig,
    apply_delta,
    compute_delta,
    derive_seed,
    deterministic_torch,
    evaluate,
    params_digest,
    train_local,
)
from protocol.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def digits() -> tuple[Dataset, Dataset]:
    return load_digits(test_fraction=0.2, seed=0)


@pytest.fixture(scope="module")
def shard(digits: tuple[Dataset, Dataset]) -> Dataset:
    """One IID client's share (1/10) of the digits training split."""
    train, _ = digits
    return train.subset(partition_iid(len(train), 10, seed=0)[0])


def l2(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum((a[k].astype(np.float64) - b[k]) ** 2)) for k in a))


# --- models -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shape", "expected"),
    [
        ("logreg", (1, 8, 8), [("fc.weight", (10, 64)), ("fc.bias", (10,))]),
        (
            "mlp",
            (1, 8, 8),
            [
                ("fc1.weight", (64, 64)),
                ("fc1.bias", (64,)),
                ("fc2.weight", (10, 64)),
                ("fc2.bias", (10,)),
            ],
        ),
        ("mlp", (20,), [("fc1.weight", (64, 20)), ("fc1.bias", (64,))]),
        (
            "cnn",
            (1, 8, 8),
            [
                ("conv1.weight", (16, 1, 3, 3)),
                ("conv1.bias", (16,)),
                ("conv2.weight", (32, 16, 3, 3)),
                ("conv2.bias", (32,)),
                ("fc1.weight", (64, 128)),
            ],
        ),
        ("cnn", (1, 28, 28), [("conv1.weight", (16, 1, 3, 3))]),
    ],
)
def test_param_spec_shapes_and_forward(
    name: str, shape: tuple[int, ...], expected: list[tuple[str, tuple[int, ...]]]
) -> None:
    model = build_model(name, shape, 10, seed=0)
    spec = param_spec(model)
    assert spec[: len(expected)] == expected
    assert [n for n, _ in spec] == list(model.state_dict())
    assert num_parameters(spec) == sum(p.numel() for p in model.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model(torch.zeros((3, *shape))).shape == (3, 10)
    if name == "cnn" and shape == (1, 28, 28):
        assert dict(spec)["fc1.weight"] == (64, 32 * 7 * 7)


def test_build_model_is_seeded_and_leaves_global_rng_alone() -> None:
    state = torch.get_rng_state()
    a = get_params(build_model("cnn", (1, 8, 8), 10, seed=1))
    b = get_params(build_model("cnn", (1, 8, 8), 10, seed=1))
    c = get_params(build_model("cnn", (1, 8, 8), 10, seed=2))
    assert torch.equal(state, torch.get_rng_state())
    assert params_digest(a) == params_digest(b)
    assert params_digest(a) != params_digest(c)
    # PyTorch default init scale: |w| <= 1/sqrt(fan_in), and not degenerate.
    bound = 1 / math.sqrt(9)
    assert float(np.abs(a["conv1.weight"]).max()) <= bound
    assert float(a["conv1.weight"].std()) > bound / 4


def test_build_model_errors() -> None:
    with pytest.raises(ConfigError, match="unknown model"):
        build_model("vgg", (1, 8, 8), 10)
    with pytest.raises(ConfigError):
        build_model("cnn", (64,), 10)
    with pytest.raises(ConfigError):
        build_model("cnn", (1, 3, 3), 10)
    with pytest.raises(ConfigError, match="resnet"):
        build_model("resnet", (64,), 10)
    with pytest.raises(ConfigError):
        build_model("mlp", (0,), 10)
    with pytest.raises(ConfigError):
        build_model("mlp", (4,), 1)
    with pytest.raises(ConfigError):
        build_model("mlp", (4,), 3, hidden=0)


def test_get_set_round_trip_and_validation() -> None:
    model = build_model("mlp", (1, 8, 8), 10, seed=0)
    rng = np.random.default_rng(0)
    new = {n: rng.normal(size=s).astype(np.float32) for n, s in param_spec(model)}
    set_params(model, new)
    got = get_params(model)
    assert list(got) == [n for n, _ in param_spec(model)]
    for n in new:
        assert got[n].dtype == np.float32 and got[n].flags.c_contiguous
        np.testing.assert_array_equal(got[n], new[n])
    # Returned arrays are copies: mutating them does not touch the model.
    got["fc1.bias"][:] = 123.0
    assert float(model.state_dict()["fc1.bias"].max()) != 123.0
    before = params_digest(get_params(model))
    bad_cases: list[dict[str, np.ndarray]] = [
        {k: v for k, v in new.items() if k != "fc2.bias"},
        {**new, "extra": np.zeros(1, np.float32)},
        {**new, "fc2.bias": np.zeros(11, np.float32)},
        {**new, "fc2.bias": np.zeros(10, np.int64)},
    ]
    for bad in bad_cases:
        with pytest.raises(ConfigError):
            set_params(model, bad)
    assert params_digest(get_params(model)) == before, "failed set_params left model intact"
    set_params(model, {k: v.astype(np.float64) for k, v in new.items()})  # floats are cast
    assert params_digest(get_params(model)) == params_digest(new)


# --- training ---------------------------------------------------------------------------------


def test_loss_decreases_on_digits(shard: Dataset, digits: tuple[Dataset, Dataset]) -> None:
    _, test = digits
    model = build_model("mlp", shard.input_shape, 10, seed=0)
    init = get_params(model)
    res = train_local(model, init, shard, TrainConfig(epochs=5, batch_size=16, lr=0.5))
    assert res.num_samples == len(shard)
    assert len(res.epoch_losses) == 5
    assert res.epoch_losses[-1] < 0.5 * res.epoch_losses[0]
    assert res.mean_loss == pytest.approx(np.mean(res.epoch_losses))
    before, after = evaluate(model, init, test), evaluate(model, res.params, test)
    assert after.loss < before.loss and after.accuracy > before.accuracy + 0.3


def test_training_is_bit_reproducible_in_process(shard: Dataset) -> None:
    cfg = TrainConfig(epochs=2, batch_size=16, lr=0.1, momentum=0.5, prox_mu=0.01, seed=7)
    init = get_params(build_model("cnn", shard.input_shape, 10, seed=3))
    a = train_local(build_model("cnn", shard.input_shape, 10, seed=0), init, shard, cfg)
    model = build_model("cnn", shard.input_shape, 10, seed=99)
    b = train_local(model, init, shard, cfg)
    c = train_local(model, init, shard, cfg)  # same model object, reused
    assert params_digest(a.params) == params_digest(b.params) == params_digest(c.params)
    assert a.mean_loss == b.mean_loss == c.mean_loss
    d = train_local(model, init, shard, TrainConfig(**{**cfg.__dict__, "seed": 8}))
    assert params_digest(d.params) != params_digest(a.params), "the seed drives shuffling"
    # Inputs are not mutated.
    assert params_digest(init) == params_digest(
        get_params(build_model("cnn", shard.input_shape, 10, seed=3))
    )


_SUBPROCESS = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))  # the caller's thread count must not matter
from clients.data import load_digits, partition_iid
from clients.models import build_model, get_params
from clients.training import TrainConfig, params_digest, train_local
train, _ = load_digits(test_fraction=0.2, seed=0)
shard = train.subset(partition_iid(len(train), 10, seed=0)[0])
init = get_params(build_model("cnn", shard.input_shape, 10, seed=3))
cfg = TrainConfig(epochs=2, batch_size=16, lr=0.1, momentum=0.5, prox_mu=0.01, seed=7)
res = train_local(build_model("cnn", shard.input_shape, 10, seed=0), init, shard, cfg)
print(params_digest(res.params), res.mean_loss.hex())
"""


def test_training_is_bit_reproducible_across_processes(shard: Dataset) -> None:
    cfg = TrainConfig(epochs=2, batch_size=16, lr=0.1, momentum=0.5, prox_mu=0.01, seed=7)
    init = get_params(build_model("cnn", shard.input_shape, 10, seed=3))
    local = train_local(build_model("cnn", shard.input_shape, 10, seed=0), init, shard, cfg)
    # Run the child with a different intra-op thread count than this process uses.
    threads = "1" if torch.get_num_threads() != 1 else "2"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": threads}
    out = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS, threads],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out == [params_digest(local.params), local.mean_loss.hex()]


def test_fedprox_keeps_params_closer_to_global(shard: Dataset) -> None:
    model = build_model("mlp", shard.input_shape, 10, seed=0)
    init = get_params(model)
    dist = {}
    for mu in (0.0, 1.0, 10.0):
        res = train_local(model, init, shard, TrainConfig(epochs=3, lr=0.05, prox_mu=mu))
        dist[mu] = l2(res.params, init)
    assert dist[10.0] < dist[1.0] < dist[0.0]
    assert dist[10.0] < 0.5 * dist[0.0]


def test_momentum_changes_and_speeds_training(shard: Dataset) -> None:
    model = build_model("mlp", shard.input_shape, 10, seed=0)
    init = get_params(model)
    plain = train_local(model, init, shard, TrainConfig(epochs=3, lr=0.02))
    heavy = train_local(model, init, shard, TrainConfig(epochs=3, lr=0.02, momentum=0.9))
    assert heavy.mean_loss < plain.mean_loss


def test_centralised_mlp_reaches_90_percent(digits: tuple[Dataset, Dataset]) -> None:
    train, test = digits
    model = build_model("mlp", train.input_shape, 10, seed=0)
    cfg = TrainConfig(epochs=10, batch_size=32, lr=0.05, momentum=0.9, seed=0)
    res = train_local(model, get_params(model), train, cfg)
    result = evaluate(model, res.params, test)
    assert result.accuracy >= 0.90, result


def test_logreg_on_synthetic_learns() -> None:
    train, test = make_synthetic(600, 12, 3, seed=1, class_sep=2.0)
    model = build_model("logreg", train.input_shape, 3, seed=0)
    res = train_local(model, get_params(model), train, TrainConfig(epochs=5, lr=0.2))
    assert evaluate(model, res.params, test).accuracy > 0.9


def test_evaluate_known_values(digits: tuple[Dataset, Dataset]) -> None:
    _, test = digits
    model = build_model("logreg", test.input_shape, 10, seed=0)
    zeros = {n: np.zeros(s, np.float32) for n, s in param_spec(model)}
    res = evaluate(model, zeros, test, batch_size=50)
    # All logits equal: loss is ln(10), and argmax picks class 0 for every sample.
    assert res.loss == pytest.approx(math.log(10), rel=1e-6)
    assert res.accuracy == pytest.approx(float(np.mean(test.y == 0)))
    bias9 = {**zeros, "fc.bias": np.eye(10, dtype=np.float32)[9]}
    assert evaluate(model, bias9, test).accuracy == pytest.approx(float(np.mean(test.y == 9)))
    with pytest.raises(ConfigError):
        evaluate(model, zeros, test, batch_size=0)


def test_config_and_input_errors(shard: Dataset) -> None:
    for bad in (
        {"epochs": 0},
        {"batch_size": 0},
        {"lr": 0.0},
        {"lr": float("nan")},
        {"momentum": 1.0},
        {"momentum": -0.1},
        {"prox_mu": -1.0},
    ):
        with pytest.raises(ConfigError):
            TrainConfig(**bad)
    model = build_model("mlp", shard.input_shape, 10, seed=0)
    empty = shard.subset(np.empty(0, np.int64))
    with pytest.raises(ConfigError):
        train_local(model, get_params(model), empty, TrainConfig())
    with pytest.raises(ConfigError):
        evaluate(model, get_params(model), empty)
    with pytest.raises(ConfigError):
        train_local(model, {"fc1.weight": np.zeros((64, 64), np.float32)}, shard, TrainConfig())


def test_deterministic_torch_restores_threads() -> None:
    before = torch.get_num_threads()
    with deterministic_torch():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), deterministic_torch():
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_delta_helpers_and_seed_derivation() -> None:
    rng = np.random.default_rng(0)
    g = {"a": rng.normal(size=(3, 2)).astype(np.float32), "b": np.ones(4, np.float32)}
    local = {k: v + np.float32(0.25) for k, v in g.items()}
    delta = compute_delta(local, g)
    np.testing.assert_allclose(delta["a"], 0.25, rtol=1e-6)
    np.testing.assert_array_equal(apply_delta(g, delta)["b"], local["b"])
    with pytest.raises(ConfigError):
        compute_delta({"a": g["a"]}, g)
    with pytest.raises(ConfigError):
        apply_delta(g, {"a": g["a"], "b": np.ones(5, np.float32)})
    seeds = {derive_seed(0, r, c) for r in range(5) for c in range(10)}
    assert len(seeds) == 50 and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(1, 2) == derive_seed(1, 2) != derive_seed(12)
    assert derive_seed("1", 2) != derive_seed(1, 2)


def test_recommended_config_federated_digits(digits: tuple[Dataset, Dataset]) -> None:
    """The reported demo defaults: 10 IID clients, FedAvg of full MLPs, >= 92 % in 2 rounds."""
    train, test = digits
    shards = [train.subset(p) for p in partition_iid(len(train), 10, seed=0)]
    model = build_model("mlp", train.input_shape, 10, seed=0)
    global_params = get_params(model)
    for round_no in range(2):
        results = [
            train_local(
                model,
                global_params,
                shard,
                replace(RECOMMENDED_DIGITS_MLP, seed=derive_seed(0, client, round_no)),
            )
            for client, shard in enumerate(shards)
        ]
        total = sum(r.num_samples for r in results)
        weights = np.array([r.num_samples for r in results], dtype=np.float64) / total
        global_params = {
            k: np.tensordot(weights, np.stack([r.params[k] for r in results]), axes=1).astype(
                np.float32
            )
            for k in global_params
        }
    assert evaluate(model, global_params, test).accuracy >= 0.92


def test_model_defaults_resolve_per_model_and_yield_to_options():
    from clients.training import MODEL_TRAINING
    from fedchain.config import DemoConfig
    from fedchain.sim.driver.deployment import train_config

    for model, want in MODEL_TRAINING.items():
        got = train_config(DemoConfig(model=model))
        assert (got.epochs, got.batch_size, got.lr, got.momentum) == (
            want.epochs,
            want.batch_size,
            want.lr,
            want.momentum,
        )
    override = train_config(DemoConfig(model="cnn", lr=0.2, epochs=3))
    assert (override.lr, override.epochs, override.momentum) == (0.2, 3, 0.9)


@pytest.mark.slow
def test_cnn_default_training_climbs_round_after_round():
    """Issue 10: the CNN with lr 0.1 oscillated (0.76, 0.67, 0.29, ...); its default must
    make FedAvg on 10 IID digits clients improve every round."""
    from clients.data import partition
    from clients.training import default_training

    train, test = load_digits(seed=0)
    parts = partition("iid", labels=train.y, num_clients=10, seed=0)
    model = build_model("cnn", train.input_shape, train.num_classes, seed=0)
    current = get_params(model)
    accuracy = []
    for round_no in range(1, 4):
        results = [
            train_local(
                model,
                current,
                train.subset(p),
                replace(default_training("cnn"), seed=derive_seed(0, i, round_no)),
            )
            for i, p in enumerate(parts)
        ]
        total = sum(r.num_samples for r in results)
        current = {
            k: (sum(r.params[k] * r.num_samples for r in results) / total).astype(np.float32)
            for k in current
        }
        accuracy.append(evaluate(model, current, test).accuracy)
    assert accuracy == sorted(accuracy), accuracy
    assert accuracy[-1] > 0.9, accuracy
