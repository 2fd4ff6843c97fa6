"""Faulty-aggregator behaviours: every tamper yields a different, reproducible aggregate."""

from __future__ import annotations

import numpy as np
import pytest

from aggregators.behaviours import HONEST, TAMPERS, Behaviour, RoundContext
from aggregators.execution import execute_round
from protocol.errors import ConfigError
from protocol.fixedpoint import NumericFormat, quantise
from protocol.manifest import TaskManifest
from protocol.payloads import (
    GlobalState,
    ModelLayout,
    decode_global_state,
    encode_global_state,
    encode_update,
)

LAYOUT = ModelLayout.from_spec([("w", (6, 5)), ("b", (5,))])
MANIFEST = TaskManifest("fedavg", {}, NumericFormat(16, 4 << 16), "mlp", (1, 8, 8), 10, LAYOUT)


def context() -> RoundContext:
    rng = np.random.default_rng(1)
    g = quantise(rng.normal(0, 0.3, LAYOUT.size), 16)
    gp = encode_global_state(LAYOUT, GlobalState(0, g))
    ups = [
        encode_update(LAYOUT, 1, quantise(rng.normal(0, 0.05, LAYOUT.size), 16)) for _ in range(5)
    ]
    samples = [10, 20, 30, 40, 50]
    honest = execute_round(MANIFEST, 1, gp, ups, samples)
    return RoundContext(MANIFEST, 1, gp, ups, samples, honest)


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_each_tamper_changes_the_aggregate_reproducibly(name: str) -> None:
    ctx = context()
    behaviour = Behaviour(publish=name)
    first = behaviour.publication(ctx)
    again = behaviour.publication(ctx)
    assert first is not None and again is not None
    assert first.payload == again.payload
    assert first.payload != ctx.honest.payload
    state = decode_global_state(LAYOUT, first.payload)  # still a well-formed global state
    assert state.round == 1


def test_sign_flip_and_stale_are_what_they_say() -> None:
    ctx = context()
    prev = decode_global_state(LAYOUT, ctx.global_payload).params
    honest = decode_global_state(LAYOUT, ctx.honest.payload).params
    flipped = decode_global_state(LAYOUT, TAMPERS["sign_flip"](ctx)).params
    assert (flipped - prev).tolist() == (prev - honest).tolist()
    assert decode_global_state(LAYOUT, TAMPERS["stale"](ctx)).params.tolist() == prev.tolist()


def test_honest_withhold_unavailable_and_round_filter() -> None:
    ctx = context()
    assert HONEST.publication(ctx).payload == ctx.honest.payload
    assert Behaviour(publish="withhold").publication(ctx) is None
    unavailable = Behaviour(publish="unavailable").publication(ctx)
    assert unavailable is not None and not unavailable.available
    only_round_2 = Behaviour(publish="noise", rounds=frozenset({2}))
    assert only_round_2.publication(ctx).payload == ctx.honest.payload
    assert not only_round_2.faulty_in(1) and only_round_2.faulty_in(2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"publish": "teleport"},
        {"challenger": "sometimes"},
        {"pbft": "chatty"},
        {"crash_at": "lunch"},
        {"publish": "noise", "params": {"volume": 11}},
    ],
)
def test_invalid_behaviours_are_refused(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        Behaviour(**kwargs)


def test_wrong_rule_must_differ_from_the_task_rule() -> None:
    with pytest.raises(ConfigError):
        Behaviour(publish="wrong_rule", params={"rule": "fedavg"}).publication(context())
