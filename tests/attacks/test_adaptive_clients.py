"""Issue-23 client attacks: min-max, min-sum, Fang (trimmed mean/median, Krum), optimised
ALIE/IPM against the deployed rule, Mimic, and the Gaussian attacker's fresh noise."""

from __future__ import annotations

import numpy as np
import pytest

from clients.adaptive_attacks import line_search
from clients.attacks import CLIENT_ATTACKS, colluding_update
from fedchain.sim.scenario import rule_simulator
from protocol.errors import ConfigError
from tests.byzfl_reference import byzfl_module

D = 40


def _honest(k: int = 12, seed: int = 0, spread: float = 0.05) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, spread, size=D)
    return [
        {
            "w": (base + rng.normal(0.0, 0.02, size=D)).astype(np.float32)[:30].reshape(5, 6),
            "b": (base + rng.normal(0.0, 0.02, size=D)).astype(np.float32)[30:],
        }
        for _ in range(k)
    ]


def _flat(d: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in d.values()])


def _matrix(deltas: list[dict[str, np.ndarray]]) -> np.ndarray:
    return np.stack([_flat(d) for d in deltas])


def _send(name: str, honest: list[dict[str, np.ndarray]], **kw: object) -> np.ndarray:
    out = colluding_update(name, honest, num_colluders=3, num_clients=len(honest) + 3, **kw)
    assert set(out) == {"w", "b"} and out["w"].shape == (5, 6) and out["w"].dtype == np.float32
    return _flat(out)


def test_min_max_sits_on_the_honest_diameter() -> None:
    """Min-max: the crafted vector's largest distance to an honest update equals (within
    the bisection's precision) the largest honest pairwise distance, and it moved away."""
    honest = _honest()
    x = _matrix(honest)
    v = _send("min_max", honest)
    diam = max(np.linalg.norm(a - b) for a in x for b in x)
    far = max(np.linalg.norm(v - a) for a in x)
    assert far <= diam * (1 + 1e-6) and far >= diam * 0.999
    assert np.linalg.norm(v - x.mean(axis=0)) > 0.01


def test_min_sum_meets_the_sum_bound() -> None:
    """Min-sum: the crafted vector's sum of squared distances reaches the honest maximum."""
    honest = _honest()
    x = _matrix(honest)
    v = _send("min_sum", honest, perturbation="unit")
    bound = max(sum(np.sum((a - b) ** 2) for b in x) for a in x)
    got = sum(np.sum((v - a) ** 2) for a in x)
    assert got <= bound * (1 + 1e-6) and got >= bound * 0.999


def test_fang_trmean_lies_beyond_the_honest_extremes_against_the_direction() -> None:
    """Fang (trimmed mean/median): every coordinate is past the honest extreme, on the
    side opposite to the honest mean's sign."""
    honest = _honest()
    x = _matrix(honest)
    v = _send("fang_trmean", honest, seed=3)
    s = np.sign(x.mean(axis=0))
    assert np.all(v[s > 0] <= x.min(axis=0)[s > 0])
    assert np.all(v[s <= 0] >= x.max(axis=0)[s <= 0])


def test_fang_krum_is_selected_by_krum() -> None:
    """Fang (Krum): the crafted -lambda * sign(mean) is what Krum (f = 3) selects (honest
    updates whose spread exceeds their mean, as deep-network updates are)."""
    honest = _honest(spread=0.005)
    v = _send("fang_krum", honest)
    x = _matrix(honest)
    krum = rule_simulator("krum", {"f": 3}, 16, 4.0)
    agg = krum(np.vstack([x, np.repeat(v[None, :], 3, axis=0)]))
    assert np.allclose(agg, v, atol=2**-15)
    assert np.all(np.sign(v) == -np.sign(x.mean(axis=0)))


def test_optimised_ipm_searches_against_the_deployed_rule() -> None:
    """Optimised IPM: the epsilon found against the median does at least as much damage as
    the fixed epsilon 0.1 and epsilon 10 (distance of the aggregate from the honest mean)."""
    honest = _honest()
    x = _matrix(honest)
    med = rule_simulator("median", {}, 16, 4.0)

    def damage(v: np.ndarray) -> float:
        return float(np.linalg.norm(med(np.vstack([x, np.repeat(v[None], 3, 0)])) - x.mean(0)))

    opt = _send("ipm_opt", honest, aggregate=med)
    for eps in (0.1, 10.0):
        assert damage(opt) >= damage(-eps * x.mean(axis=0)) - 1e-9
    alie = _send("alie_opt", honest, aggregate=med)
    assert damage(alie) >= damage(_send("alie", honest)) - 1e-9


def test_line_search_is_byzfl_s() -> None:
    """The line search reproduces ByzFL's Optimal_InnerProductManipulation choice."""
    attacks = byzfl_module("attacks")
    aggs = byzfl_module("aggregators")
    x = _matrix(_honest())
    ref = attacks.Optimal_InnerProductManipulation(agg=aggs.Median(), pre_agg_list=[], f=3)(x)
    mean = x.mean(axis=0)

    def damage(t: float) -> float:
        v = np.vstack([x, np.repeat((-t * mean)[None], 3, 0)])
        return float(np.linalg.norm(np.median(v, axis=0) - mean))

    eps = line_search(damage, 0.0, 10.0, 20)
    assert np.allclose(-eps * mean, ref)


def test_mimic_copies_an_honest_update() -> None:
    """Mimic: sends exactly one honest update (the farthest from the mean, or index)."""
    honest = _honest()
    x = _matrix(honest)
    v = _send("mimic", honest)
    i = int(np.argmax(((x - x.mean(0)) ** 2).sum(1)))
    assert np.array_equal(v, x[i].astype(np.float32).astype(np.float64))
    assert np.array_equal(_send("mimic", honest, index=2), x[2].astype(np.float32))
    with pytest.raises(ConfigError):
        _send("mimic", honest, index=99)


def test_adaptive_attacks_are_registered_as_colluding() -> None:
    """Every new attack is an omniscient (colluding) client attack."""
    for name in ("min_max", "min_sum", "fang_trmean", "fang_krum", "alie_opt", "ipm_opt", "mimic"):
        assert CLIENT_ATTACKS[name].kind == "omniscient"


def test_gaussian_attacker_draws_fresh_noise_each_round() -> None:
    """The Gaussian attacker's noise differs between rounds (it was one vector before)."""
    from fedchain.sim.scenario import ClientBehaviour, client_attack_hooks
    from protocol.payloads import ModelLayout

    layout = ModelLayout((("w", (4,)),))
    behaviour = ClientBehaviour("gaussian_noise", {"sigma": 1.0, "replace": True})
    _, hook, _ = client_attack_hooks(behaviour, None, layout, seed=7)  # type: ignore[arg-type]
    assert hook is not None
    r1, r2 = hook(1, np.zeros(4)), hook(2, np.zeros(4))
    assert not np.array_equal(r1, r2)
    assert np.array_equal(r1, hook(1, np.zeros(4)))  # still reproducible per round
