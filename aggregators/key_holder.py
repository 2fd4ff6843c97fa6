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

Under threshold decryption (``share``: a committee member's key share of the manifest's
:class:`~privacy.threshold_paillier.ThresholdKey`) the same node publishes the member's
decryption shares instead (:func:`privacy.he_round.threshold_shares`, each with its proof);
no single member can decrypt, aggregators combine any ``t`` valid ones.
"""

from __future__ import annotations

from typing import Any

from eth_account.signers.local import LocalAccount
from phe import paillier

from adapters.contract import Phase, TaskContract
from adapters.privacy_records import REVEAL, PrivacyRecordsContract
from adapters.round_inputs import fetch_included
from adapters.storage import ContentStore
from aggregators.node import AggregatorEvent
from privacy import he, he_round
from privacy.spec import PrivacySpec
from privacy.threshold_paillier import KeyShare, ThresholdKey
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
        share: tuple[ThresholdKey, KeyShare] | None = None,
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
        self.share = share
        if share is not None:  # a member of the threshold-decryption committee
            if self.spec.he_threshold_key != share[0].to_bytes().hex():
                raise HEError("the member's threshold key is not the manifest's")
            self.public_key = paillier.PaillierPublicKey(share[0].n)
        else:
            self.public_key = private_key.public_key
        if self.spec.he_public_key != he.public_key_bytes(self.public_key).hex():
            raise HEError("the key holder's private key does not match the manifest's public key")
        self.dim = self.spec.vector_dim(manifest.layout.size)
        width = (int(self.public_key.nsquare).bit_length() + 7) // 8
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
            # e.g. the reveal window closed while it decrypted: the record cannot be posted
            # any more in this round (retrying would only recompute it), so it gives up
            self._done.add(round_)
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
        public_key = self.public_key
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
        if self.share is not None:
            key, share = self.share
            return he_round.threshold_shares(
                round_, combined, key, share, k, self.task.address, self.spec.threshold
            )
        return he_round.decrypt_round(round_, combined, self.private_key, k, self.spec.threshold)
