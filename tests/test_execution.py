"""Round re-execution: the whole path update -> canonical bytes -> aggregate -> global state."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aggregators.execution import UNAVAILABLE, execute_round
from protocol.codec import encode_tensors
from protocol.fixedpoint import NumericFormat, dequantise, quantise
from protocol.manifest import TaskManifest
from protocol.payloads import (
    GlobalState,
    ModelLayout,
    decode_global_state,
    encode_global_state,
    encode_update,
)

LAYOUT = ModelLayout.from_spec([("w", (20, 30)), ("b", (30,))])
FMT = NumericFormat(frac_bits=16, value_bound=4 << 16)


def manifest(rule: str = "fedavg", params: dict | None = None) -> TaskManifest:
    return TaskManifest(rule, params or {}, FMT, "mlp", (1, 8, 8), 10, LAYOUT)


def make_round(seed: int = 0, k: int = 7):
    rng = np.random.default_rng(seed)
    d = LAYOUT.size
    global_real = rng.normal(0, 0.5, d)
    global_q = quantise(global_real, FMT.frac_bits)
    deltas = rng.normal(0, 0.05, (k, d))
    deltas_q = quantise(deltas, FMT.frac_bits, FMT.value_bound)
    samples = rng.integers(10, 200, k)
    global_payload = encode_global_state(LAYOUT, GlobalState(0, global_q))
    payloads = [encode_update(LAYOUT, 1, row) for row in deltas_q]
    return global_q, deltas_q, samples, global_payload, payloads


def test_fedavg_round_matches_float64_reference_within_quantisation_bound() -> None:
    global_q, deltas_q, samples, gp, payloads = make_round()
    result = execute_round(manifest(), 1, gp, payloads, samples.tolist())
    state = decode_global_state(LAYOUT, result.payload)
    assert state.round == 1 and result.included == tuple(range(len(payloads)))
    reference = (
        dequantise(global_q, 16)
        + (samples[:, None] * dequantise(deltas_q, 16)).sum(0) / samples.sum()
    )
    # One rounding of the weighted mean: at most half a unit in the last place.
    assert np.abs(dequantise(state.params, 16) - reference).max() <= 0.5 / 2**16 + 1e-12
    assert result.digest == hashlib.sha256(result.payload).digest()


def test_invalid_and_unavailable_updates_are_excluded_deterministically() -> None:
    _, _, samples, gp, payloads = make_round(k=5)
    bad_round = encode_update(LAYOUT, 2, np.zeros(LAYOUT.size, dtype=np.int64))
    too_big = encode_tensors({"meta/round": np.array([1], np.int64)})
    inputs = [payloads[0], None, bad_round, payloads[3], too_big]
    result = execute_round(manifest(), 1, gp, inputs, samples.tolist())
    assert result.included == (0, 3)
    assert result.excluded[1] == UNAVAILABLE
    assert "round" in result.excluded[2] and "missing" in result.excluded[4]
    again = execute_round(manifest(), 1, gp, inputs, samples.tolist())
    assert again.payload == result.payload
    honest_only = execute_round(
        manifest(), 1, gp, [payloads[0], payloads[3]], [samples[0], samples[3]]
    )
    assert decode_global_state(LAYOUT, honest_only.payload).params.tolist() == (
        decode_global_state(LAYOUT, result.payload).params.tolist()
    )


def test_no_valid_update_carries_the_model_forward() -> None:
    global_q, _, _, gp, _ = make_round()
    result = execute_round(manifest(), 1, gp, [None, None], [5, 5])
    assert result.carried_forward
    state = decode_global_state(LAYOUT, result.payload)
    assert state.round == 1 and state.params.tolist() == global_q.tolist()


SCRIPT = textwrap.dedent(
    """
    import hashlib, sys
    sys.path.insert(0, {root!r})
    from tests.test_execution import make_round, manifest
    from aggregators.execution import execute_round
    _, _, samples, gp, payloads = make_round(seed=3, k=9)
    r = execute_round(manifest(), 1, gp, payloads, samples.tolist())
    print(hashlib.sha256(r.payload).hexdigest())
    """
)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_fedavg_round_is_byte_identical_in_separate_processes(threads: str) -> None:
    import os
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=root)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout.strip()
    _, _, samples, gp, payloads = make_round(seed=3, k=9)
    local = execute_round(manifest(), 1, gp, payloads, samples.tolist())
    assert out == hashlib.sha256(local.payload).hexdigest()
