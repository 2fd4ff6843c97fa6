"""``fedchain status``: what a deployed task's contract says, over any JSON-RPC node.

Reads only views: the task's configuration, the committee (stake, active, slashed), the
current round and phase, and every finalized round's digest. A wrong address — no code, or
code that is not a fedchain task — is a one-line error naming ``--task`` and the address.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from eth_utils.address import is_address, to_checksum_address

from adapters.chain import Chain
from adapters.contract import Phase, TaskContract
from fedchain.config import short_reason
from protocol.errors import ChainError, ConfigError


def attach_task(chain: Chain, address: str) -> TaskContract:
    """Attach to the task at ``address``, refusing anything that is not a fedchain task."""
    if not is_address(address):
        raise ConfigError(f"--task {address!r}: not an Ethereum address (0x + 40 hex digits)")
    checksummed = to_checksum_address(address)
    if not chain.w3.eth.get_code(checksummed):
        raise ConfigError(f"--task {address!r}: no contract at this address on this chain")
    task = TaskContract(chain, checksummed)
    try:
        task.config()
        task.committee_size()
        task.current_round()
    except Exception as exc:  # any revert or undecodable answer: some other contract
        raise ConfigError(
            f"--task {address!r}: the contract there is not a fedchain task "
            f"(its views do not answer like FedChainTask: {type(exc).__name__})"
        ) from exc
    return task


def task_status(rpc_url: str, address: str) -> dict[str, Any]:
    """A JSON-ready description of the task at ``address`` on the node at ``rpc_url``."""
    try:
        chain = Chain.connect(rpc_url, num_accounts=0)
    except ChainError as exc:
        raise ConfigError(f"--rpc-url {rpc_url!r}: {short_reason(exc)}") from exc
    task = attach_task(chain, address)
    cfg = task.config()
    current = task.current_round()
    committee = []
    for member in task.aggregators():
        info = task.aggregator_info(member)
        committee.append(
            {
                "address": member,
                "stake_wei": info.stake,
                "active": info.active,
                "slashed": info.slashed,
            }
        )
    rounds = []
    last = cfg.num_rounds if task.task_completed() else current
    for r in range(1, last + 1):
        phase = task.phase(r)
        accumulator, count = task.update_accumulator(r)
        rounds.append(
            {
                "round": r,
                "phase": phase.name.lower(),
                "updates": count,
                # None once the contract keeps only the round's count (rounds before the
                # previous one)
                "update_accumulator": None if accumulator is None else f"{accumulator:056x}",
                "digest": task.round_digest(r).hex() if phase == Phase.FINALIZED else None,
            }
        )
    config = {k: (v.hex() if isinstance(v, bytes) else v) for k, v in asdict(cfg).items()}
    return {
        "task": task.address,
        "chain_id": int(chain.w3.eth.chain_id),
        "block": chain.block_number(),
        "config": config,
        "started": task.task_started(),
        "completed": task.task_completed(),
        "current_round": current,
        "global_model_digest": task.global_model_digest().hex(),
        "committee": committee,
        "rounds": rounds,
    }


def format_status(status: dict[str, Any]) -> str:
    """Human-readable lines for :func:`task_status`'s result."""
    state = "completed" if status["completed"] else "running" if status["started"] else "idle"
    lines = [
        f"task {status['task']} on chain {status['chain_id']} (block {status['block']})",
        f"  rule params hash {status['config']['rule_params_hash']}",
        f"  rounds {status['config']['num_rounds']}, current {status['current_round']}, {state}",
        f"  global model {status['global_model_digest']}",
        "  committee:",
    ]
    for m in status["committee"]:
        flags = "slashed" if m["slashed"] else "active" if m["active"] else "inactive"
        lines.append(f"    {m['address']}  stake {m['stake_wei'] / 1e18:.3f} ETH  {flags}")
    lines.append("  rounds:")
    for r in status["rounds"]:
        lines.append(
            f"    {r['round']:3d}  {r['phase']:<11} {r['updates']:6d} updates  {r['digest'] or ''}"
        )
    return "\n".join(lines)
