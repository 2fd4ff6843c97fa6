"""The dashboard's pure cores: the event fold, SVG charts, forms from the CLI parser, run
discovery, file tailing, the testnet log mapping, the CLI's bad-input check and the
loopback-only server options; and that an installed package carries the page assets."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedchain.cli import build_parser, check_command, main
from fedchain.dashboard import discovery, forms, svg
from fedchain.dashboard.model import RunView
from fedchain.dashboard.render import run_panels
from fedchain.dashboard.server import check_host
from fedchain.dashboard.sources import LineTail, RunSource
from fedchain.dashboard.testnet_view import NodeLogMapper, run_started
from protocol.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
ETH = 10**18


def ev(t: float, kind: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "kind": kind, **fields}


def _dispute_run() -> list[dict[str, Any]]:
    """A two-round run: round 1's first aggregate is rejected by PBFT, its submitter slashed;
    round 1's attempt 1 times out; round 2 has an upheld (frivolous) challenge."""
    aggs = [{"name": f"aggregator-{i}", "address": f"0x{i}"} for i in range(4)]
    return [
        ev(
            0.0,
            "run_started",
            name="x",
            run_kind="run",
            rounds=2,
            clients=3,
            rule="fedavg",
            aggregators=aggs,
            byzantine=[0],
            bonds={"stake": ETH},
        ),
        ev(
            0.1,
            "stakes",
            aggregators={
                a["name"]: {"stake": ETH, "active": True, "slashed": False, "credits": 0}
                for a in aggs
            },
            treasury=0,
        ),
        ev(0.2, "phase", round=1, attempt=0, phase="collecting"),
        *[ev(0.3, "update_registered", round=1, client=f"client-{i}", index=i) for i in range(3)],
        ev(0.35, "client_refused", round=1, client="client-3"),
        ev(0.4, "phase", round=1, attempt=0, phase="attesting"),
        ev(0.45, "attested", round=1, aggregator="aggregator-1", held=3, updates=3),
        ev(0.5, "phase", round=1, attempt=0, phase="aggregating"),
        ev(0.5, "chosen", round=1, attempt=0, aggregator="aggregator-0", deadline_block=9),
        ev(
            0.6,
            "aggregate_submitted",
            round=1,
            attempt=0,
            aggregator="aggregator-0",
            digest="ab" * 32,
            faulty=True,
            behaviour="noise",
            block=7,
            gas=98000,
        ),
        ev(0.6, "phase", round=1, attempt=0, phase="submitted"),
        ev(0.7, "challenge", round=1, attempt=0, challenger="aggregator-1", block=8),
        ev(0.7, "phase", round=1, attempt=0, phase="disputed"),
        ev(
            0.8,
            "dispute",
            round=1,
            attempt=0,
            decided=True,
            verdict="faulty",
            view=1,
            view_changes=1,
            signers=["aggregator-1", "aggregator-2", "aggregator-3"],
            votes=[
                {
                    "member": "aggregator-0",
                    "pbft": "lying",
                    "reexecution": "upheld",
                    "decided": None,
                    "view": None,
                    "signed": False,
                },
                {
                    "member": "aggregator-1",
                    "pbft": "honest",
                    "reexecution": "faulty",
                    "decided": "faulty",
                    "view": 1,
                    "signed": True,
                },
            ],
        ),
        ev(
            0.85,
            "dispute_resolved",
            round=1,
            attempt=0,
            verdict="faulty",
            signers=3,
            gas=125000,
            block=9,
        ),
        ev(0.86, "slashed", aggregator="aggregator-0", amount=11 * ETH // 10),
        ev(0.9, "phase", round=1, attempt=1, phase="aggregating"),
        ev(0.9, "chosen", round=1, attempt=1, aggregator="aggregator-1", deadline_block=14),
        ev(1.0, "timeout", round=1, attempt=1, aggregator="aggregator-1", block=14),
        ev(1.1, "phase", round=1, attempt=2, phase="aggregating"),
        ev(1.1, "chosen", round=1, attempt=2, aggregator="aggregator-2", deadline_block=19),
        ev(
            1.2,
            "aggregate_submitted",
            round=1,
            attempt=2,
            aggregator="aggregator-2",
            digest="cd" * 32,
            faulty=False,
            behaviour="honest",
            block=15,
            gas=97000,
        ),
        ev(1.3, "phase", round=1, attempt=2, phase="finalized"),
        ev(
            1.3,
            "round_finalized",
            round=1,
            attempt=2,
            aggregator="aggregator-2",
            accuracy=0.8,
            loss=0.5,
            gas={"finalize": 50000, "submitAggregate": 97000},
        ),
        ev(1.35, "crash", round=2, aggregator="aggregator-3", block=16, what="before-verify"),
        ev(1.4, "phase", round=2, attempt=0, phase="collecting"),
        ev(1.5, "challenge", round=2, attempt=0, challenger="aggregator-3", block=20),
        ev(1.6, "dispute_resolved", round=2, attempt=0, verdict="upheld", signers=3),
        ev(
            1.7,
            "round_finalized",
            round=2,
            attempt=0,
            aggregator="aggregator-1",
            accuracy=0.9,
            loss=0.3,
            gas={"finalize": 40000},
        ),
        ev(1.8, "mystery_kind", round=2),
        ev(1.9, "run_finished", rounds_finalized=2, final_accuracy=0.9),
    ]


def test_the_fold_follows_rounds_attempts_disputes_and_stakes() -> None:
    view = RunView()
    view.apply_all(_dispute_run())
    s = view.snapshot()
    assert s["status"] == "finished"
    assert s["rounds_finalized"] == 2
    assert s["final_accuracy"] == 0.9
    assert s["current"] == {"round": 2, "phase": "finalized", "attempt": 0}
    r1 = s["rounds"][0]
    assert [p["phase"] for p in r1["phases"]] == [
        "collecting", "attesting", "aggregating", "submitted", "disputed",
        "aggregating", "aggregating", "finalized",
    ]  # fmt: skip
    assert (r1["registered"], r1["refused"]) == (3, 1)
    assert [a["outcome"] for a in r1["attempts"]] == ["rejected", "timed out", "submitted"]
    assert [a["chosen"] for a in r1["attempts"]] == [
        "aggregator-0",
        "aggregator-1",
        "aggregator-2",
    ]
    first = r1["attempts"][0]
    assert first["submission"]["faulty"] and first["disputes"][0]["view_changes"] == 1
    assert first["votes"]["aggregator-0"]["pbft"] == "lying"
    assert first["votes"]["aggregator-1"]["signed"] is True
    assert s["rounds"][1]["attempts"][0]["outcome"] == "upheld"
    assert s["slashes"] == [
        {"aggregator": "aggregator-0", "amount": 11 * ETH // 10, "round": 1, "t": 0.86}
    ]
    assert s["stakes"]["aggregator-0"]["slashed"] is True
    assert s["crashes"][0]["aggregator"] == "aggregator-3"
    assert s["curves"] == {"accuracy": [(1, 0.8), (2, 0.9)], "loss": [(1, 0.5), (2, 0.3)]}
    assert s["gas_by_operation"] == {"finalize": 90000, "submitAggregate": 97000}
    assert view.kinds["mystery_kind"] == 1 and s["n_events"] == len(_dispute_run())
    assert s["privacy"] is None


def test_the_fold_tells_relayed_batches_from_lone_registrations() -> None:
    view = RunView()
    batch = {"relayed": True, "batch_size": 3}
    view.apply_all(
        [
            *[ev(1, "update_registered", round=1, client=f"c{i}", index=i, batch=0, **batch)
              for i in range(3)],
            *[ev(2, "update_registered", round=1, client=f"c{i}", index=i, batch=3, **batch)
              for i in range(3, 6)],
            ev(3, "update_registered", round=1, client="c6", relayed=False),
            ev(3, "client_refused", round=1, client="c7"),
            ev(4, "update_registered", round=2, client="c0"),  # before batching: alone
        ]
    )  # fmt: skip
    r1, r2 = view.snapshot()["rounds"]
    assert (r1["registered"], r1["refused"]) == (7, 1)
    assert r1["registration"] == {"relayed": 6, "batches": 2, "alone": 1}
    assert r2["registration"] == {"relayed": 0, "batches": 0, "alone": 1}
    html = run_panels(view.snapshot(), "r")["rounds"]
    assert "6 in 2 batches, 1 alone" in html and "+1 refused" in html


def test_the_fold_tolerates_partial_and_unknown_events() -> None:
    view = RunView()
    view.apply_all(
        [
            {"kind": "phase"},  # no round
            {"t": "soon", "kind": "chosen", "round": "x"},
            {"kind": "dispute", "round": 1},
            {"t": 1.0, "kind": "stakes", "aggregators": ["not", "a", "dict"]},
            {"t": 2.0},
        ]
    )
    s = view.snapshot()
    assert s["status"] == "running" and s["n_events"] == 5
    assert s["rounds"][0]["attempts"][0]["disputes"][0]["verdict"] is None
    run_panels(s, "partial")  # renders


def test_records_and_summary_fill_what_events_lack() -> None:
    view = RunView()
    records = [
        {
            "round": 1,
            "finalized": True,
            "attempt": 0,
            "aggregator_name": "aggregator-1",
            "accuracy": 0.7,
            "loss": 1.0,
            "gas": {"finalize": 5},
            "updates_registered": 4,
            "attempts": [
                {"attempt": 0, "aggregator_name": "aggregator-1", "digest": "aa", "faulty": False,
                 "disputes": [{"verdict": "upheld", "view": 0, "pbft_ticks": 9}]},
            ],
            "privacy": {"mode": "ldp", "mechanism": "laplace", "epsilon": 1.5, "delta": None,
                        "noise_multiplier": None, "clip_norm": 1.0},
        }
    ]  # fmt: skip
    view.merge_records(records)
    view.merge_records(records)  # idempotent
    view.merge_summary(
        {"rounds_finalized": 1, "final_accuracy": 0.7, "config": {"name": "r"}, "privacy": None},
        None,
    )
    s = view.snapshot()
    assert s["status"] == "finished" and s["rounds_finalized"] == 1
    assert s["rounds"][0]["registered"] == 4
    assert len(s["rounds"][0]["attempts"][0]["disputes"]) == 1
    assert s["privacy"]["rounds"][0]["epsilon"] == 1.5 and s["privacy"]["total"] is None
    assert "privacy" in run_panels(s, "r")
    records[0]["privacy"] = {"mode": "none"}
    view.merge_records(records)
    assert view.snapshot()["privacy"] is None
    assert "privacy" not in run_panels(view.snapshot(), "r")


@given(st.floats(-1e9, 1e9), st.floats(-1e9, 1e9), st.integers(2, 10))
def test_nice_ticks_cover_the_range_with_round_steps(lo: float, hi: float, count: int) -> None:
    ticks = svg.nice_ticks(lo, hi, count)
    assert ticks
    low, high = min(lo, hi), max(lo, hi)
    tol = 1e-9 * (high - low) + 1e-12 * max(abs(low), abs(high))  # float noise only
    assert all(low - tol <= t <= high + tol for t in ticks)
    if len(ticks) > 1:
        step = ticks[1] - ticks[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 5, 10))
        assert len(ticks) <= 2 * count + 2


def test_charts_escape_names_and_carry_their_values() -> None:
    evil = "<script>alert(1)</script>"
    line = svg.line_chart(
        [svg.Series(evil, [(1, 0.5), (2, 0.75)])], title=evil, x_label="r", y_label="y"
    )
    bars = svg.bar_chart([(evil, 4461722.0)], title=evil)
    lane = svg.timeline(
        [{"round": 1, "phase": "collecting", "attempts": [{"attempt": 0, "chosen": evil,
          "challenges": []}], "phases": [{"phase": "collecting", "attempt": 0, "t": 1.0},
                                         {"phase": "aggregating", "attempt": 0, "t": 2.0}]}],
        [],
    )  # fmt: skip
    for chart in (line, bars, lane):
        assert "<script>" not in chart and "&lt;script&gt;" in chart
    assert 'data-y="0.75"' in line and 'data-value="4461722"' in bars
    assert "no data yet" in svg.line_chart([], title="t", x_label="x", y_label="y")
    assert "no rounds yet" in svg.timeline([], [])


def test_forms_come_from_the_cli_parser_and_map_back_to_argv() -> None:
    parser = build_parser()
    spec = forms.command_forms(parser)
    assert {"demo", "run"} <= set(spec)
    fields = {f["dest"]: f for g in spec["demo"]["groups"] for f in g["fields"]}
    assert fields["clients"]["option"] == "--clients" and fields["clients"]["default"] == "10"
    assert fields["seed"]["default"] == "0"
    assert fields["partition"]["kind"] == "choice" and "dirichlet" in fields["partition"]["choices"]
    assert fields["rule_param"]["kind"] == "list"
    assert "json" not in fields and "quiet" not in fields
    argv = forms.argv_from_form(
        parser,
        "demo",
        {"clients": " 4 ", "rule": "krum", "rule_param": "f=1 m=2", "rounds": "", "seed": None},
    )
    # option values as --option=VALUE: no value can turn into an option
    assert argv == ["demo", "--clients=4", "--rule=krum", "--rule-param=f=1",
                    "--rule-param=m=2"]  # fmt: skip
    run = forms.argv_from_form(
        parser, "run", {"scenarios": [["a.toml", "b.toml"], "c.toml"], "compare_honest": True}
    )
    assert run == ["run", "a.toml", "b.toml", "c.toml", "--compare-honest"]
    with pytest.raises(KeyError, match="no option 'bogus'"):
        forms.argv_from_form(parser, "demo", {"bogus": "1"})
    with pytest.raises(KeyError, match="control panel starts"):
        forms.argv_from_form(parser, "testnet", {})


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--clients", "ten"],
        ["demo", "--clients", "0"],
        ["demo", "--rule", "nosuch"],
        ["demo", "--rule", "krum", "--rule-param", "f=9"],
        ["demo", "--partition", "weird"],
        ["run", "missing.toml"],
        ["run"],
        ["experiment", "nosuch"],
        ["experiment", "missing.toml"],
        ["experiment", "clients", "--seeds", "0,0"],
        ["experiment", "clients", "--jobs", "0"],
    ],
)
def test_check_command_gives_the_cli_line(argv: list[str], capsys: Any) -> None:
    line = check_command(argv)
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [line]


def test_check_command_accepts_good_input() -> None:
    assert check_command(["demo", "--clients", "4", "--rounds", "1"]) is None
    assert check_command(["run", str(ROOT / "scenarios" / "agg-noise.toml")]) is None
    assert check_command(["experiment", "robustness", "--quick", "--seeds", "2"]) is None


def test_an_experiment_started_from_the_panel_writes_under_the_runs_directory(
    tmp_path: Path,
) -> None:
    from fedchain.dashboard.app import _with_outputs_under
    from fedchain.dashboard.jobs import Job

    runs = tmp_path / "runs"
    argv = _with_outputs_under(["experiment", "clients", "--quick"], runs)
    assert argv == ["experiment", "clients", "--quick", "--out",
                    str(runs / "experiments" / "clients-quick")]  # fmt: skip
    given = ["experiment", "clients", "--out", "elsewhere"]
    assert _with_outputs_under(given, runs) == given
    assert _with_outputs_under(["demo"], runs) == ["demo"]
    log = tmp_path / "job.log"
    log.write_text("$ fedchain ...\nrun directory: /r/one\n")
    job = Job("1", argv, 1, 0.0, 1.0, log)
    assert job.run_dirs() == [str(runs / "experiments" / "clients-quick"), "/r/one"]


def test_experiment_progress_counts_units_and_estimates_the_rest() -> None:
    from fedchain.dashboard.pages import experiment_progress

    meta = {"status": "running", "units_total": 8, "units_done": 2, "runs": [{"jobs": 2}]}
    p = experiment_progress(meta, [3.0, 5.0], running=2)
    assert (p["done"], p["total"], p["percent"], p["running"]) == (2, 8, 25.0, 2)
    assert p["eta_seconds"] == pytest.approx(4.0 * 6 / 2)
    done = experiment_progress({**meta, "status": "finished", "units_done": 8}, [3.0], 0)
    assert (done["percent"], done["eta_seconds"], done["running"]) == (100.0, None, 0)
    # an old or hand-made experiment.json: nothing to count, nothing invented
    bare = experiment_progress({"units_done": "x", "runs": "?"}, [], 1)
    assert (bare["status"], bare["done"], bare["total"], bare["eta_seconds"]) == (
        "unknown", 0, 0, None,
    )  # fmt: skip


def test_summary_images_load_from_the_experiment_and_nothing_external(tmp_path: Path) -> None:
    from fedchain.dashboard.pages import ExperimentPage, markdown_html

    exp = tmp_path / "exp"
    (exp / "figures").mkdir(parents=True)
    (exp / "figures" / "a.png").write_bytes(b"\x89PNG")
    (tmp_path / "outside.png").write_bytes(b"\x89PNG")
    page = ExperimentPage(exp, "e")
    html = markdown_html(
        "![a](figures/a.png) ![o](../outside.png) ![w](https://x.org/w.png) ![m](missing.png)",
        page.summary_image,
    )
    assert '<img src="/file/e/figures/a.png" alt="a" />' in html
    assert html.count("<img") == 1 and "x.org" not in html and "outside" not in html
    inline = ExperimentPage(exp, "e", inline_images=True)
    assert inline.summary_image("figures/a.png") == "data:image/png;base64,iVBORw=="


def _write(path: Path, text: str = "{}") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_discovery_classifies_and_confines(tmp_path: Path) -> None:
    _write(tmp_path / "demo1" / "summary.json", json.dumps({"rounds_finalized": 2}))
    _write(tmp_path / "set" / "r1" / "summary.json", json.dumps({"scenario": {"source": "a"}}))
    _write(tmp_path / "set" / "r1" / "verdict.json", json.dumps({"problems": []}))
    _write(tmp_path / "live" / "events.jsonl", json.dumps({"kind": "run_started"}) + "\n")
    _write(tmp_path / "tn" / "testnet.json", json.dumps({"nodes": []}))
    _write(tmp_path / "exp" / "experiment.json", json.dumps({"name": "e", "status": "running"}))
    (tmp_path / "empty").mkdir()
    (tmp_path / ".dashboard" / "jobs").mkdir(parents=True)
    kinds = {p.name: discovery.classify(p) for p in tmp_path.iterdir()}
    assert kinds == {
        "demo1": "demo",
        "set": "set",
        "live": "demo",
        "tn": "testnet",
        "exp": "experiment",
        "empty": None,
        ".dashboard": None,
    }
    entries = {e.rel: e for e in discovery.scan(tmp_path)}
    assert set(entries) == {"demo1", "set", "live", "tn", "exp"}
    assert entries["live"].status == "running" and entries["demo1"].status == "finished"
    assert [c.rel for c in entries["set"].children] == ["set/r1"]
    assert entries["tn"].status == "down"
    for bad in ("../x", "/etc", "set/../../x"):
        with pytest.raises(ConfigError, match="outside"):
            discovery.resolve_under(tmp_path, bad)
    (tmp_path / "link").symlink_to("/etc")
    with pytest.raises(ConfigError, match="outside"):
        discovery.resolve_under(tmp_path, "link/passwd")


def test_line_tail_reads_only_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = LineTail(path)
    assert tail.read() == []
    path.write_text('{"a": 1}\nnot json\n{"b": 2')
    assert tail.read() == [{"a": 1}]
    with path.open("a") as fh:
        fh.write("}\n")
    assert tail.read() == [{"b": 2}]
    path.write_text('{"c": 3}\n')  # rewritten shorter: read again from the start
    assert tail.read() == [{"c": 3}] and tail.restarted


def test_run_source_follows_a_growing_run(tmp_path: Path) -> None:
    events = _dispute_run()
    src = RunSource(tmp_path)
    assert not src.refresh()
    with (tmp_path / "events.jsonl").open("w") as fh:
        for e in events[:10]:
            fh.write(json.dumps(e) + "\n")
    assert src.refresh() and src.view.n_events == 10
    assert not src.refresh()
    with (tmp_path / "events.jsonl").open("a") as fh:
        for e in events[10:]:
            fh.write(json.dumps(e) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"final_accuracy": 0.9}))
    assert src.refresh() and src.view.snapshot()["status"] == "finished"
    assert src.version == 2


def test_node_logs_map_to_run_events() -> None:
    spec = {
        "task": "0xT",
        "started": 5.0,
        "config": {"rounds": 3, "rule": "fedavg"},
        "nodes": [
            {"name": "aggregator-0", "role": "aggregator", "index": 0, "address": "0xA0",
             "behaviour": {"publish": "noise", "pbft": "lying"}},
            {"name": "aggregator-1", "role": "aggregator", "index": 1, "address": "0xA1"},
            {"name": "client-0", "role": "client", "index": 0, "address": "0xC0"},
        ],
    }  # fmt: skip
    m = NodeLogMapper(spec)

    def kinds(line: dict[str, Any]) -> list[str]:
        return [e["kind"] for e in m.events(line)]

    # a client's own registration reaches the page from the chain's UpdatesRegistered
    # event (ChainWatcher), batched or alone; its log line only adds its gas
    assert kinds({"node": "client-0", "action": "submitUpdate", "round": 1, "gas": 61000}) == [
        "gas"
    ]
    assert kinds({"node": "client-0", "action": "submitUpdate-refused", "round": 1}) == [
        "client_refused"
    ]
    sub = m.events(
        {"t": 1, "node": "aggregator-0", "action": "submitAggregate", "round": 1, "attempt": 0,
         "digest": "ab", "honest": False, "gas": 98210, "block": 5}
    )  # fmt: skip
    assert sub[0]["faulty"] is True and sub[0]["behaviour"] == "noise"
    assert sub[1] == {"t": 1, "kind": "gas", "operation": "submitAggregate", "gas": 98210}
    late = m.events({"node": "aggregator-1", "action": "advanceAttempt", "laggard": "0xA0"})
    assert late[0]["kind"] == "timeout" and late[0]["aggregator"] == "aggregator-0"
    # a testnet process's fault-proof move (issue 22) becomes a game_move event
    move = m.events(
        {"t": 2, "node": "aggregator-1", "action": "game-prove", "round": 1, "attempt": 0,
         "id": 3, "gas": 666607, "role": "challenger"}
    )  # fmt: skip
    assert move[0] == {
        "t": 2, "round": 1, "kind": "game_move", "attempt": 0, "player": "aggregator-1",
        "move": "prove", "role": "challenger", "id": 3, "gas": 666607,
    }  # fmt: skip
    assert m.events({"node": "aggregator-1", "action": "game-open", "round": 1}) == []
    view = RunView()
    view.apply(move[0])
    assert view.rounds[1].attempts[0].games[0]["move"] == "prove"
    vote = m.events({"node": "aggregator-0", "action": "pbft-start", "my_verdict": "upheld"})
    assert vote[0]["pbft"] == "lying" and vote[0]["verdict"] == "upheld"
    assert kinds({"node": "aggregator-1", "action": "pbft-decided", "verdict": "faulty"}) == [
        "pbft_decided"
    ]
    assert kinds({"node": "aggregator-1", "action": "pbft-view", "view": 2}) == ["pbft_view"]
    assert kinds({"node": "aggregator-1", "action": "challenge"}) == ["challenge"]
    assert kinds({"node": "aggregator-1", "action": "expireDispute"}) == ["dispute_expired"]
    assert kinds({"node": "aggregator-1", "action": "attest", "held": 2}) == ["attested"]
    assert kinds({"node": "client-0", "action": "retry"}) == ["node"]
    assert kinds({"node": "aggregator-1", "action": "verify", "agrees": True}) == []
    started = run_started(spec, "tn")
    assert started["byzantine"] == [0] and started["clients"] == 1 and started["rounds"] == 3


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7", "::", "example.org"])
def test_the_dashboard_binds_loopback_only(host: str, capsys: Any) -> None:
    with pytest.raises(ConfigError, match="--host"):
        check_host(host)
    assert main(["dashboard", "--host", host, "--runs", "/tmp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fedchain: error: --host {host!r}")


def test_loopback_hosts_are_accepted() -> None:
    assert check_host("127.0.0.1") == "127.0.0.1"
    assert check_host("localhost") == "127.0.0.1"
    assert check_host("::1") == "::1"


def test_report_html_refuses_what_it_cannot_show(tmp_path: Path, capsys: Any) -> None:
    assert main(["report", str(tmp_path), "--html"]) == 2
    assert "not a run, scenario set" in capsys.readouterr().err
    assert main(["report", str(tmp_path), str(tmp_path), "--html"]) == 2
    assert "give one directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "-o", "x.html"]) == 2
    assert "only with --html" in capsys.readouterr().err


@pytest.mark.slow
def test_an_installed_package_carries_the_page_assets(tmp_path: Path) -> None:
    """Build the wheel from a copy of the sources: static/ and templates/ are in it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("fedchain", "protocol", "adapters", "clients", "aggregators", "consensus"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("fedchain-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        f"fedchain/dashboard/{p.relative_to(ROOT / 'fedchain' / 'dashboard').as_posix()}"
        for sub in ("static", "templates")
        for p in (ROOT / "fedchain" / "dashboard" / sub).iterdir()
    }
    assert shipped and shipped <= names


@given(
    st.lists(st.floats(0, 1e6), min_size=2, max_size=8, unique=True),
    st.floats(0.0, 0.2),
)
def test_lane_scale_is_monotonic_and_keeps_every_phase_visible(
    times: list[float], share: float
) -> None:
    times = sorted(times)
    x = svg.lane_scale(times, 800.0, share)
    xs = [x(t) for t in times]
    assert xs[0] == 0.0 and xs[-1] == pytest.approx(800.0)
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(xs))
    n = len(times) - 1
    floor = min(share, 1 / n) * 800.0
    assert all(b - a >= floor - 1e-6 for a, b in itertools.pairwise(xs))


def test_the_chain_watcher_shows_batched_and_lone_registrations(task_factory: Any) -> None:
    """On a real (embedded) chain: two clients' records relayed in one ``submitUpdates``,
    one client's own ``submitUpdate``, one record relayed alone; the watcher reads the
    chain's ``UpdatesRegistered`` events and the fold tells them apart."""
    from adapters.records import sign_update
    from fedchain.dashboard.testnet_view import ChainWatcher

    setup = task_factory(n_aggregators=4, n_clients=4, min_updates=4, max_updates=4)
    task, relayer, clients = setup.task, setup.owner, setup.clients

    def record(i: int) -> Any:
        index = task.client_index(clients[i].address)
        assert index is not None
        return sign_update(clients[i], task.domain_separator, index, 1, bytes([i + 1]) * 32, 10)

    spec = {
        "task": task.address,
        "nodes": [
            *[{"name": f"aggregator-{i}", "role": "aggregator", "index": i, "address": a.address}
              for i, a in enumerate(setup.aggregators)],
            *[{"name": f"client-{i}", "role": "client", "index": i, "address": c.address}
              for i, c in enumerate(clients)],
        ],
    }  # fmt: skip
    watcher = ChainWatcher(spec, NodeLogMapper(spec), chain=setup.chain)
    try:
        task.submit_updates(relayer, 1, [record(0), record(1)])
        task.submit_update(clients[2], 1, b"\x03" * 32, 10)
        task.submit_updates(relayer, 1, [record(3)])
        events, status = watcher.poll()
    finally:
        watcher.close()
    registered = [e for e in events if e["kind"] == "update_registered"]
    assert [(e["client"], e["index"], e["relayed"], e["batch"], e["batch_size"])
            for e in registered] == [
        ("client-0", 0, True, 0, 2), ("client-1", 1, True, 0, 2),
        ("client-2", 2, False, 2, 1), ("client-3", 3, True, 3, 1),
    ]  # fmt: skip
    assert registered[2]["digest"] == "03" * 32 and registered[2]["num_samples"] == 10
    assert status["round"] == 1
    view = RunView()
    view.apply_all(events)
    (r1,) = view.snapshot()["rounds"]
    assert r1["registered"] == 4
    assert r1["registration"] == {"relayed": 3, "batches": 2, "alone": 1}


def test_the_timeline_marks_every_submission_challenge_timeout_verdict_and_slash() -> None:
    events = _dispute_run()
    view = RunView()
    view.apply_all(events)
    html = run_panels(view.snapshot(), "r")["timeline"]

    def count(kind: str, **where: Any) -> int:
        return sum(
            1 for e in events if e["kind"] == kind and all(e.get(k) == v for k, v in where.items())
        )

    assert html.count('class="mk mk-faulty"') == count("aggregate_submitted", faulty=True)
    assert html.count('class="mk mk-submit"') == count("aggregate_submitted", faulty=False)
    assert html.count('class="mk mk-challenge"') == count("challenge") == 2
    assert html.count('class="mk mk-timeout"') == count("timeout") == 1
    assert html.count('class="mk mk-resolved"') == count("dispute_resolved") >= 1
    assert html.count('class="mk mk-slash"') == count("slashed") == 1
