"""Rule interface and registry: parameter parsing, canonical hashing, clear errors."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from aggregators.base import AggregationInput, AggregationInputError, AggregationRule
from aggregators.registry import (
    available_rules,
    canonical_params_json,
    make_rule,
    params_hash,
    parse_rule_params,
    rule_id,
)
from protocol.errors import FedchainError, RuleParameterError


def test_available_rules_contains_core() -> None:
    names = available_rules()
    assert names == sorted(names)
    assert set(names) == {
        "fedavg",
        "fedprox",
        "fedavgm",
        "fedadagrad",
        "fedadam",
        "fedyogi",
        "krum",
        "multikrum",
        "median",
        "trimmed_mean",
        "bulyan",
        "geomedian",
        "centered_clip",
    }


def test_rule_id_is_sha256_of_name() -> None:
    assert rule_id("krum") == hashlib.sha256(b"krum").digest()
    assert len(rule_id("fedavg")) == 32


def test_make_rule_every_rule_with_defaults_or_required() -> None:
    for name in available_rules():
        cls = type(make_rule(name, _required_params(name)))
        rule = make_rule(name, _required_params(name))
        assert isinstance(rule, AggregationRule)
        assert rule.name == name == cls.name
        # canonical params contain every declared parameter
        assert set(rule.params) == {s.name for s in cls.param_specs}
        # canonical JSON round-trips and is compact/sorted
        raw = canonical_params_json(rule)
        assert b" " not in raw
        assert list(json.loads(raw)) == sorted(rule.params)
        assert len(params_hash(rule)) == 32


def _required_params(name: str) -> dict[str, str]:
    from aggregators.registry import get_rule_class

    return {s.name: "1" for s in get_rule_class(name).param_specs if s.required}


def test_cli_strings_convert_by_declared_type() -> None:
    r = make_rule("fedprox", parse_rule_params(["mu=0.5"]))
    assert r.params == {"mu": 0.5}
    assert isinstance(r.params["mu"], float)
    assert canonical_params_json(r) == b'{"mu":"0.5"}'
    # same value given as float, int-looking string, or str -> same hash
    assert params_hash(make_rule("fedprox", {"mu": 0.5})) == params_hash(r)
    assert params_hash(make_rule("fedprox", {"mu": "1"})) == params_hash(
        make_rule("fedprox", {"mu": 1.0})
    )
    assert params_hash(make_rule("fedprox", {"mu": "-0.0"})) == params_hash(
        make_rule("fedprox", {"mu": 0})
    )


def test_floats_hash_as_repr_strings() -> None:
    r = make_rule("fedprox", {"mu": 0.1})
    assert canonical_params_json(r) == b'{"mu":"0.1"}'
    assert params_hash(r) == hashlib.sha256(b'{"mu":"0.1"}').digest()


def test_parse_rule_params() -> None:
    assert parse_rule_params(["f=1", "m = 3"]) == {"f": "1", "m": "3"}
    assert parse_rule_params([]) == {}
    with pytest.raises(RuleParameterError):
        parse_rule_params(["f"])
    with pytest.raises(RuleParameterError):
        parse_rule_params(["=1"])
    with pytest.raises(RuleParameterError):
        parse_rule_params(["f=1", "f=2"])


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("nope", {}, "unknown aggregation rule"),
        ("fedavg", {"f": 1}, "unknown parameter"),
        ("fedprox", {"mu": "abc"}, "must be float"),
        ("fedprox", {"mu": -1}, "must be >= 0"),
        ("fedprox", {"mu": "nan"}, "finite"),
        ("fedprox", {"mu": True}, "must be float"),
    ],
)
def test_invalid_parameters_raise_clear_errors(
    name: str, params: dict[str, object], match: str
) -> None:
    with pytest.raises(RuleParameterError, match=match):
        make_rule(name, params)


def test_rule_parameter_error_is_fedchain_error() -> None:
    with pytest.raises(FedchainError):
        make_rule("fedavg", {"zzz": 1})


def test_rule_equality_and_repr() -> None:
    assert make_rule("fedprox", {"mu": "0.5"}) == make_rule("fedprox", {"mu": 0.5})
    assert make_rule("fedprox", {"mu": 0.5}) != make_rule("fedprox", {"mu": 0.25})
    assert "mu=0.5" in repr(make_rule("fedprox", {"mu": 0.5}))


def _inp(**kw: object) -> AggregationInput:
    base: dict[str, object] = {
        "global_params": np.zeros(3, np.int64),
        "updates": np.zeros((2, 3), np.int32),
        "num_samples": np.ones(2, np.int64),
        "state": {},
        "frac_bits": 16,
        "value_bound": 100,
    }
    base.update(kw)
    return AggregationInput(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"updates": np.zeros((2, 3), np.int64)}, "int32"),
        ({"global_params": np.zeros(4, np.int64)}, "columns"),
        ({"num_samples": np.array([1, 0], np.int64)}, "> 0"),
        ({"num_samples": np.ones(3, np.int64)}, "entries for 2"),
        ({"updates": np.full((2, 3), 101, np.int32)}, "value_bound"),
        ({"value_bound": 2**31}, "value_bound"),
        ({"global_params": np.full(3, 2**31, np.int64)}, "int32"),
    ],
)
def test_malformed_inputs_rejected(kw: dict[str, object], match: str) -> None:
    with pytest.raises(AggregationInputError, match=match):
        _inp(**kw).validate()
    if "updates" in kw and kw["updates"].dtype == np.int32:  # type: ignore[attr-defined]
        # rules skip the (costly) value-bound pass where their exactness does not need it;
        # Krum's squared distances do need it
        with pytest.raises(AggregationInputError, match=match):
            big = np.concatenate([kw["updates"], kw["updates"][:1]])  # type: ignore[index]
            make_rule("krum", {"f": 0}).aggregate(
                _inp(updates=big, num_samples=np.ones(3, np.int64))
            )
    else:
        with pytest.raises(AggregationInputError, match=match):
            make_rule("fedavg").aggregate(_inp(**kw))


def test_params_hash_golden_values() -> None:
    """The canonical encoding is part of the protocol: pin it."""
    assert canonical_params_json(make_rule("krum", {"f": "1"})) == b'{"f":1,"m":1}'
    assert canonical_params_json(make_rule("trimmed_mean")) == b'{"beta":"0.1"}'
    assert canonical_params_json(make_rule("fedavg")) == b"{}"
    assert canonical_params_json(make_rule("fedadam", {"eta": "1e-2"})) == (
        b'{"beta1":"0.9","beta2":"0.99","eta":"0.01","tau":"0.001"}'
    )
    assert params_hash(make_rule("fedavg")) == hashlib.sha256(b"{}").digest()


def _all_rules_with(k: int) -> list[AggregationRule]:
    rules = []
    for name in available_rules():
        params = {"f": 0} if name in ("krum", "multikrum", "bulyan") else {}
        rule = make_rule(name, params)
        if k >= rule.min_updates():
            rules.append(rule)
    return rules


@pytest.mark.parametrize("k", [1, 3])
def test_every_rule_handles_empty_model_and_small_k(k: int) -> None:
    for rule in _all_rules_with(k):
        for d in (0, 1, 5):
            u = np.arange(k * d, dtype=np.int32).reshape(k, d) - 2
            inp = AggregationInput(np.zeros(d, np.int64), u, np.ones(k, np.int64), {}, 16, 100)
            out = rule.aggregate(inp)
            assert out.params.shape == (d,) and out.params.dtype == np.int64, rule.name
            if k == 1 and not rule.stateful:  # a single update is returned as is
                assert out.params.tolist() == u[0].tolist(), rule.name


def test_concurrent_aggregations_are_independent() -> None:
    """Scratch buffers are per thread: parallel aggregations give the serial results."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(2)
    inputs = []
    for _ in range(6):
        u = rng.integers(-(2**18), 2**18, size=(12, 70_000)).astype(np.int32)
        n = rng.integers(1, 100, size=12).astype(np.int64)
        inputs.append(AggregationInput(np.zeros(70_000, np.int64), u, n, {}, 16, 2**18))
    rules = [make_rule("fedavg"), make_rule("krum", {"f": 2}), make_rule("median")]
    serial = [r.aggregate(i).params for i in inputs for r in rules]
    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(r.aggregate, i) for i in inputs for r in rules]
        parallel = [f.result().params for f in futs]
    assert all(np.array_equal(a, b) for a, b in zip(serial, parallel, strict=True))
