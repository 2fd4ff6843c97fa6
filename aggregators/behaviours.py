"""Aggregator behaviours: honest, and every kind of faulty aggregator of the threat model.

A behaviour decides three things for an aggregator, per round:

* what it *publishes* when the contract chooses it (``publish``): the honest aggregate, a
  tampered one (noise, scaling, sign flip, stale model, wrong rule, dropped or substituted
  updates), nothing at all (withhold), a digest whose bytes it never makes available, or the
  honest aggregate's bytes handed to only some nodes (``partial``, ``params.to``: committee
  indices) and not served by itself;
* what it *attests* to holding after collection closes (``attest``: honest, ``all`` —
  including payloads it never fetched — or ``none``);
* whether it *challenges* others' aggregates honestly, never, or frivolously (``challenger``);
* how it *votes* in PBFT disputes (``pbft``: honest, lying, equivocating as primary, silent);
* optionally, the phase at which it crashes (``crash_at``).

The tampering functions are pure: they take the round's inputs and the honest result and
return bytes. Randomness (noise) is seeded explicitly so scenarios are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aggregators.execution import RoundResult, execute_round
from aggregators.private import PrivateInputs
from aggregators.registry import make_rule
from protocol.errors import ConfigError
from protocol.fixedpoint import INT32_MAX, quantise
from protocol.manifest import TaskManifest
from protocol.payloads import GlobalState, decode_global_state, encode_global_state, encode_update


@dataclass(frozen=True)
class RoundContext:
    """The inputs of one round as the chosen aggregator saw them, and its honest result."""

    manifest: TaskManifest
    round: int
    global_payload: bytes
    updates: Sequence[bytes | None]
    num_samples: Sequence[int]
    honest: RoundResult
    #: the round's published private context (secure aggregation / HE), else None
    private: PrivateInputs | None = None


@dataclass(frozen=True)
class Publication:
    """What a (possibly faulty) aggregator submits: the payload, and whether it stores it."""

    payload: bytes
    available: bool = True
    #: committee indices the bytes are handed to (``partial``): the publisher keeps none
    push_to: tuple[int, ...] = ()
    #: the stop claim submitted with it (None: the honest stopping decision)
    stop: bool | None = None


def _with_params(ctx: RoundContext, params: np.ndarray) -> bytes:
    layout = ctx.manifest.layout
    honest = decode_global_state(layout, ctx.honest.payload)
    clipped = np.clip(params, -INT32_MAX, INT32_MAX).astype(np.int64)
    return encode_global_state(
        layout,
        GlobalState(ctx.round, clipped, honest.opt_state, honest.clip_norm, honest.stop_count),
    )


def _previous_and_honest(ctx: RoundContext) -> tuple[np.ndarray, np.ndarray]:
    layout = ctx.manifest.layout
    previous = decode_global_state(layout, ctx.global_payload).params
    honest = decode_global_state(layout, ctx.honest.payload).params
    return previous, honest


def tamper_noise(ctx: RoundContext, sigma: float = 0.1, seed: int = 0) -> bytes:
    """Honest aggregate plus Gaussian noise N(0, sigma^2) on every coordinate."""
    _, honest = _previous_and_honest(ctx)
    rng = np.random.default_rng([seed, ctx.round])
    noise = quantise(rng.normal(0.0, sigma, honest.shape), ctx.manifest.numeric.frac_bits)
    return _with_params(ctx, honest + noise)


def tamper_scale(ctx: RoundContext, factor: float = 10.0) -> bytes:
    """Scale the aggregated step: previous + factor * (honest - previous)."""
    previous, honest = _previous_and_honest(ctx)
    step = np.rint((honest - previous).astype(np.float64) * factor).astype(np.int64)
    return _with_params(ctx, previous + step)


def tamper_sign_flip(ctx: RoundContext) -> bytes:
    """Apply the aggregated step backwards: previous - (honest - previous)."""
    previous, honest = _previous_and_honest(ctx)
    return _with_params(ctx, 2 * previous - honest)


def tamper_stale(ctx: RoundContext) -> bytes:
    """Re-submit the previous global model (relabelled with this round)."""
    previous, _ = _previous_and_honest(ctx)
    return _with_params(ctx, previous)


def tamper_wrong_rule(ctx: RoundContext, rule: str = "median") -> bytes:
    """Aggregate the right inputs with another rule (e.g. median instead of FedAvg)."""
    if rule == ctx.manifest.rule:
        raise ConfigError(f"wrong_rule needs a rule other than the task's ({rule!r})")
    other = make_rule(rule, {})
    return execute_round(
        ctx.manifest,
        ctx.round,
        ctx.global_payload,
        ctx.updates,
        ctx.num_samples,
        rule=other,
        private=ctx.private,
    ).payload


def tamper_drop(ctx: RoundContext, k: int = 1) -> bytes:
    """Silently leave out the last ``k`` registered updates."""
    if k < 1:
        raise ConfigError("drop needs k >= 1")
    kept = list(ctx.updates)
    for i in range(max(0, len(kept) - k), len(kept)):
        kept[i] = None
    return execute_round(
        ctx.manifest, ctx.round, ctx.global_payload, kept, ctx.num_samples, private=ctx.private
    ).payload


def tamper_substitute(ctx: RoundContext, index: int = 0, value: float = 1.0) -> bytes:
    """Replace registered update ``index`` by a fabricated one (every coordinate ``value``)."""
    layout, fmt = ctx.manifest.layout, ctx.manifest.numeric
    fake = quantise(np.full(layout.size, value), fmt.frac_bits, fmt.value_bound)
    forged = list(ctx.updates)
    if not forged:
        raise ConfigError("substitute needs at least one registered update")
    forged[index % len(forged)] = encode_update(layout, ctx.round, fake)
    return execute_round(
        ctx.manifest, ctx.round, ctx.global_payload, forged, ctx.num_samples, private=ctx.private
    ).payload


Tamper = Callable[..., bytes]

#: Faulty-aggregate kinds: name -> pure tampering function.
TAMPERS: dict[str, Tamper] = {
    "noise": tamper_noise,
    "scale": tamper_scale,
    "sign_flip": tamper_sign_flip,
    "stale": tamper_stale,
    "wrong_rule": tamper_wrong_rule,
    "drop": tamper_drop,
    "substitute": tamper_substitute,
}

#: Wrong stopping-rule claims (``aggregators.stopping``) next to the honest aggregate's
#: bytes: ``false_stop`` claims the task ends when the rule says it does not, ``omit_stop``
#: claims it goes on when the rule says stop (each honest in the other case).
STOP_CLAIMS = ("false_stop", "omit_stop")

#: Every publish behaviour: the tampers, the stop claims, plus honest, withhold and
#: unavailable.
PUBLISH_BEHAVIOURS = ("honest", "withhold", "unavailable", "partial", *TAMPERS, *STOP_CLAIMS)
ATTESTERS = ("honest", "all", "none")
CHALLENGERS = ("honest", "frivolous", "never")
PBFT_BEHAVIOURS = ("honest", "lying", "equivocating", "double", "silent", "colluding")
CRASH_PHASES = ("before-submit", "after-publish", "before-verify", "before-finalize")


@dataclass(frozen=True)
class Behaviour:
    """How one aggregator behaves; ``rounds`` limits the publish fault to those rounds."""

    publish: str = "honest"
    params: Mapping[str, Any] = field(default_factory=dict)
    rounds: frozenset[int] | None = None
    challenger: str = "honest"
    pbft: str = "honest"
    attest: str = "honest"
    crash_at: str | None = None
    crash_round: int | None = None
    restart_after_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.publish not in PUBLISH_BEHAVIOURS:
            raise ConfigError(
                f"unknown aggregator behaviour {self.publish!r}; known: {list(PUBLISH_BEHAVIOURS)}"
            )
        if self.challenger not in CHALLENGERS:
            raise ConfigError(f"challenger must be one of {CHALLENGERS}, got {self.challenger!r}")
        if self.pbft not in PBFT_BEHAVIOURS:
            raise ConfigError(f"pbft must be one of {PBFT_BEHAVIOURS}, got {self.pbft!r}")
        if self.attest not in ATTESTERS:
            raise ConfigError(f"attest must be one of {ATTESTERS}, got {self.attest!r}")
        if self.publish == "partial":
            to = self.params.get("to")
            if not isinstance(to, list) or not all(isinstance(i, int) for i in to):
                raise ConfigError("behaviour 'partial' needs params.to, a list of indices")
            unknown = sorted(set(self.params) - {"to"})
            if unknown:
                raise ConfigError(f"behaviour 'partial' does not take {unknown}; accepted: ['to']")
        if self.publish in STOP_CLAIMS and self.params:
            raise ConfigError(f"behaviour {self.publish!r} takes no params")
        if self.crash_at is not None and self.crash_at not in CRASH_PHASES:
            raise ConfigError(f"crash_at must be one of {CRASH_PHASES}, got {self.crash_at!r}")
        if self.publish in TAMPERS:
            import inspect

            accepted = list(inspect.signature(TAMPERS[self.publish]).parameters)[1:]
            unknown = sorted(set(self.params) - set(accepted))
            if unknown:
                raise ConfigError(
                    f"behaviour {self.publish!r} does not take {unknown}; accepted: {accepted}"
                )

    @property
    def is_honest(self) -> bool:
        return (
            self.publish == "honest"
            and self.challenger == "honest"
            and self.pbft == "honest"
            and self.attest == "honest"
            and self.crash_at is None
        )

    def faulty_in(self, round_: int) -> bool:
        """True if this behaviour publishes a faulty aggregate (or none) in ``round_``."""
        return self.publish != "honest" and (self.rounds is None or round_ in self.rounds)

    def publication(self, ctx: RoundContext) -> Publication | None:
        """What to submit for ``ctx`` (``None``: withhold, never submit)."""
        if not self.faulty_in(ctx.round):
            return Publication(ctx.honest.payload)
        if self.publish == "withhold":
            return None
        if self.publish == "unavailable":
            return Publication(ctx.honest.payload, available=False)
        if self.publish == "partial":
            to = tuple(int(i) for i in self.params["to"])
            return Publication(ctx.honest.payload, available=False, push_to=to)
        if self.publish in STOP_CLAIMS:
            return Publication(ctx.honest.payload, stop=self.publish == "false_stop")
        return Publication(TAMPERS[self.publish](ctx, **dict(self.params)))


HONEST = Behaviour()
