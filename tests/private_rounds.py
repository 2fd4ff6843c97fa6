"""A private round without a chain: K clients, their payloads, reveals and the key holder's
decryption, as the driver produces them, for tests of execute_round under secagg and HE."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from aggregators.execution import execute_round
from aggregators.private import PrivateInputs, private_dim
from aggregators.registry import make_rule
from clients.release import client_release
from privacy import he, he_round
from privacy import secagg_round as sr
from privacy.client_keys import ClientSecrets
from privacy.reveal_safety import RevealUnsafe
from privacy.spec import PrivacySpec
from protocol.errors import CodecError, HEError
from protocol.fixedpoint import NumericFormat
from protocol.manifest import TaskManifest
from protocol.payloads import GlobalState, ModelLayout, encode_global_state

TASK = "0x00000000000000000000000000000000000000ab"
LAYOUT = ModelLayout.from_spec([("w", (6, 5)), ("b", (7,))])
FMT = NumericFormat(16, 4 << 16)


@lru_cache(maxsize=1)
def he_keys() -> tuple[Any, Any]:
    return he.generate_keypair(1024)  # 1024 bits for test speed; the default is 2048


def manifest(spec: PrivacySpec, rule: str = "fedavg") -> TaskManifest:
    return TaskManifest(
        rule=rule,
        rule_params=dict(make_rule(rule, {}).params),
        numeric=FMT,
        model="mlp",
        input_shape=(1, 8, 8),
        num_classes=10,
        layout=LAYOUT,
        privacy=spec.to_manifest(),
    )


def resolved(mode: str, k: int, **kw: Any) -> PrivacySpec:
    """A resolved spec of ``mode`` for ``k`` clients (HE: with the test key)."""
    base: dict[str, Any] = {"mode": mode, "num_clients": k}
    if "ddp" in mode:
        base.update(mechanism="skellam", target_epsilon=4.0)
    if "he" in mode.split("+"):
        base.update(
            he_public_key=he.public_key_bytes(he_keys()[0]).hex(),
            he_key_holder="0x" + "11" * 20,
        )
    base.update(kw)
    return PrivacySpec(**base).resolve(3)[0]


@dataclass
class Federation:
    """K clients of a private task; :meth:`round` runs one round and returns its result."""

    spec: PrivacySpec
    seed: int = 0
    clip: float = 1.0
    man: TaskManifest = field(init=False)
    secrets: list[ClientSecrets] = field(init=False)
    ctx: sr.SecAggContext = field(init=False)
    peers: dict[int, sr.KeyRecord] = field(init=False)

    def __post_init__(self) -> None:
        k = self.spec.num_clients or 0
        self.man = manifest(self.spec)
        self.secrets = [ClientSecrets(bytes([7, i + 1]) * 16, TASK, i) for i in range(k)]
        enc = {s.index: s.enc_public for s in self.secrets}
        self.ctx = sr.SecAggContext(TASK, self.spec.threshold, enc)
        posted = {s.index: sr.client_key_record(s, 1, self.ctx) for s in self.secrets}
        self.peers, refused = sr.keys_in_force(1, {}, posted, self.ctx)
        assert not refused
        rng = np.random.default_rng(self.seed)
        self.deltas = [rng.normal(0, 0.2, LAYOUT.size) for _ in range(k)]
        state = GlobalState(0, np.zeros(LAYOUT.size, dtype=np.int64), {}, self._clip0())
        self.global_payload = encode_global_state(LAYOUT, state)

    def _clip0(self) -> float | None:
        return self.spec.clip_norm if self.spec.adaptive_clip else None

    def vector(self, i: int, round_: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, i, round_])
        rel = client_release(self.spec, FMT, self.deltas[i], self.clip, rng, rng)
        return rel.vector

    def payload(self, i: int, round_: int) -> bytes:
        vec = self.vector(i, round_)
        if "secagg" in self.spec.components:
            return sr.client_masked_update(
                self.secrets[i], round_, vec, self.peers, self.ctx
            ).to_bytes()
        pk = he.load_public_key(bytes.fromhex(self.spec.he_public_key or ""))
        return he_round.encrypt_payload(
            round_, vec, pk, self.spec.num_clients or 0, task=TASK, client=i
        )

    def inputs(
        self,
        round_: int,
        payloads: list[bytes | None],
        revealers: list[int] | None = None,
        reveal_bytes: dict[int, bytes] | None = None,
    ) -> PrivateInputs:
        k = len(self.secrets)
        included = [i for i in range(k) if payloads[i] is not None]
        reveals: list[tuple[int, bytes | None]] = []
        decryption = None
        if "secagg" in self.spec.components:
            dim = private_dim(self.man, self.spec)
            masked = {
                i: sr.MaskedUpdate.from_bytes(payloads[i] or b"", round_, dim, 1 << 26)
                for i in included
            }
            shares = {i: m.self_mask_shares for i, m in masked.items()}
            for r in included if revealers is None else revealers:
                try:
                    rev = sr.client_reveal(
                        self.secrets[r], round_, included, self.peers, shares, self.ctx
                    )
                except RevealUnsafe:
                    continue  # an honest client reveals nothing for an unsafe included set
                reveals.append((r, (reveal_bytes or {}).get(r, rev.to_bytes())))
        else:
            pk, sk = he_keys()
            dim = private_dim(self.man, self.spec)
            blobs = []
            for i, p in enumerate(payloads):
                if p is None:
                    continue
                try:  # as the key holder: an invalid payload is left out
                    blobs.append(
                        he_round.decode_payload(p, round_, dim, pk, k, 1 << 26, task=TASK, client=i)
                    )
                except (CodecError, HEError):
                    continue
            if len(blobs) >= self.spec.threshold:
                combined = he_round.combine_round(blobs, pk, k)
                decryption = he_round.decrypt_round(round_, combined, sk, k, self.spec.threshold)
        return PrivateInputs(
            clients=tuple(range(k)),
            task=TASK,
            enc_keys=self.ctx.enc_keys,
            peers=self.peers,
            reveals=tuple(reveals),
            decryption=decryption,
        )

    def run(self, round_: int, payloads: list[bytes | None], inputs: PrivateInputs) -> Any:
        return execute_round(
            self.man,
            round_,
            self.global_payload,
            payloads,
            [10] * len(payloads),
            private=inputs,
        )
