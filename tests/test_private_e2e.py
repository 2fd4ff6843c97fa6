"""Secure aggregation, distributed DP and HE end to end: demos, the malicious-aggregator
scenarios (rejected exactly as in plaintext, final model byte-identical to the honest
twin's), a dropout recovered from published reveals, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.contract import TaskContract
from adapters.storage import get_by_digest
from fedchain.cli import main
from fedchain.sim.runner import Demo, DemoConfig
from protocol.errors import CodecError
from protocol.payloads import decode_update

SCENARIOS = Path(__file__).parent.parent / "scenarios"
SAME = ("faulty_aggregates", "rejected", "false_rejections", "faulty_finalized", "withheld")


def _run(tmp_path: Path, name: str) -> tuple[dict, dict, dict]:
    """Run scenario ``name``; its verdict, its summary and its honest twin's summary."""
    out = tmp_path / name
    assert main(["run", str(SCENARIOS / name), "--out", str(out), "--quiet", "--json"]) == 0
    run_dir = next(p for p in out.iterdir() if not p.name.endswith("-honest"))
    twin_dir = next(p for p in out.iterdir() if p.name.endswith("-honest"))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    twin = json.loads((twin_dir / "summary.json").read_text())
    return verdict, summary, twin


@pytest.mark.slow
@pytest.mark.parametrize("name", ["secagg-agg-noise.toml", "he-agg-noise.toml"])
def test_faulty_aggregate_under_private_sums_is_rejected_as_in_plaintext(
    tmp_path: Path, name: str
) -> None:
    plain, _, _ = _run(tmp_path, "agg-noise.toml")
    verdict, summary, twin = _run(tmp_path, name)
    assert {k: verdict["faults"][k] for k in SAME} == {k: plain["faults"][k] for k in SAME}
    assert verdict["faults"]["rejected"] == 1 and verdict["outcome"] == "safe"
    assert verdict["faults"]["detection_blocks_mean"] == plain["faults"]["detection_blocks_mean"]
    assert summary["privacy"]["mode"] == ("ddp+secagg" if "secagg" in name else "he")
    # the final model is byte-identical to the honest twin's (same digest, same CID)
    assert summary["final_model_digest"] == twin["final_model_digest"]
    assert summary["final_model_cid"] == twin["final_model_cid"]
    assert verdict["identical_to_honest"] is True


@pytest.mark.slow
def test_a_dropped_client_is_recovered_from_published_reveals(tmp_path: Path) -> None:
    verdict, summary, twin = _run(tmp_path, "secagg-dropout.toml")
    assert verdict["faults"]["rejected"] == 1 and verdict["identical_to_honest"] is True
    assert summary["final_model_digest"] == twin["final_model_digest"]
    out = tmp_path / "secagg-dropout.toml"
    run_dir = next(p for p in out.iterdir() if not p.name.endswith("-honest"))
    rounds = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
    first = rounds[0]
    # the dropped set is exactly the client the contract did not record in round 1
    assert first["privacy"]["aggregation"]["dropped"] == [0]
    assert first["privacy"]["aggregation"]["peers"] == 6
    assert first["updates_registered"] == 5
    assert all(r["finalized"] for r in rounds)


@pytest.mark.slow
@pytest.mark.parametrize("privacy", ["secagg", "ddp+secagg", "he"])
def test_private_demo_finalizes_every_round_and_hides_updates(tmp_path: Path, privacy: str) -> None:
    kw: dict[str, object] = {}
    if "ddp" in privacy:
        kw.update(target_epsilon=8.0, target_delta=1e-5)
    if "he" in privacy:
        kw.update(he_key_bits=1024)
    cfg = DemoConfig(
        clients=4,
        aggregators=3,
        rounds=2,
        epochs=1,
        out=str(tmp_path),
        challenge_window=2,
        privacy=privacy,
        **kw,  # type: ignore[arg-type]
    )
    demo = Demo(cfg)
    summary = demo.run().summary
    assert summary["rounds_finalized"] == 2 and not summary["safety_violated"]
    assert summary["privacy"]["mode"] == privacy
    if "ddp" in privacy:
        assert 0 < summary["privacy"]["epsilon_spent"] <= 8.0
    # what the chain and the store hold of a client's update is masked or encrypted: the
    # registered payload is not a plaintext update of the task's layout
    dep = demo.deployment
    task = TaskContract.at(dep.chain, dep.task.address)
    first = task.updates(1)[0]
    payload = get_by_digest(dep.store, first.digest)
    with pytest.raises(CodecError):
        decode_update(dep.manifest.layout, dep.manifest.numeric, 1, payload)


def test_reveal_window_widens_for_the_in_process_reveal_batches() -> None:
    """Under secure aggregation the window holds one block per batch of reveals plus two,
    and the submit timeout keeps the aggregator's time after it; explicit wider values and
    modes without reveals by clients are left alone."""
    from fedchain.config import RECORD_BATCH

    small = DemoConfig(clients=10, privacy="secagg")
    assert (small.reveal_blocks(), small.submit_blocks()) == (3, 10)
    k = 3 * RECORD_BATCH + 1  # four batches of reveals
    big = DemoConfig(clients=k, privacy="ddp+secagg", target_epsilon=8.0)
    assert big.reveal_blocks() == 6 and big.submit_blocks() == 13
    assert big.privacy_spec().reveal_window == 6
    wide = DemoConfig(clients=k, privacy="secagg", reveal_window=9, submit_timeout=15)
    assert (wide.reveal_blocks(), wide.submit_blocks()) == (9, 15)
    assert DemoConfig(clients=k, privacy="he").reveal_blocks() == 3


@pytest.mark.slow
def test_many_clients_reveal_within_the_window(tmp_path: Path) -> None:
    """76 clients' reveals take four relayed batches (four blocks in-process): before the
    window widened with them, reveals were refused once the 3-block window closed and the
    round never finalized."""
    from fedchain.config import RECORD_BATCH

    k = 3 * RECORD_BATCH + 1
    cfg = DemoConfig(
        clients=k,
        aggregators=1,
        rounds=1,
        epochs=1,
        dataset="mixture",
        model="logreg",
        attest_window=0,
        challenge_window=1,
        privacy="ddp+secagg",
        target_epsilon=8.0,
        clip_norm=10.0,
        out=str(tmp_path),
    )
    demo = Demo(cfg)
    summary = demo.run().summary
    assert summary["rounds_finalized"] == 1
    task = demo.deployment.task
    assert task.config().submit_timeout == cfg.submit_blocks() > cfg.submit_timeout
    events = [json.loads(x) for x in (demo.run_dir / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["kind"] == "records_refused"]
    reveals = [e for e in events if e["kind"] == "records" and e["kinds"] == ["REVEAL"]]
    assert sum(e["count"] for e in reveals) == k and len(reveals) == 4
