"""The one-step check (OneStep.sol / OneStepMath.sol) against the real Python rules: a small
differential campaign per rule (odd/even K, ties, half-way rounding, saturation, partial last
chunk, carry-forward), total execution of the Python rules, and every forged input reverting
(bad path, wrong U_i, wrong previous root, bad witness)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from adapters.chain import Chain
from adapters.faultproof import OneStepContract
from adapters.reverts import error_class
from aggregators.base import AggregationInput
from aggregators.faultproof import StepRule, order_witness, reference_chunk, step_args
from aggregators.registry import make_rule
from protocol.merkle import CHUNK, ChunkTree, chunk_bytes, leaf_hash

RULES = [
    StepRule.of("fedavg"),
    StepRule.of("fedprox", {"mu": 0.1}),
    StepRule.of("median"),
    StepRule.of("trimmed_mean", {"beta": 0.2}),
    StepRule.of("trimmed_mean", {"beta": 0.3}),
]


@pytest.fixture
def one_step(chain: Chain) -> OneStepContract:
    return OneStepContract.deploy(chain, chain.accounts[0])


def _case(
    rng: np.random.Generator, kind: str, kmin: int = 1
) -> tuple[np.ndarray, np.ndarray, list[int], int]:
    """One chunk case; ``below_min`` draws K below the rule's minimum ``kmin`` (the round
    execute_round carries forward)."""
    k = int(rng.integers(0, kmin)) if kind == "below_min" else int(rng.integers(1, 12))
    valid = CHUNK if rng.random() < 0.6 else int(rng.integers(1, CHUNK))
    if kind == "ties":
        x = rng.integers(-3, 4, size=(k, CHUNK))
        prev = rng.integers(-5, 6, size=CHUNK)
    elif kind == "saturate":
        x = rng.integers(-(2**31), 2**31, size=(k, CHUNK))
        prev = rng.choice([2**31 - 1, -(2**31), 0], size=CHUNK)
    else:
        vb = int(rng.choice([1, 7, 2**16, 2**30]))
        x = rng.integers(-vb, vb + 1, size=(k, CHUNK))
        prev = rng.integers(-(2**31), 2**31, size=CHUNK)
    w = [int(v) for v in rng.integers(1, 4 if kind == "ties" else 2**20, size=k)]
    x[:, valid:] = 0
    prev[valid:] = 0
    return prev.astype(np.int64), x.astype(np.int32), w, valid


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.name}-{r.beta_num}/{r.beta_den}")
def test_solidity_step_equals_python_rule(one_step: OneStepContract, rule: StepRule) -> None:
    rng = np.random.default_rng(rule.rule_id * 100 + rule.beta_num)
    kmin = make_rule(rule.name, rule.params).min_updates()
    for n in range(12):
        prev, x, w, valid = _case(rng, ["plain", "ties", "saturate", "below_min"][n % 4], kmin)
        want = reference_chunk(rule, prev, x, w, valid)
        wit = order_witness(x, valid) if rule.sorted_rule else b""
        got = one_step.step_chunk(
            rule.rule_id,
            rule.beta_num,
            rule.beta_den,
            valid,
            chunk_bytes(prev),
            [chunk_bytes(r) for r in x],
            w,
            wit,
        )
        assert got == chunk_bytes(want), (n, valid, len(w))


def test_halfway_rounding_and_carry_forward(one_step: OneStepContract) -> None:
    """Ties at .5 round to even on both sides; K = 0 and zero-valued lanes carry prev."""
    fedavg, median = StepRule.of("fedavg"), StepRule.of("median")
    x = np.zeros((2, CHUNK), np.int32)
    x[0, :4] = [1, 3, -1, -3]  # means 0.5, 1.5, -0.5, -1.5 -> 0, 2, -0, -2
    prev = np.arange(CHUNK, dtype=np.int64)
    for rule in (fedavg, median):
        want = reference_chunk(rule, prev, x, [1, 1])
        assert want[:4].tolist() == [0, 3, 2, 1]
        wit = order_witness(x) if rule.sorted_rule else b""
        got = one_step.step_chunk(
            rule.rule_id, 0, 1, CHUNK, chunk_bytes(prev), [chunk_bytes(r) for r in x], [1, 1], wit
        )
        assert got == chunk_bytes(want)
    for rule in (fedavg, median):
        got = one_step.step_chunk(rule.rule_id, 0, 1, 100, chunk_bytes(prev), [], [], b"")
        assert got == chunk_bytes(prev[:100])  # carried forward, padding zero


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("fedavg", {}),
        ("fedprox", {"mu": 0.1}),
        ("median", {}),
        ("trimmed_mean", {"beta": 0.0}),
        ("trimmed_mean", {"beta": 0.3}),
        ("trimmed_mean", {"beta": 0.49}),
    ],
)
def test_a_round_is_carried_forward_exactly_where_the_step_carries(
    name: str, params: dict[str, Any]
) -> None:
    """execute_round carries a round forward when fewer valid updates remain than the rule
    needs; for every rule with a one-step proof that is K = 0 only, where the step carries
    every chunk too. So a carried round (K = 0) and a round with K >= 1 both get a claim."""
    from aggregators.execution import execute_round
    from tests.test_execution import make_round, manifest

    rule = make_rule(name, params)
    assert rule.min_updates() == 1
    for k in range(1, 130):
        rule.check_num_updates(k)  # never raises: no K >= 1 is too few
    _, _, samples, gp, payloads = make_round(k=3)
    m = manifest(name, params)
    for k in range(4):
        ups = [*payloads[:k], *[None] * (3 - k)]  # the others unavailable (excluded)
        assert execute_round(m, 1, gp, ups, samples.tolist()).carried_forward == (k == 0)


def test_a_rule_with_a_larger_minimum_has_no_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step carries forward at K = 0 only: a rule that needs more updates (Krum: 2f + 3)
    would make a round with 1..min-1 updates unclaimable, so StepRule refuses it."""
    import aggregators.faultproof as fp
    from protocol.errors import RuleParameterError

    monkeypatch.setitem(fp.RULE_IDS, "krum", 9)
    with pytest.raises(RuleParameterError, match="needs 5 updates"):
        StepRule.of("krum", {"f": 1})


def test_python_rules_are_total() -> None:
    """Inputs that used to raise (int32 overflow of the new state) now saturate, per rule."""
    u = np.array([[2**30, -(2**30)], [2**30, -(2**30)], [2**30, -(2**30)]], np.int32)
    g = np.array([2**31 - 2, -(2**31) + 2], np.int64)
    for name, params in [("fedavg", {}), ("median", {}), ("trimmed_mean", {"beta": 0.25})]:
        inp = AggregationInput(g, u, np.array([1, 2, 3], np.int64), value_bound=2**30)
        out = make_rule(name, params).aggregate(inp)
        assert out.params.tolist() == [2**31 - 1, -(2**31)]


def _opened(rule: StepRule, d: int, k: int, seed: int) -> tuple[tuple[Any, ...], Any, list[Any]]:
    rng = np.random.default_rng(seed)
    prev = rng.integers(-1000, 1000, size=d)
    ups = [rng.integers(-50, 50, size=d).astype(np.int32) for _ in range(k)]
    w = [int(v) for v in rng.integers(1, 100, size=k)]
    return step_args(rule, d // CHUNK, prev, ups, w), prev, ups


def test_full_step_with_openings(one_step: OneStepContract) -> None:
    """The opened step on the last (partial) chunk equals the chunk of the full aggregate."""
    d, k = 3 * CHUNK + 77, 5
    for rule in (StepRule.of("fedavg"), StepRule.of("trimmed_mean", {"beta": 0.2})):
        args, prev, ups = _opened(rule, d, k, 3)
        chunk, leaf = one_step.step(args)
        full = make_rule(rule.name, rule.params).aggregate(
            AggregationInput(prev.astype(np.int64), np.stack(ups), np.array(args[9], np.int64))
        )
        assert ChunkTree(full.params).leaves[3] == leaf == leaf_hash(chunk)


def test_forged_step_inputs_revert(one_step: OneStepContract) -> None:
    """Forged step inputs: bad path, wrong U_i, wrong previous root, bad witness."""
    d, k = 2 * CHUNK + 5, 4
    rule = StepRule.of("median")
    args, _, _ = _opened(rule, d, k, 9)
    one_step.step(args)  # the honest step passes

    def forged(i: int, value: object) -> tuple[Any, ...]:
        a = list(args)
        a[i] = value
        return tuple(a)

    proofs = [list(p) for p in args[11]]
    proofs[1][0] = b"\x01" * 32
    cases = [
        (forged(11, proofs), "BadInputProof"),  # bad path
        (forged(8, [args[8][1], *args[8][1:]]), "BadInputProof"),  # wrong U_i
        (forged(5, bytes(32)), "BadPrevProof"),  # wrong previous root
        (forged(4, 1), "BadPrevProof"),  # another chunk index
        (forged(10, [args[10][1], *args[10][1:]]), "BadInputProof"),  # swapped chunk
    ]
    wit = bytearray(args[12])
    wit[0:2], wit[2:4] = wit[2:4], wit[0:2]  # swap two positions of lane 0
    cases.append((forged(12, bytes(wit)), "BadWitness"))
    dup = bytearray(args[12])
    dup[2:4] = dup[0:2]  # an index named twice
    cases.append((forged(12, bytes(dup)), "BadWitness"))
    cases.append((forged(12, bytes(args[12][:-2])), "BadWitnessLength"))
    cases.append((forged(9, args[9][:-1]), "InputCountMismatch"))
    for bad, name in cases:
        with pytest.raises(error_class(name)):
            one_step.step(bad)
