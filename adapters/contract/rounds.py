"""Round lifecycle: start, attest, submit the aggregate, advance the attempt, finalize,
skip, abort."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eth_account.signers.local import LocalAccount

from adapters.contract.types import bitmap_words
from adapters.contract.views import ViewsMixin


class RoundsMixin(ViewsMixin):
    """Round lifecycle transactions."""

    def start(self, acct: LocalAccount) -> Any:
        return self._tx(acct, "start")

    def attest(self, acct: LocalAccount, round: int, held: Sequence[bool]) -> Any:
        """Attest to holding (fetched and pinned) the updates of ``round`` marked in ``held``
        (one flag per registered update, in registration order)."""
        return self._tx(acct, "attest", round, bitmap_words(held))

    def submit_aggregate(
        self,
        acct: LocalAccount,
        round: int,
        digest: bytes,
        value: int | None = None,
        stop: bool = False,
    ) -> Any:
        """Submit the aggregate and the stopping rule's decision (``stop``: the round ends
        the task once finalized); bonds ``aggregate_bond`` unless ``value`` is given."""
        bond = self.config().aggregate_bond if value is None else value
        return self._tx(acct, "submitAggregate", round, bytes(digest), bool(stop), value=bond)

    def advance_attempt(self, acct: LocalAccount, round: int) -> Any:
        return self._tx(acct, "advanceAttempt", round)

    def finalize(self, acct: LocalAccount, round: int) -> Any:
        return self._tx(acct, "finalize", round)

    def skip_round(self, acct: LocalAccount, round: int) -> Any:
        """End a round whose collection timed out short of min_updates (model carried)."""
        return self._tx(acct, "skipRound", round)

    def abort_task(self, acct: LocalAccount) -> Any:
        """End a task without progress for abort_timeout blocks (stakes become releasable)."""
        return self._tx(acct, "abortTask")
