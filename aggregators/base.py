"""The aggregation-rule interface shared by every rule in :mod:`aggregators`.

Fixed-point representation (used by the whole system): a real value ``x`` is carried as the
integer ``q = x * 2**frac_bits``. Client updates (deltas = local - global) arrive as an
``int32`` matrix ``(K, d)`` whose entries the codec guarantees to satisfy
``|q| <= value_bound`` (``value_bound <= 2**30``); the global model is an ``int64`` vector that
must fit ``int32`` after every aggregation.

Rules are pure functions of an :class:`AggregationInput`: no I/O, no randomness, no float
reductions. Every rule returns byte-identical output on every machine, thread count and NumPy
CPU-feature setting (see ``docs/rules.md``). Ties always break by on-chain index (row order).

One rounding rule everywhere: **round half to even** (banker's rounding). It is used by every
integer division (``aggregators.intmath.div_round_half_even``) and by every float64 ->
fixed-point quantisation (``np.rint``, which rounds half to even in IEEE 754).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from protocol.errors import FedchainError, RuleParameterError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "MAX_VALUE_BOUND",
    "AggregationInput",
    "AggregationInputError",
    "AggregationOutput",
    "AggregationRangeError",
    "AggregationRule",
    "ParamSpec",
]

MAX_VALUE_BOUND = 2**30
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

ParamValue = int | float | str


class AggregationInputError(FedchainError, ValueError):
    """The aggregation input is malformed (shape, dtype, bounds, non-positive sample counts)."""


class AggregationRangeError(FedchainError, ArithmeticError):
    """The aggregate does not fit the fixed-point range (new global params must fit int32)."""


@dataclass(frozen=True)
class AggregationInput:
    """Everything a rule may depend on. Rows of ``updates`` are in on-chain registration order."""

    global_params: NDArray[np.int64]  # (d,) fixed-point current global model
    updates: NDArray[np.int32]  # (K, d) quantised deltas; row index = tie-break
    num_samples: NDArray[np.int64]  # (K,) > 0, as registered on-chain
    state: Mapping[str, NDArray[Any]] = field(default_factory=dict)  # server-optimiser state
    frac_bits: int = 16
    value_bound: int = MAX_VALUE_BOUND

    @property
    def num_updates(self) -> int:
        return int(self.updates.shape[0])

    @property
    def dim(self) -> int:
        return int(self.updates.shape[1])

    def validate(self, *, check_values: bool = True) -> None:
        """Check shapes, dtypes and the declared bounds. Raises :class:`AggregationInputError`.

        With ``check_values`` the element-wise bound ``|q| <= value_bound`` is checked too (two
        passes over the matrix): every overflow argument in the rules relies on it. Rules that
        stream the matrix in column chunks pass ``False`` and check each chunk while it is in
        cache (``aggregators.intmath.check_chunk_bound``).
        """
        g, u, n = self.global_params, self.updates, self.num_samples
        if not isinstance(u, np.ndarray) or u.dtype != np.int32 or u.ndim != 2:
            raise AggregationInputError("updates must be a 2-D int32 ndarray (K, d)")
        if not isinstance(g, np.ndarray) or g.dtype != np.int64 or g.ndim != 1:
            raise AggregationInputError("global_params must be a 1-D int64 ndarray (d,)")
        if not isinstance(n, np.ndarray) or n.dtype != np.int64 or n.ndim != 1:
            raise AggregationInputError("num_samples must be a 1-D int64 ndarray (K,)")
        k, d = u.shape
        if k < 1:
            raise AggregationInputError("need at least one update")
        if g.shape[0] != d:
            raise AggregationInputError(
                f"global_params has {g.shape[0]} entries but updates have {d} columns"
            )
        if n.shape[0] != k:
            raise AggregationInputError(f"num_samples has {n.shape[0]} entries for {k} updates")
        if int(n.min()) <= 0:
            raise AggregationInputError("num_samples must all be > 0")
        if not isinstance(self.frac_bits, int) or not 0 <= self.frac_bits <= 30:
            raise AggregationInputError("frac_bits must be an int in [0, 30]")
        vb = self.value_bound
        if not isinstance(vb, int) or isinstance(vb, bool) or not 1 <= vb <= MAX_VALUE_BOUND:
            raise AggregationInputError(f"value_bound must be an int in [1, 2**30], got {vb!r}")
        if check_values and d and (int(u.max()) > vb or int(u.min()) < -vb):
            raise AggregationInputError(f"an update entry exceeds value_bound={vb}")
        if d and (int(g.max()) > INT32_MAX or int(g.min()) < INT32_MIN):
            raise AggregationInputError("global_params do not fit int32")


@dataclass(frozen=True)
class AggregationOutput:
    params: NDArray[np.int64]  # (d,) new global params (fit int32)
    state: dict[str, NDArray[Any]]  # new server-optimiser state ({} for stateless rules)
    selected: tuple[int, ...] | None = None  # rows a selection rule kept (Krum...), for reports
    #: what a pre-aggregator did (NNM neighbourhoods, bucket order, ARC's clipped rows), in
    #: row indices, for reports (``rounds.jsonl``'s ``selection``); never part of the state
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParamSpec:
    """Declaration of one rule parameter.

    ``kind`` is ``int``, ``float`` or ``str``; ``default`` is ``REQUIRED`` when the caller must
    give a value; ``check`` returns an error message (or ``None``) for a converted value.
    """

    name: str
    kind: type
    default: ParamValue | None = None
    required: bool = False
    check: Callable[[Any], str | None] | None = None
    doc: str = ""

    def convert(self, rule: str, value: object) -> ParamValue:
        """Convert ``value`` (possibly a CLI string) to the declared type, or raise."""
        where = f"{rule}: parameter {self.name!r}"
        try:
            if self.kind is int:
                if isinstance(value, bool):
                    raise ValueError
                if isinstance(value, (int, np.integer)):
                    out: ParamValue = int(value)
                elif isinstance(value, str):
                    out = int(value.strip(), 10)
                elif isinstance(value, (float, np.floating)) and float(value).is_integer():
                    out = int(value)
                else:
                    raise ValueError
            elif self.kind is float:
                if isinstance(value, bool):
                    raise ValueError
                if isinstance(value, (int, float, np.integer, np.floating)):
                    out = float(value)
                elif isinstance(value, str):
                    out = float(value.strip())
                else:
                    raise ValueError
                out = out + 0.0  # canonical: -0.0 -> 0.0
            elif self.kind is str:
                if not isinstance(value, str):
                    raise ValueError
                out = value
            else:  # pragma: no cover - programming error
                raise TypeError(f"unsupported parameter kind {self.kind!r}")
        except (ValueError, OverflowError):
            raise RuleParameterError(
                f"{where} must be {self.kind.__name__}, got {value!r}"
            ) from None
        if isinstance(out, float) and not math.isfinite(out):
            raise RuleParameterError(f"{where} must be finite, got {value!r}")
        if self.check is not None:
            msg = self.check(out)
            if msg:
                raise RuleParameterError(f"{where} {msg}, got {out!r}")
        return out


class AggregationRule(ABC):
    """Base class of every aggregation rule.

    Subclasses declare ``name`` and ``param_specs``; ``__init__`` converts and validates all
    parameters (raising :class:`RuleParameterError` before any work), then calls
    :meth:`_validate_params` for cross-parameter checks.
    """

    name: ClassVar[str]
    param_specs: ClassVar[tuple[ParamSpec, ...]] = ()
    #: True when the rule carries server-optimiser state through ``AggregationInput.state``.
    stateful: ClassVar[bool] = False
    #: True when the rule depends on the updates only through their mean (the FedAvg
    #: family): it then runs under secure aggregation or HE, which reveal only the sum.
    sum_based: ClassVar[bool] = False
    #: One line for ``docs/rules.md`` / ``--help``.
    summary: ClassVar[str] = ""

    def __init__(self, **params: object) -> None:
        specs = {s.name: s for s in self.param_specs}
        unknown = sorted(set(params) - set(specs))
        if unknown:
            known = ", ".join(sorted(specs)) or "none"
            raise RuleParameterError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)} (known: {known})"
            )
        values: dict[str, ParamValue] = {}
        for spec in self.param_specs:
            if spec.name in params:
                values[spec.name] = spec.convert(self.name, params[spec.name])
            elif spec.required:
                raise RuleParameterError(f"{self.name}: parameter {spec.name!r} is required")
            else:
                assert spec.default is not None
                values[spec.name] = spec.convert(self.name, spec.default)
        self._params = values
        self._validate_params()

    def _validate_params(self) -> None:  # noqa: B027 - optional hook
        """Cross-parameter checks; raise :class:`RuleParameterError`."""

    @property
    def params(self) -> dict[str, ParamValue]:
        """Canonical parameters (every declared parameter, defaults included)."""
        return dict(self._params)

    def check_num_updates(self, k: int) -> None:
        """Raise :class:`RuleParameterError` if ``k`` updates are too few for the parameters."""
        if k < 1:
            raise RuleParameterError(f"{self.name}: needs at least 1 update, got {k}")

    def min_updates(self) -> int:
        """Smallest K accepted by :meth:`check_num_updates`."""
        return 1

    def prepare(self, inp: AggregationInput, *, check_values: bool = True) -> None:
        """Common pre-flight: parameter/K check first, then input validation."""
        if isinstance(inp.updates, np.ndarray) and inp.updates.ndim == 2:
            self.check_num_updates(int(inp.updates.shape[0]))
        inp.validate(check_values=check_values)

    @abstractmethod
    def aggregate(self, inp: AggregationInput) -> AggregationOutput:
        """Compute the new global params (and state) from ``inp``."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self._params.items()))
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AggregationRule):
            return NotImplemented
        return self.name == other.name and self._params == other._params

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self._params.items()))))
