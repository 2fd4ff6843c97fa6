"""Malicious client behaviours (clients/attacks.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
import pytest

from clients.attacks import (
    CLIENT_ATTACKS,
    alie,
    alie_z,
    apply_attack,
    gaussian_noise,
    inner_product_manipulation,
    label_flip,
    scale,
    sign_flip,
)
from clients.data import Dataset, load_digits, partition_iid
from clients.models import build_model, get_params
from clients.training import TrainConfig, evaluate, train_local
from protocol.errors import ConfigError

Delta = dict[str, np.ndarray]


def make_delta(seed: int, shift: float = 0.0) -> Delta:
    rng = np.random.default_rng(seed)
    return {
        "w": (rng.normal(size=(4, 3)) + shift).astype(np.float32),
        "b": (rng.normal(size=(3,)) + shift).astype(np.float32),
    }


def norm(d: Delta) -> float:
    return math.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in d.values()))


def flat(d: Delta) -> np.ndarray:
    return np.concatenate([d[k].ravel() for k in sorted(d)]).astype(np.float64)


@pytest.fixture(scope="module")
def honest() -> list[Delta]:
    return [make_delta(s, shift=1.0) for s in range(8)]


# --- data attack ------------------------------------------------------------------------------


def test_label_flip_maps_y_to_c_minus_1_minus_y() -> None:
    train, _ = load_digits()
    flipped = label_flip(train, 10, seed=0)
    np.testing.assert_array_equal(flipped.y, 9 - train.y)
    assert flipped.x is train.x and flipped.y is not train.y
    assert flipped.y.dtype == np.int64 and flipped.num_classes == 10
    np.testing.assert_array_equal(label_flip(flipped, 10, seed=0).y, train.y)  # involution
    assert np.all(train.y == load_digits()[0].y), "input labels untouched"


def test_label_flip_fraction_is_seeded() -> None:
    ds = Dataset(np.zeros((100, 2), np.float32), np.zeros(100, np.int64), 4, (2,))
    a = label_flip(ds, 4, seed=1, fraction=0.3)
    b = label_flip(ds, 4, seed=1, fraction=0.3)
    c = label_flip(ds, 4, seed=2, fraction=0.3)
    assert int((a.y == 3).sum()) == 30 and set(np.unique(a.y)) == {0, 3}
    assert np.array_equal(a.y, b.y) and not np.array_equal(a.y, c.y)
    with pytest.raises(ConfigError):
        label_flip(ds, 5, seed=0)
    with pytest.raises(ConfigError):
        label_flip(ds, 4, seed=0, fraction=1.5)


def test_label_flipping_client_learns_the_wrong_task() -> None:
    train, test = load_digits()
    shard = train.subset(partition_iid(len(train), 4, seed=0)[0])
    model = build_model("logreg", train.input_shape, 10, seed=0)
    cfg = TrainConfig(epochs=5, lr=0.5)
    poisoned = train_local(model, get_params(model), label_flip(shard, 10, seed=0), cfg)
    assert evaluate(model, poisoned.params, test).accuracy < 0.1
    assert evaluate(model, poisoned.params, label_flip(test, 10, seed=0)).accuracy > 0.7


# --- delta attacks ----------------------------------------------------------------------------


def test_sign_flip_and_scale() -> None:
    d = make_delta(0)
    flipped = sign_flip(d)
    for k in d:
        np.testing.assert_array_equal(flipped[k], -d[k])
        assert flipped[k].dtype == np.float32
    assert np.dot(flat(flipped), flat(d)) == pytest.approx(-(norm(d) ** 2), rel=1e-6)
    assert norm(sign_flip(d, scale=3.0)) == pytest.approx(3 * norm(d), rel=1e-6)
    boosted = scale(d, 10.0)
    assert norm(boosted) == pytest.approx(10 * norm(d), rel=1e-6)
    cos = np.dot(flat(boosted), flat(d)) / (norm(boosted) * norm(d))
    assert cos == pytest.approx(1.0, abs=1e-6)
    assert norm(scale(d, 0.0)) == 0.0
    assert np.array_equal(make_delta(0)["w"], d["w"]), "inputs untouched"
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ConfigError):
            sign_flip(d, scale=bad)
    with pytest.raises(ConfigError):
        scale(d, float("nan"))


def test_gaussian_noise_statistics_and_determinism() -> None:
    d = {"w": np.full((200, 100), 2.0, np.float32), "b": np.zeros(500, np.float32)}
    noisy = gaussian_noise(d, sigma=0.5, seed=3)
    diff = flat(noisy) - flat(d)
    assert abs(diff.mean()) < 0.01 and diff.std() == pytest.approx(0.5, rel=0.02)
    again = gaussian_noise(d, sigma=0.5, seed=3)
    assert all(np.array_equal(noisy[k], again[k]) for k in d)
    other = gaussian_noise(d, sigma=0.5, seed=4)
    assert not np.array_equal(noisy["w"], other["w"])
    pure = gaussian_noise(d, sigma=0.5, seed=3, replace=True)
    np.testing.assert_allclose(pure["w"], noisy["w"] - 2.0, atol=1e-6)
    assert all(np.array_equal(gaussian_noise(d, 0.0, seed=1)[k], d[k]) for k in d)
    with pytest.raises(ConfigError):
        gaussian_noise(d, sigma=-1.0)


# --- omniscient attacks -----------------------------------------------------------------------


def test_alie_z_matches_paper_formula() -> None:
    # n=50, m=12 (the paper's CIFAR setting): s = 26 - 12 = 14, z = Phi^-1(36/50) ~ 0.583.
    assert alie_z(50, 12) == pytest.approx(NormalDist().inv_cdf(36 / 50))
    assert alie_z(50, 12) == pytest.approx(0.5828, abs=1e-3)
    assert alie_z(10, 2) == pytest.approx(NormalDist().inv_cdf(6 / 10))
    for n, m in ((10, 0), (10, 10), (3, 5)):
        with pytest.raises(ConfigError):
            alie_z(n, m)


def test_alie_stays_within_honest_spread(honest: list[Delta]) -> None:
    stack = {k: np.stack([h[k].astype(np.float64) for h in honest]) for k in honest[0]}
    for z in (0.5, 1.0, 1.5):
        mal = alie(honest, z=z)
        for k, s in stack.items():
            mean, std = s.mean(axis=0), s.std(axis=0)
            assert mal[k].dtype == np.float32 and mal[k].shape == mean.shape
            np.testing.assert_allclose(mal[k], mean - z * std, rtol=1e-6, atol=1e-6)
            tol = 1e-5
            assert np.all(mal[k] >= mean - z * std - tol)
            assert np.all(mal[k] <= mean + z * std + tol)
            assert np.all(mal[k] <= mean + tol), "shifted below the mean on every coordinate"
    # Default z from the paper: 8 honest + 2 attackers -> n=10, m=2.
    default = alie(honest, num_byzantine=2)
    expected = alie(honest, z=alie_z(10, 2))
    assert all(np.array_equal(default[k], expected[k]) for k in default)
    assert alie(honest, num_byzantine=2, num_clients=50)["w"].shape == (4, 3)


def test_alie_is_closer_to_the_mean_than_honest_updates(honest: list[Delta]) -> None:
    """The point of ALIE: it hides inside the crowd (distance to mean < typical honest)."""
    mean = np.mean([flat(h) for h in honest], axis=0)
    mal = flat(alie(honest, z=1.0))
    honest_dists = [np.linalg.norm(flat(h) - mean) for h in honest]
    assert np.linalg.norm(mal - mean) <= np.median(honest_dists) * 1.05


def test_inner_product_manipulation(honest: list[Delta]) -> None:
    mean = sum(flat(h) for h in honest) / len(honest)
    for eps in (0.1, 1.0, 100.0):
        mal = flat(inner_product_manipulation(honest, eps))
        np.testing.assert_allclose(mal, -eps * mean, rtol=1e-6, atol=1e-6)
        assert np.dot(mal, mean) < 0
        assert np.linalg.norm(mal) == pytest.approx(eps * np.linalg.norm(mean), rel=1e-5)
    with pytest.raises(ConfigError):
        inner_product_manipulation(honest, 0.0)


def test_omniscient_attacks_validate_inputs(honest: list[Delta]) -> None:
    with pytest.raises(ConfigError):
        alie([], z=1.0)
    with pytest.raises(ConfigError):
        alie([*honest, {"w": np.zeros((4, 3), np.float32)}], z=1.0)
    with pytest.raises(ConfigError):
        inner_product_manipulation([*honest, {**honest[0], "b": np.zeros(4, np.float32)}], 1.0)
    with pytest.raises(ConfigError):
        alie(honest, z=float("nan"))


def test_attacks_are_deterministic(honest: list[Delta]) -> None:
    attacks: list[Callable[[], Delta]] = [
        lambda: alie(honest),
        lambda: inner_product_manipulation(honest, 0.5),
        lambda: gaussian_noise(honest[0], 1.0, seed=9),
        lambda: sign_flip(honest[0], 2.0),
    ]
    for fn in attacks:
        a, b = fn(), fn()
        assert all(a[k].tobytes() == b[k].tobytes() for k in a)


# --- registry ---------------------------------------------------------------------------------


def test_registry_and_apply_attack(honest: list[Delta]) -> None:
    assert set(CLIENT_ATTACKS) == {
        "label_flip",
        "sign_flip",
        "scale",
        "gaussian_noise",
        "alie",
        "inner_product_manipulation",
        "min_max",
        "min_sum",
        "fang_trmean",
        "fang_krum",
        "alie_opt",
        "ipm_opt",
        "mimic",
    }
    assert {s.kind for s in CLIENT_ATTACKS.values()} == {"data", "delta", "omniscient"}
    d = honest[0]
    out = apply_attack("scale", delta=d, factor=2.0)
    assert isinstance(out, dict) and np.array_equal(out["w"], scale(d, 2.0)["w"])
    out = apply_attack("alie", honest_deltas=honest, z=1.0)
    assert isinstance(out, dict) and np.array_equal(out["b"], alie(honest, 1.0)["b"])
    ds = Dataset(np.zeros((4, 2), np.float32), np.arange(4, dtype=np.int64), 4, (2,))
    flipped = apply_attack("label_flip", dataset=ds)
    assert isinstance(flipped, Dataset) and list(flipped.y) == [3, 2, 1, 0]
    with pytest.raises(ConfigError, match="unknown client attack"):
        apply_attack("backdoor", delta=d)
    with pytest.raises(ConfigError, match="needs delta"):
        apply_attack("sign_flip", honest_deltas=honest)
    with pytest.raises(ConfigError, match="does not take"):
        apply_attack("sign_flip", delta=d, factor=2.0)
    with pytest.raises(ConfigError, match="requires"):
        apply_attack("scale", delta=d)
