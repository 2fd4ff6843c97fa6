"""Re-execution of one round: a pure function from bytes to bytes.

Every aggregator — the one chosen to submit and every verifier — calls
:func:`execute_round` with the previous global state's bytes and the payloads registered
on-chain for the round (in registration order). It decodes and checks each update against
the task manifest, excludes invalid ones deterministically (the reason is reported), runs
the task's rule and encodes the new global state. Same inputs, same bytes, on any machine:
that is what makes a mismatch proof of a faulty aggregate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from aggregators.base import AggregationInput, AggregationRule
from aggregators.registry import make_rule
from protocol.cid import content_digest
from protocol.errors import CodecError, RuleParameterError
from protocol.manifest import TaskManifest
from protocol.payloads import GlobalState, decode_global_state, decode_update, encode_global_state

UNAVAILABLE = "payload unavailable"


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


def rule_for(manifest: TaskManifest) -> AggregationRule:
    """Instantiate the manifest's rule (validating its parameters)."""
    return make_rule(manifest.rule, manifest.rule_params)


def execute_round(
    manifest: TaskManifest,
    round_: int,
    global_payload: bytes,
    updates: Sequence[bytes | None],
    num_samples: Sequence[int],
    rule: AggregationRule | None = None,
) -> RoundResult:
    """Aggregate round ``round_`` exactly as every honest node does.

    ``updates[i]`` is the payload registered at on-chain index ``i`` (``None`` when it could
    not be fetched). Invalid or unavailable updates are excluded. If fewer valid updates
    remain than the rule needs, the global parameters and optimiser state are carried
    forward unchanged (the round still advances), so a round can never be stalled by
    malformed client payloads.
    """
    if len(updates) != len(num_samples):
        raise ValueError("updates and num_samples differ in length")
    layout, fmt = manifest.layout, manifest.numeric
    previous = decode_global_state(layout, global_payload)
    rule = rule if rule is not None else rule_for(manifest)
    rows: list[np.ndarray] = []
    weights: list[int] = []
    included: list[int] = []
    excluded: dict[int, str] = {}
    for index, payload in enumerate(updates):
        if payload is None:
            excluded[index] = UNAVAILABLE
            continue
        try:
            rows.append(decode_update(layout, fmt, round_, payload))
        except CodecError as exc:
            excluded[index] = f"invalid: {exc}"
            continue
        weights.append(int(num_samples[index]))
        included.append(index)
    selected: tuple[int, ...] | None = None
    carried = False
    try:
        if not rows:
            raise RuleParameterError("no valid update")
        rule.check_num_updates(len(rows))
    except RuleParameterError:
        carried = True
    if carried:
        new_state = GlobalState(round_, previous.params, dict(previous.opt_state))
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
        new_state = GlobalState(round_, out.params, dict(out.state))
    payload = encode_global_state(layout, new_state)
    return RoundResult(
        round=round_,
        payload=payload,
        digest=content_digest(payload),
        included=tuple(included),
        excluded=excluded,
        selected=selected,
        carried_forward=carried,
    )
