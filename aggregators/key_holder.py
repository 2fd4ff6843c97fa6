"""The HE task key holder: decrypts each round's sum, never an individual update.

The key holder owns the Paillier private key whose public key is in the task manifest. It is
registered as a client of the task (it signs its records) but never submits an update.
Driven by chain state like every node: when the current round is Revealing (its included
set is fixed), it fetches the included updates exactly as aggregators do
(:func:`adapters.round_inputs.fetch_included`), keeps those that decode under the task's
key, combines them (the same deterministic product every aggregator computes), decrypts
the combination and publishes the verifiable decryption as a ``REVEAL`` record
(:func:`privacy.he_round.decrypt_round`). It refuses a combination of fewer than the task's
threshold of updates. A restarted key holder finds its record on-chain and does nothing
twice; its decryption is deterministic anyway (the plaintexts and the randomness are
functions of the ciphertexts).
"""

from __future__ import annotations

from typing import Any

from eth_account.signers.local import LocalAccount

from adapters.contract import Phase, TaskContract
from adapters.privacy_records import REVEAL, PrivacyRecordsContract
from adapters.round_inputs import fetch_included
from adapters.storage import ContentStore
from aggregators.node import AggregatorEvent
from privacy import he, he_round
from privacy.spec import PrivacySpec
from protocol.errors import CodecError, ContractRevert, HEError
from protocol.manifest import TaskManifest
from protocol.metrics import PhaseClock
from protocol.payloads import update_max_bytes

__all__ = ["KeyHolderNode"]


class KeyHolderNode:
    """The task's key holder (see the module docstring)."""

    def __init__(
        self,
        name: str,
        account: LocalAccount,
        task: TaskContract,
        records: PrivacyRecordsContract,
        store: ContentStore,
        manifest: TaskManifest,
        private_key: Any,
        *,
        clock: PhaseClock | None = None,
    ) -> None:
        self.name = name
        self.account = account
        self.address: str = account.address
        self.task = task
        self.records = records
        self.store = store
        self.manifest = manifest
        self.private_key = private_key
        self.clock = clock or PhaseClock()
        self.spec = PrivacySpec.from_manifest(manifest.privacy)
        if self.spec.he_public_key != he.public_key_bytes(private_key.public_key).hex():
            raise HEError("the key holder's private key does not match the manifest's public key")
        self.dim = self.spec.vector_dim(manifest.layout.size)
        width = (int(private_key.public_key.nsquare).bit_length() + 7) // 8
        self.max_bytes = update_max_bytes(manifest.layout) + width * (self.dim + 1) + 4096
        self._done: set[int] = set()
        self._index: int | None = None

    def step(self) -> list[AggregatorEvent]:
        """Publish the current round's decryption once the round is Revealing."""
        round_ = self.task.current_round()
        if round_ == 0 or round_ in self._done or not self._revealing(round_):
            return []
        if self._index is None:
            self._index = self.task.client_index(self.address)
        if self._index in self.records.first_payloads(round_, REVEAL):
            self._done.add(round_)  # published before a restart
            return []
        with self.clock.phase(round_, "decrypt"):
            try:
                decryption = self.decrypt(round_)
            except HEError as exc:
                self._done.add(round_)
                return [AggregatorEvent(round_, "decrypt-refused", {"error": str(exc)})]
        try:
            receipt = self.records.submit_record(self.account, round_, REVEAL, decryption)
        except ContractRevert as exc:
            return [AggregatorEvent(round_, "decryption-refused", {"error": exc.error_name})]
        self._done.add(round_)
        return [
            AggregatorEvent(
                round_,
                "publishDecryption",
                {"bytes": len(decryption), "gas": int(receipt["gasUsed"])},
            )
        ]

    def _revealing(self, round_: int) -> bool:
        return self.task.phase(round_) == Phase.AGGREGATING and self.records.revealing(round_)

    def decrypt(self, round_: int) -> bytes:
        """The decryption record of ``round_``'s included updates (HEError if too few)."""
        public_key = self.private_key.public_key
        updates, payloads = fetch_included(self.task, self.store, round_)
        k = self.spec.num_clients or 0
        blobs = []
        for update, payload in zip(updates, payloads, strict=True):
            client = self.task.client_index(update.client)
            if payload is None or client is None:
                continue
            try:
                blobs.append(
                    he_round.decode_payload(
                        payload,
                        round_,
                        self.dim,
                        public_key,
                        k,
                        self.max_bytes,
                        task=self.task.address,
                        client=client,
                    )
                )
            except (CodecError, HEError):
                continue  # invalid: aggregators exclude it from the combination too
        if len(blobs) < self.spec.threshold:
            raise HEError(
                f"round {round_}: {len(blobs)} valid included updates, fewer than the "
                f"threshold {self.spec.threshold}: not decrypting"
            )
        combined = he_round.combine_round(blobs, public_key, k)
        return he_round.decrypt_round(round_, combined, self.private_key, k, self.spec.threshold)
