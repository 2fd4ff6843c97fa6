"""Many clients in one process: the client fleet, phase accounting, data for many clients."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from clients.data import make_mixture
from fedchain.cli import main
from fedchain.sim.driver.deployment import federated_data
from fedchain.sim.driver.events import read_events
from fedchain.sim.runner import Demo, DemoConfig
from protocol.errors import ConfigError
from protocol.metrics import PhaseClock


def small(tmp_path: Path, **kw) -> DemoConfig:
    base = dict(clients=5, aggregators=3, rounds=1, epochs=1, out=str(tmp_path), challenge_window=1)
    base.update(kw)
    return DemoConfig(**base)


def test_phase_clock_charges_each_second_to_the_innermost_phase(monkeypatch) -> None:
    ticks = iter(range(100))
    monkeypatch.setattr("protocol.metrics.time.perf_counter", lambda: float(next(ticks)))
    clock = PhaseClock()
    with clock.phase(1, "drive"):  # noqa: SIM117 - t=0
        with clock.phase(1, "verify"):  # t=1: drive had 0..1
            with clock.phase(1, "fetch"):  # t=2: verify had 1..2
                pass  # t=3: fetch had 2..3
        # t=4: verify had 3..4; t=5: drive had 4..5
    assert clock.for_round(1) == {"fetch": 1.0, "verify": 2.0, "drive": 2.0}  # 5 = wall


def test_fleet_finishes_a_round_that_nodes_started_on_their_own(tmp_path: Path) -> None:
    """Two clients register through their own step() (as a node process would); the fleet
    registers the others, once each, in client order, with the bytes an all-fleet run has."""
    reference = Demo(small(tmp_path, name="ref")).run()
    expected = [
        (e["client"], e["digest"])
        for e in read_events(reference.run_dir / "events.jsonl")
        if e["kind"] == "update_registered"
    ]
    demo = Demo(small(tmp_path, name="mixed"))
    demo.setup()
    try:
        own = [e for node in demo.clients[:2] for e in node.step()]
        assert [e.action for e in own] == ["submitUpdate"] * 2
        assert demo.fleet.step()  # trains and registers the remaining three
        assert not demo.fleet.step()  # nothing left: collection closed
    finally:
        demo.close()
    names = {c.address: c.name for c in demo.clients}
    got = [(names[u.client], u.digest.hex()) for u in demo.task.updates(1)]
    assert got == expected and len(got) == 5


def test_round_phases_account_for_its_wall_time(tmp_path: Path) -> None:
    result = Demo(small(tmp_path, rounds=2)).run()
    records = [json.loads(x) for x in (result.run_dir / "rounds.jsonl").read_text().splitlines()]
    for rec in records:
        seconds = rec["seconds"]
        assert {"train", "register", "fetch", "aggregate", "drive", "evaluate"} <= set(seconds)
        # Each second is charged to one phase, so the phases never exceed the wall time, and
        # what no phase saw is a sliver of it (the loop's own `while` test and callbacks).
        assert sum(seconds.values()) <= rec["wall_seconds"] + 0.002
        assert rec["unaccounted_seconds"] <= 0.1 * rec["wall_seconds"] + 0.05
        assert rec["updates_registered"] == 5
    events = read_events(result.run_dir / "events.jsonl")
    assert sum(1 for e in events if e["kind"] == "update_registered") == 10


def test_mixture_is_sized_by_the_population_and_needs_a_nonlinear_model() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier

    train, test = make_mixture(num_clients=30, num_test=2000, seed=3)
    assert train.x.shape == (3000, 32) and test.x.shape == (2000, 32)
    assert train.num_classes == 10 and set(np.unique(train.y)) == set(range(10))
    linear = LogisticRegression(max_iter=500).fit(train.x, train.y).score(test.x, test.y)
    local = KNeighborsClassifier(15).fit(train.x, train.y).score(test.x, test.y)
    assert linear < 0.7 < 0.85 < local  # clusters per class: not linearly separable
    again, _ = make_mixture(num_clients=30, num_test=2000, seed=3)
    assert np.array_equal(again.x, train.x) and np.array_equal(again.y, train.y)
    bigger, _ = make_mixture(num_clients=1000, samples_per_client=10, seed=3)
    assert len(bigger) == 10_000
    with pytest.raises(ConfigError, match="samples_per_client"):
        make_mixture(samples_per_client=0)


def test_federated_data_sizes_mixture_by_clients_and_reads_mnist_from_data_path(
    tmp_path: Path,
) -> None:
    train, _, parts = federated_data(DemoConfig(clients=40, dataset="mixture"))
    assert len(train) == 4000 and len(parts) == 40
    assert all(len(p) == 100 for p in parts)
    rng = np.random.default_rng(0)
    for stem, shape in (
        ("train-images-idx3-ubyte", (50, 28, 28)),
        ("train-labels-idx1-ubyte", (50,)),
        ("t10k-images-idx3-ubyte", (20, 28, 28)),
        ("t10k-labels-idx1-ubyte", (20,)),
    ):
        arr = rng.integers(0, 10 if len(shape) == 1 else 256, size=shape, dtype=np.uint8)
        header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(struct.pack(">I", d) for d in shape)
        (tmp_path / (stem + ".gz")).write_bytes(gzip.compress(header + arr.tobytes()))
    train, test, parts = federated_data(
        DemoConfig(clients=5, dataset="mnist", data_path=str(tmp_path))
    )
    assert train.input_shape == (1, 28, 28) and len(train) == 50 and len(test) == 20
    assert len(parts) == 5
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=rf"^--data-path '{missing}': MNIST directory"):
        federated_data(DemoConfig(dataset="mnist", data_path=str(missing)))
    with pytest.raises(ConfigError, match="reads no files"):
        federated_data(DemoConfig(dataset="digits", data_path=str(tmp_path)))


def test_mnist_without_a_path_names_the_option_and_the_files(monkeypatch, capsys) -> None:
    monkeypatch.delenv("FEDCHAIN_MNIST_PATH", raising=False)
    assert main(["demo", "--dataset", "mnist", "--quiet", "--out", "/tmp/unused-scale"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--dataset 'mnist'" in err and "train-images-idx3-ubyte" in err
    assert "FEDCHAIN_MNIST_PATH" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--ray-cpus", "0", "--engine", "ray"], "--ray-cpus 0"),
        (["--engine", "sequential", "--ray-address", "127.0.0.1:1"], "--ray-address"),
        (["--ray-address", "127.0.0.1:1"], "cannot reach"),
    ],
)
def test_bad_engine_options_fail_with_one_line(tmp_path: Path, capsys, argv, needle) -> None:
    assert main(["demo", "--clients", "2", "--quiet", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_fleet_stops_registering_when_collection_closes_early(tmp_path: Path) -> None:
    """With --min-updates below the population the window closes mid-wave: the late clients
    are refused by the contract (CollectionClosed) and the round goes on without them. (One
    record per relayed batch, so the registrations span blocks.)"""
    result = Demo(small(tmp_path, clients=8, min_updates=2, collect_window=2, update_batch=1)).run()
    record = json.loads((result.run_dir / "rounds.jsonl").read_text().splitlines()[0])
    assert result.summary["all_rounds_finalized"]
    assert 2 <= record["updates_registered"] < 8
    assert record["included"] == list(range(record["updates_registered"]))


def test_relayed_batches_register_what_clients_would_register_alone(tmp_path: Path) -> None:
    """The fleet relays signed records in batches (3 here); the same run with every client
    sending its own submitUpdate registers the same updates in the same order, so the
    aggregate is byte-identical."""
    relayed = Demo(small(tmp_path / "relay", clients=8, update_batch=3)).run()
    alone = Demo(small(tmp_path / "alone", clients=8, update_batch=0)).run()
    gas_r, gas_a = relayed.summary["gas_by_operation"], alone.summary["gas_by_operation"]
    assert gas_r["submitUpdates"]["count"] == 3 and "submitUpdate" not in gas_r
    assert gas_a["submitUpdate"]["count"] == 8 and "submitUpdates" not in gas_a
    assert relayed.summary["final_model_digest"] == alone.summary["final_model_digest"]
    for result in (relayed, alone):
        record = json.loads((result.run_dir / "rounds.jsonl").read_text().splitlines()[0])
        assert record["updates_registered"] == 8


def test_engine_options_reach_demo_and_scenario_configs() -> None:
    from fedchain.cli import _demo_config, _engine_overrides, build_parser

    parser = build_parser()
    args = parser.parse_args(["demo", "--engine", "ray", "--ray-cpus", "2"])
    cfg = _demo_config(args)
    assert (cfg.engine, cfg.ray_cpus, cfg.ray_address) == ("ray", 2, None)
    assert _demo_config(parser.parse_args(["demo"])).engine == "sequential"
    run = parser.parse_args(["run", "s.toml", "--ray-address", "10.0.0.1:6379"])
    assert _engine_overrides(run) == {"engine": "ray", "ray_address": "10.0.0.1:6379"}
    assert _engine_overrides(parser.parse_args(["run", "s.toml"])) == {}
    assert _engine_overrides(parser.parse_args(["run", "s.toml", "--update-batch", "0"])) == {
        "update_batch": 0
    }
