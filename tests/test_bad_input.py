"""Every class of bad input ends in one line naming the option (or key) and the value, exit 2.

Walks the classes the CLI and scenario files can receive: wrong types, out-of-range values,
unknown choices, bad rule parameters, unwritable or missing paths, unreachable RPC and IPFS
endpoints, an address that is not a fedchain task. Each case runs the real ``fedchain``
entry point in-process and checks: exit status 2, exactly one line on stderr, no traceback,
the offending option/key and value named. A failed set-up leaves no run directory behind.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedchain.cli import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit directly
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    return code, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("fedchain"), err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


# ----------------------------------------------------------------------------------------
# CLI options
# ----------------------------------------------------------------------------------------

CLI_CASES = [
    # wrong types (argparse)
    (["demo", "--clients", "ten"], ["--clients", "ten"]),
    (["demo", "--lr", "fast"], ["--lr", "fast"]),
    (["demo", "--partition", "sideways"], ["--partition", "sideways"]),
    (["demo", "--rule-param", "f"], ["--rule-param", "'f'"]),
    (["run", "x.toml", "--seed", "one"], ["--seed", "one"]),
    # out-of-range values (DemoConfig.validate)
    (["demo", "--clients", "0"], ["--clients", "0"]),
    (["demo", "--rounds", "-3"], ["--rounds", "-3"]),
    (["demo", "--clip", "0"], ["--clip", "0"]),
    (["demo", "--momentum", "1.5"], ["--momentum", "1.5"]),
    (["demo", "--alpha", "-1"], ["--alpha", "-1"]),
    (["demo", "--seed", "-1"], ["--seed", "-1"]),
    (["demo", "--min-updates", "99"], ["--min-updates", "99"]),
    (["demo", "--frac-bits", "40"], ["--frac-bits", "40"]),
    (["demo", "--update-batch", "-1"], ["--update-batch", "-1"]),
    # committees below n = 3f + 1 with f >= 1 (issue 20)
    (["demo", "--aggregators", "3"], ["--aggregators", "3", "n >= 3f + 1 with f >= 1"]),
    (["demo", "--aggregators", "2"], ["--aggregators", "2", "at least 4"]),
    (["demo", "--aggregators", "1"], ["--aggregators", "1", "at least 4"]),
    # unknown rule, bad rule parameters, too few clients for them
    (["demo", "--rule", "nope"], ["--rule", "nope"]),
    (["demo", "--rule", "krum", "--rule-param", "f=abc"], ["--rule-param", "abc"]),
    (["demo", "--rule", "bulyan", "--rule-param", "f=2", "--clients", "5"], ["--clients", "5"]),
    # unknown dataset, a dataset needing a local path
    (["demo", "--dataset", "imagenet"], ["--dataset", "imagenet"]),
    # the dispute mode (issue 22): the fault proof replays plaintext / local-DP rounds of
    # FedAvg, FedProx, Median and Trimmed mean only
    (["demo", "--dispute", "vote"], ["--dispute", "vote"]),
    (["demo", "--dispute", "fault-proof", "--rule", "krum"], ["--dispute", "krum", "pbft"]),
    (
        ["demo", "--dispute", "both", "--privacy", "secagg", "--clients", "4"],
        ["--dispute", "secagg", "hides each update"],
    ),
    # the fault proof needs the committee's included set (issue 22, item 1)
    (
        ["demo", "--dispute", "fault-proof", "--attest-window", "0"],
        ["--attest-window", "0", "--dispute fault-proof", "attestation window"],
    ),
    # RPC URL scheme
    (["demo", "--rpc-url", "ftp://127.0.0.1"], ["--rpc-url", "ftp://127.0.0.1"]),
]


@pytest.mark.parametrize(("argv", "needles"), CLI_CASES, ids=[" ".join(c[0]) for c in CLI_CASES])
def test_cli_option_errors(
    argv: list[str], needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    code, err = run_cli([*argv, "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, err, *needles)
    assert not out.exists() or not any(out.iterdir())  # nothing left behind


def test_committee_below_four_is_refused_by_every_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A committee of 1-3 aggregators: the n - f quorum is n (the accused signs its own
    conviction) or nobody can challenge. Every entry point shares DemoConfig.validate."""
    target = tmp_path / "tn"
    code, err = run_cli(["testnet", "up", "--dir", str(target), "--aggregators", "3"], capsys)
    assert_one_line_error(code, err, "--aggregators", "3f + 1")
    assert not target.exists()
    scenario = tmp_path / "small.toml"
    scenario.write_text("[run]\naggregators = 3\n")
    out = tmp_path / "runs"
    code, err = run_cli(["run", str(scenario), "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, err, "aggregators", "3f + 1")
    assert not out.exists() or not any(out.iterdir())
    from fedchain.config import DemoConfig

    DemoConfig(aggregators=4).validate()  # the smallest committee is fine


def test_mnist_without_a_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEDCHAIN_MNIST_PATH", raising=False)
    out = tmp_path / "runs"
    code, err = run_cli(["demo", "--dataset", "mnist", "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, err, "--dataset", "mnist", "FEDCHAIN_MNIST_PATH")
    assert not any(out.iterdir())


# ----------------------------------------------------------------------------------------
# Paths
# ----------------------------------------------------------------------------------------


def test_out_that_cannot_be_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    target = str(blocker / "runs")
    code, err = run_cli(["demo", "--out", target, "--quiet"], capsys)
    assert_one_line_error(code, err, "--out", target)


def test_store_that_cannot_be_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    target = str(blocker / "store")
    out = tmp_path / "runs"
    code, err = run_cli(["demo", "--store", target, "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, err, "--store", target)
    assert not any(out.iterdir())


def test_testnet_dir_that_cannot_be_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = str(blocker / "tn")
    code, err = run_cli(["testnet", "up", "--dir", target], capsys)
    assert_one_line_error(code, err, "--dir", target)


def test_testnet_status_without_testnet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["testnet", "status", "--dir", str(tmp_path / "none")], capsys)
    assert_one_line_error(code, err, str(tmp_path / "none"))


def test_report_of_missing_and_empty_dirs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "missing")
    code, err = run_cli(["report", missing], capsys)
    assert_one_line_error(code, err, "RUN_DIR", missing)
    code, err = run_cli(["report", str(tmp_path)], capsys)
    assert_one_line_error(code, err, "RUN_DIR", str(tmp_path))


# ----------------------------------------------------------------------------------------
# Unreachable endpoints
# ----------------------------------------------------------------------------------------


def test_unreachable_rpc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    out = tmp_path / "runs"
    code, err = run_cli(["demo", "--rpc-url", url, "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, err, "--rpc-url", url, "connection refused")
    assert not any(out.iterdir())


def test_unreachable_ipfs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = f"ipfs:/ip4/127.0.0.1/tcp/{_free_port()}/http"
    out = tmp_path / "runs"
    code, err = run_cli(["demo", "--store", store, "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, err, "--store", store, "connection refused")
    assert not any(out.iterdir())


def test_status_unreachable_rpc(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    code, err = run_cli(["status", "--rpc-url", url, "--task", "0x" + "11" * 20], capsys)
    assert_one_line_error(code, err, "--rpc-url", url)


def test_invalid_funding_key_is_named_not_echoed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "0x1234"
    url = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("FEDCHAIN_FUNDING_KEY", secret)  # never on the command line (ps)
    argv = ["demo", "--rpc-url", url, "--out", str(tmp_path), "--quiet"]
    code, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, "$FEDCHAIN_FUNDING_KEY")
    assert secret not in err


# ----------------------------------------------------------------------------------------
# Scenario files
# ----------------------------------------------------------------------------------------

SCENARIO_CASES = [
    ('[run]\nclients = "ten"\n', ["[run] clients", "'ten'", "integer"]),
    ("[run]\nclients = 0\n", ["[run] clients", "0"]),
    ("[run]\nlr = true\n", ["[run] lr", "True"]),
    ('[run]\nrule_params = "f=1"\n', ["[run] rule_params", "f=1"]),
    ("[run]\ncleints = 4\n", ["[run]", "cleints"]),
    ('[run]\nrule = "median"\nrotation = "sideways"\n', ["[run] rotation", "sideways"]),
    ('[run]\ndispute = "vote"\n', ["[run] dispute", "vote", "fault-proof"]),
    ('[run]\ndispute = "fault-proof"\nrule = "bulyan"\n', ["[run] dispute", "bulyan"]),
    ('[run]\ndispute = "both"\nattest_window = 0\n', ["[run] attest_window", "0", "both"]),
    ('[[aggregator]]\nindex = "0"\npublish = "noise"\n', ["[[aggregator]] #1 index", "'0'"]),
    ("[[aggregator]]\nindex = 9\n", ["[[aggregator]] #1 index", "9"]),
    ('[[aggregator]]\nindex = 0\npublish = "nois"\n', ["nois"]),
    (
        '[[aggregator]]\nindex = 0\npublish = "noise"\nparams = { sigma = "big" }\n',
        ["params.sigma", "'big'"],
    ),
    ("[[aggregator]]\nindex = 0\nrounds = [0]\n", ["rounds", "[0]"]),
    ('[[aggregator]]\nindex = 0\nrestart_after_blocks = "5"\n', ["restart_after_blocks", "'5'"]),
    ('[[client]]\nindex = 1\nattack = "scale"\nparams = { factor = "x" }\n', ["params.factor"]),
    ('[[client]]\nindex = 1\nattack = "teleport"\n', ["teleport"]),
    ("[pbft]\ndrop = 2.0\n", ["[pbft] drop", "2.0"]),
    ('[pbft]\nmax_delay = "3"\n', ["[pbft] max_delay", "'3'"]),
    ('[expect]\noutcome = "maybe"\n', ["[expect] outcome", "maybe"]),
    ('[expect]\nidentical_to_honest = "yes"\n', ["identical_to_honest", "'yes'"]),
    ("run = 3\n", ["run", "3"]),
    ("[run\nclients = 4\n", ["invalid TOML"]),
]


@pytest.mark.parametrize(
    ("text", "needles"), SCENARIO_CASES, ids=[c[0].splitlines()[-1] for c in SCENARIO_CASES]
)
def test_scenario_file_errors(
    text: str, needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    out = tmp_path / "runs"
    code, err = run_cli(["run", str(path), "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, err, str(path), *needles)
    assert not out.exists()  # validated before any run starts


def test_missing_and_unreadable_scenario_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "missing.toml")
    code, err = run_cli(["run", missing], capsys)
    assert_one_line_error(code, err, missing, "no such file")
    code, err = run_cli(["run", str(tmp_path)], capsys)
    assert_one_line_error(code, err, str(tmp_path), "directory")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    code, err = run_cli(["run", str(binary)], capsys)
    assert_one_line_error(code, err, str(binary))


# ----------------------------------------------------------------------------------------
# A contract address that is not a fedchain task (on a real anvil)
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def anvil_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from adapters.services import AnvilService, ServiceError, find_anvil

    try:
        find_anvil()
    except ServiceError as exc:
        if os.environ.get("FEDCHAIN_REQUIRE_REALNET") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    svc = AnvilService(tmp_path_factory.mktemp("anvil"), die_with_parent=True)
    svc.start()
    try:
        yield svc.url
    finally:
        svc.stop()


#: Creation code of a contract whose runtime answers every call with 32 bytes of 0x2a.
ANSWER_42 = "0x600a600c600039600a6000f3602a60005260206000f3"


def test_address_that_is_not_a_task(anvil_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from adapters.chain import Chain
    from adapters.services import ANVIL_FUNDING_KEY

    chain = Chain.connect(anvil_url, funding_key=ANVIL_FUNDING_KEY, num_accounts=1)
    other, _ = chain.deploy(chain.accounts[0], [], ANSWER_42, op="deploy-other")
    code, err = run_cli(["status", "--rpc-url", anvil_url, "--task", other], capsys)
    assert_one_line_error(code, err, "--task", other, "not a fedchain task")
    empty = "0x" + "ab" * 20
    code, err = run_cli(["status", "--rpc-url", anvil_url, "--task", empty], capsys)
    assert_one_line_error(code, err, "--task", empty, "no contract")
    code, err = run_cli(["status", "--rpc-url", anvil_url, "--task", "0x1234"], capsys)
    assert_one_line_error(code, err, "--task", "0x1234", "not an Ethereum address")


def test_status_of_a_real_task(anvil_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from adapters.chain import Chain
    from adapters.contract import TaskConfig, TaskContract
    from adapters.services import ANVIL_FUNDING_KEY
    from tests.conftest import DEFAULT_TASK_CONFIG

    chain = Chain.connect(anvil_url, funding_key=ANVIL_FUNDING_KEY, num_accounts=6)
    task = TaskContract.deploy(chain, chain.accounts[0], TaskConfig(**DEFAULT_TASK_CONFIG))
    task.register_aggregator(chain.accounts[1])
    code, err = run_cli(
        ["status", "--rpc-url", anvil_url, "--task", task.address, "--json"], capsys
    )
    # run_cli consumed stdout too; re-run to capture the JSON
    assert code == 0, err
    assert main(["status", "--rpc-url", anvil_url, "--task", task.address, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["task"] == task.address
    assert status["config"]["num_rounds"] == DEFAULT_TASK_CONFIG["num_rounds"]
    assert [m["address"] for m in status["committee"]] == [chain.accounts[1].address]
    assert status["started"] is False
    # a running round shows how many updates it registered and its accumulator
    task.register_client(chain.accounts[2])
    for member in chain.accounts[3:6]:  # start needs a committee of 4 (issue 20)
        task.register_aggregator(member)
    task.start(chain.accounts[0])
    task.submit_update(chain.accounts[2], 1, b"\x07" * 32, 5)
    assert main(["status", "--rpc-url", anvil_url, "--task", task.address, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    acc, count = task.update_accumulator(1)
    assert acc is not None
    assert status["rounds"] == [
        {
            "round": 1,
            "phase": "collecting",
            "updates": count,
            "update_accumulator": f"{acc:056x}",
            "digest": None,
        }
    ]
    assert count == 1
