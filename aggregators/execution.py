"""Re-execution of one round: a pure function from bytes to bytes.

Every aggregator — the one chosen to submit and every verifier — calls
:func:`execute_round` with the previous global state's bytes and the payloads registered
on-chain for the round (in registration order). It decodes and checks each update against
the task manifest, excludes invalid ones deterministically (the reason is reported), runs
the task's rule and encodes the new global state. Same inputs, same bytes, on any machine:
that is what makes a mismatch proof of a faulty aggregate.

Private rounds (docs/privacy.md) keep that property:

* **secure aggregation / HE** (``--privacy secagg|ddp+secagg|he|ddp+he``): the first step
  recovers the exact sum of the included updates from published material only
  (:func:`aggregators.private.private_sum`: unmasking, or combination and the key holder's
  verified decryption); the rule then runs on the mean (a rule that needs individual
  updates is refused when the task is configured). Distributed DP converts the noisy
  integer sum back to model units (:func:`privacy.distributed.decode_mean`). A sum that
  cannot be recovered (too few shares, a dealer's fault, no valid decryption) carries the
  model forward with the reason in :attr:`RoundResult.notes`: never a wrong model.
* **adaptive clipping**: the clip bits of the included updates (plaintext: each update's
  ``meta/clip_bit``; sum modes: the extra coordinate of the sum) set the next round's clip
  norm (:func:`privacy.adaptive_clip.next_clip_norm_from_count`), published in the new
  global state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from aggregators.base import AggregationInput, AggregationRule
from aggregators.intmath import div_round_half_even
from aggregators.private import PrivateInputs, private_sum
from aggregators.registry import make_rule
from aggregators.stopping import StopRule
from privacy.adaptive_clip import next_clip_norm_from_count
from privacy.distributed import decode_mean
from privacy.spec import PrivacySpec
from protocol.cid import content_digest
from protocol.errors import CodecError, ConfigError, RuleParameterError
from protocol.manifest import TaskManifest, canonical_json
from protocol.merkle import vector_root
from protocol.payloads import (
    GlobalState,
    ModelLayout,
    decode_global_state,
    decode_update_bit,
    encode_global_state,
)

UNAVAILABLE = "payload unavailable"

#: Largest int64: no weight, and no sum of a round's weights, may exceed it.
INT64_MAX = 2**63 - 1


def weight_bound(manifest: TaskManifest, count: int) -> int:
    """Largest numSamples an update of a round with ``count`` registered updates may carry:
    the manifest's ``max_samples``, and never so much that ``count`` weights overflow an
    int64 (the contract enforces both; this keeps honest nodes safe on any chain input)."""
    return min(manifest.max_samples, INT64_MAX // max(count, 1))


@dataclass(frozen=True)
class RoundResult:
    """The new global state of a round and how it was obtained."""

    round: int
    payload: bytes
    digest: bytes
    included: tuple[int, ...]
    excluded: dict[int, str] = field(default_factory=dict)
    selected: tuple[int, ...] | None = None
    carried_forward: bool = False
    #: privacy details: why a private sum failed, dropped peers, bad shares, clip norms
    notes: dict[str, Any] = field(default_factory=dict)
    #: the stopping rule's decision (``aggregators.stopping``): this round ends the task
    stop: bool = False


def rule_for(manifest: TaskManifest) -> AggregationRule:
    """Instantiate the manifest's rule (validating its parameters)."""
    return make_rule(manifest.rule, manifest.rule_params)


def privacy_of(manifest: TaskManifest) -> PrivacySpec:
    """The task's privacy settings from its manifest (parsed once per manifest)."""
    return _privacy(canonical_json(manifest.privacy))


@lru_cache(maxsize=16)
def _privacy(text: bytes) -> PrivacySpec:
    import json

    return PrivacySpec.from_manifest(json.loads(text))


def round_clip_norm(spec: PrivacySpec, state: GlobalState) -> float:
    """The clip norm of the round that starts from ``state`` (adaptive: the published one)."""
    if spec.adaptive_clip:
        if state.clip_norm is None:
            raise CodecError("adaptive clipping: the global state carries no clip norm")
        return state.clip_norm
    return spec.clip_norm


def execute_round(
    manifest: TaskManifest,
    round_: int,
    global_payload: bytes,
    updates: Sequence[bytes | None],
    num_samples: Sequence[int],
    rule: AggregationRule | None = None,
    private: PrivateInputs | None = None,
    chunk_roots: Sequence[bytes] | None = None,
) -> RoundResult:
    """Aggregate round ``round_`` exactly as every honest node does.

    ``updates[i]`` is the payload registered at on-chain index ``i`` (``None`` when it could
    not be fetched). Invalid or unavailable updates are excluded. If fewer valid updates
    remain than the rule needs, the global parameters and optimiser state are carried
    forward unchanged (the round still advances), so a round can never be stalled by
    malformed client payloads. Secure aggregation and HE need ``private`` (the round's
    published context, see :class:`~aggregators.private.PrivateInputs`). ``chunk_roots[i]``
    is the U_i update ``i``'s client signed (plaintext rounds): an update whose payload's
    chunk root differs is excluded as invalid.
    """
    if len(updates) != len(num_samples):
        raise ValueError("updates and num_samples differ in length")
    layout = manifest.layout
    spec = privacy_of(manifest)
    previous = decode_global_state(layout, global_payload)
    rule = rule if rule is not None else rule_for(manifest)
    if spec.hides_updates:
        if private is None:
            raise ConfigError(f"privacy {spec.mode!r}: the round's private inputs are needed")
        return _sum_round(manifest, spec, round_, previous, updates, rule, private)
    return _plain_round(manifest, spec, round_, previous, updates, num_samples, rule, chunk_roots)


def _plain_round(
    manifest: TaskManifest,
    spec: PrivacySpec,
    round_: int,
    previous: GlobalState,
    updates: Sequence[bytes | None],
    num_samples: Sequence[int],
    rule: AggregationRule,
    chunk_roots: Sequence[bytes] | None = None,
) -> RoundResult:
    layout, fmt = manifest.layout, manifest.numeric
    rows: list[np.ndarray] = []
    weights: list[int] = []
    included: list[int] = []
    excluded: dict[int, str] = {}
    ones = 0
    bound = weight_bound(manifest, len(updates))
    for index, payload in enumerate(updates):
        if payload is None:
            excluded[index] = UNAVAILABLE
            continue
        weight = int(num_samples[index])
        if not 1 <= weight <= bound:
            # one bad record costs that record, never the round (no int64 overflow)
            excluded[index] = f"invalid: numSamples {weight} outside [1, {bound}]"
            continue
        try:
            row, bit = decode_update_bit(layout, fmt, round_, payload, spec.adaptive_clip)
        except CodecError as exc:
            excluded[index] = f"invalid: {exc}"
            continue
        if chunk_roots is not None and bytes(chunk_roots[index]) != vector_root(row):
            # the signed U_i is what the fault-proof games open: a record whose U_i is not
            # its payload's cannot be replayed, so it counts as invalid, like a bad payload
            excluded[index] = "invalid: chunk root (U_i) does not match the payload"
            continue
        rows.append(row)
        ones += bit or 0
        weights.append(weight)
        included.append(index)
    selected: tuple[int, ...] | None = None
    carried = not _enough(rule, len(rows))
    notes: dict[str, Any] = {}
    if carried:
        new_state = _carry(round_, previous)
    else:
        out = rule.aggregate(
            AggregationInput(
                global_params=previous.params,
                updates=np.stack(rows).astype(np.int32, copy=False),
                num_samples=np.asarray(weights, dtype=np.int64),
                state=previous.opt_state,
                frac_bits=fmt.frac_bits,
                value_bound=fmt.value_bound,
            )
        )
        if out.selected is not None:
            selected = tuple(included[i] for i in out.selected)
        if out.details:
            notes["selection"] = _to_clients(out.details, included)
        clip = _next_clip(spec, previous, ones, len(rows), notes)
        new_state = GlobalState(round_, out.params, dict(out.state), clip)
    new_state, stop = _stop_state(manifest, previous, new_state, carried, notes)
    return _result(layout, round_, new_state, included, excluded, selected, carried, notes, stop)


def _sum_round(
    manifest: TaskManifest,
    spec: PrivacySpec,
    round_: int,
    previous: GlobalState,
    updates: Sequence[bytes | None],
    rule: AggregationRule,
    private: PrivateInputs,
) -> RoundResult:
    """A secure-aggregation or HE round: the exact sum, then the rule on the mean."""
    layout, fmt = manifest.layout, manifest.numeric
    summed = private_sum(manifest, spec, round_, updates, private)
    notes = dict(summed.notes)
    count = len(summed.included)
    carried = summed.total is None or not _enough(rule, count)
    if summed.failure is not None:
        notes["failure"] = summed.failure
    if carried or summed.total is None:
        new_state = _carry(round_, previous)
    else:
        mean = _mean_delta(spec, summed.total[: layout.size], count, previous, manifest)
        out = rule.aggregate(
            AggregationInput(
                global_params=previous.params,
                updates=mean[np.newaxis, :].astype(np.int32),
                num_samples=np.ones(1, dtype=np.int64),
                state=previous.opt_state,
                frac_bits=fmt.frac_bits,
                value_bound=fmt.value_bound,
            )
        )
        ones = int(summed.total[layout.size]) if spec.adaptive_clip else 0
        clip = _next_clip(spec, previous, ones, count, notes)
        new_state = GlobalState(round_, out.params, dict(out.state), clip)
    new_state, stop = _stop_state(manifest, previous, new_state, carried, notes)
    return _result(
        layout,
        round_,
        new_state,
        list(summed.included),
        summed.excluded,
        None,
        carried,
        notes,
        stop,
    )


def _mean_delta(
    spec: PrivacySpec,
    total: NDArray[np.int64],
    count: int,
    previous: GlobalState,
    manifest: TaskManifest,
) -> NDArray[np.int64]:
    """The fixed-point mean delta of ``count`` included updates from their exact sum
    (unweighted: under secure aggregation every included client weighs 1)."""
    fmt = manifest.numeric
    if spec.distributed:
        clip = round_clip_norm(spec, previous)
        return decode_mean(total, count, clip, spec.ddp_scale, fmt.frac_bits, fmt.value_bound)
    mean = np.asarray(div_round_half_even(total, count), dtype=np.int64)
    # honest updates are within the bound, so is their mean; anything else saturates
    return np.clip(mean, -fmt.value_bound, fmt.value_bound)


def _to_clients(details: Mapping[str, Any], included: list[int]) -> dict[str, Any]:
    """A pre-aggregator's row indices (``details``) as registered-update indices."""

    def conv(v: Any) -> Any:
        if isinstance(v, list):
            return [conv(x) for x in v]
        return included[int(v)]

    return {k: v if k == "selected_buckets" else conv(v) for k, v in details.items()}


def _enough(rule: AggregationRule, count: int) -> bool:
    if count < 1:
        return False
    try:
        rule.check_num_updates(count)
    except RuleParameterError:
        return False
    return True


def _carry(round_: int, previous: GlobalState) -> GlobalState:
    """The previous parameters, optimiser state and clip norm, relabelled with this round."""
    return GlobalState(round_, previous.params, dict(previous.opt_state), previous.clip_norm)


def stop_rule_of(manifest: TaskManifest) -> StopRule | None:
    """The task's stopping rule, or None when it has none."""
    if manifest.stop_norm is None:
        return None
    return StopRule.of(manifest.stop_norm, manifest.stop_patience, manifest.numeric.frac_bits)


def _stop_state(
    manifest: TaskManifest,
    previous: GlobalState,
    new_state: GlobalState,
    carried: bool,
    notes: dict[str, Any],
) -> tuple[GlobalState, bool]:
    """The new state with the stopping rule's counter, and the round's stop decision."""
    rule = stop_rule_of(manifest)
    if rule is None:
        return new_state, False
    count, stop = rule.step(previous.stop_count or 0, previous.params, new_state.params, carried)
    notes["stop_count"] = count
    return replace(new_state, stop_count=count), stop


def _next_clip(
    spec: PrivacySpec, previous: GlobalState, ones: int, count: int, notes: dict[str, Any]
) -> float | None:
    """The next round's clip norm (adaptive clipping), recorded in ``notes``."""
    if not spec.adaptive_clip:
        return None
    clip = round_clip_norm(spec, previous)
    updated = next_clip_norm_from_count(
        clip,
        ones,
        count,
        spec.clip_bit_epsilon,
        spec.clip_quantile,
        spec.clip_learning_rate,
    )
    notes.update(clip_norm=clip, clip_bits=ones, next_clip_norm=updated)
    return updated


def _result(
    layout: ModelLayout,
    round_: int,
    state: GlobalState,
    included: Sequence[int],
    excluded: dict[int, str],
    selected: tuple[int, ...] | None,
    carried: bool,
    notes: dict[str, Any],
    stop: bool = False,
) -> RoundResult:
    payload = encode_global_state(layout, state)
    return RoundResult(
        round=round_,
        payload=payload,
        digest=content_digest(payload),
        included=tuple(included),
        excluded=excluded,
        selected=selected,
        carried_forward=carried,
        notes=notes,
        stop=stop,
    )
