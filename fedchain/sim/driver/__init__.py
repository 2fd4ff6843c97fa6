"""The in-process round driver behind ``fedchain demo`` and ``fedchain run``, by concern.

* :mod:`.deployment` — data, model, manifest, contract deployment, node construction;
* :mod:`.loop` — the block loop: every node steps, a block is mined when none acted;
* :mod:`.faults` — what each attempt did (submissions, timeouts, challenges, crashes);
* :mod:`.disputes` — the committee's PBFT verdict carried on-chain;
* :mod:`.records` — the per-round record (``rounds.jsonl``) and ``summary.json``;
* :mod:`.events` — the live event log (``events.jsonl``) the dashboard follows.

:class:`fedchain.sim.runner.Demo` composes them.
"""
