"""Training engines: the sequential engine and Ray (local instance, and a local multi-process
cluster joined by address) give byte-identical updates and models for the same seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clients.data import load_dataset, partition
from clients.models import get_params
from clients.training import TrainConfig, derive_seed, params_digest, train_local
from fedchain.sim.driver.engine import ModelSpec, RayEngine, SequentialEngine, TrainJob
from fedchain.sim.driver.events import read_events
from fedchain.sim.runner import Demo, DemoConfig
from protocol.errors import ConfigError


def _jobs(n: int, round_: int = 1) -> list[TrainJob]:
    return [TrainJob(i, TrainConfig(epochs=1, seed=derive_seed(0, i, round_))) for i in range(n)]


@pytest.fixture(scope="module")
def shards() -> tuple[ModelSpec, list[Any], dict[str, np.ndarray]]:
    train, _ = load_dataset("digits", seed=0)
    data = [train.subset(p) for p in partition("iid", train.y, 8, seed=0)]
    spec = ModelSpec("mlp", train.input_shape, train.num_classes, seed=0)
    return spec, data, get_params(spec.build())


def test_sequential_engine_reuses_one_model_without_leaking_state(shards) -> None:
    spec, data, global_params = shards
    engine = SequentialEngine()
    engine.bind(spec, data)
    jobs = _jobs(len(data))
    got = engine.train(global_params, jobs)
    # The same trainings, each on a model of its own, give bit-identical parameters.
    for job, result in zip(jobs, got, strict=True):
        alone = train_local(spec.build(), global_params, data[job.client], job.config)
        assert params_digest(alone.params) == params_digest(result.params)
        assert alone.num_samples == result.num_samples == len(data[job.client])
    # Order of the batch does not matter either: no state carries from one client to the next.
    backwards = engine.train(global_params, jobs[::-1])
    assert [params_digest(r.params) for r in backwards[::-1]] == [
        params_digest(r.params) for r in got
    ]


SMALL: dict[str, Any] = {
    "clients": 6,
    "aggregators": 3,
    "rounds": 2,
    "epochs": 1,
    "challenge_window": 1,
}


def _run(tmp_path: Path, name: str, **kw: Any) -> Demo:
    demo = Demo(DemoConfig(**SMALL, out=str(tmp_path), name=name, **kw))
    demo.run()
    return demo


def _update_digests(run_dir: Path) -> list[tuple[int, str, str]]:
    events = read_events(run_dir / "events.jsonl")
    return [
        (e["round"], e["client"], e["digest"]) for e in events if e["kind"] == "update_registered"
    ]


@pytest.fixture(scope="module")
def sequential_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], str]:
    demo = _run(tmp_path_factory.mktemp("seq"), "seq")
    summary = json.loads((demo.run_dir / "summary.json").read_text())
    return _update_digests(demo.run_dir), summary["final_model_digest"]


@pytest.mark.slow
def test_local_ray_instance_gives_byte_identical_updates(tmp_path: Path, sequential_run) -> None:
    digests, final = sequential_run
    demo = _run(tmp_path, "ray", engine="ray", ray_cpus=2)
    summary = json.loads((demo.run_dir / "summary.json").read_text())
    assert summary["config"]["engine"] == "ray"
    assert _update_digests(demo.run_dir) == digests and len(digests) == 12
    assert summary["final_model_digest"] == final
    import ray

    assert not ray.is_initialized()  # the run shut its local instance down


#: Run in a fresh interpreter: a Ray cluster of two nodes (two raylets, one CPU each) on this
#: machine, then a demo whose engine joins it by address. Ray's own test helper keeps every
#: server on 127.0.0.1 (single-machine mode; ``ray start`` would resolve 127.0.0.1 to the
#: machine's outward address and listen on every interface) and stops exactly the processes
#: it started. Authentication is off for this loopback-only cluster; a fresh process keeps
#: the driver's Ray settings consistent with the cluster's.
CLUSTER_RUN = """
import json, os, shutil, sys, tempfile
os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
                  RAY_AUTH_MODE="disabled")
from ray.cluster_utils import Cluster
from fedchain.sim.runner import Demo, DemoConfig
temp_dir = tempfile.mkdtemp(prefix="fedchain-ray-")  # short: Ray puts sockets there
# Ray's test cluster writes its address to <system temp>/ray/ray_current_cluster, which
# exists only once some Ray instance has run on the machine: point it into our own dir.
os.environ["RAY_TMPDIR"] = temp_dir
os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
node = {"num_cpus": 1, "object_store_memory": 128 * 2**20, "temp_dir": temp_dir}
cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
try:
    cluster.add_node(**node)
    cfg = DemoConfig(**json.loads(sys.argv[1]), engine="ray", ray_address=cluster.address)
    demo = Demo(cfg)
    demo.run()
    print(json.dumps({"nodes": len(demo.engine.nodes), "run_dir": str(demo.run_dir)}))
finally:
    cluster.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)
"""


@pytest.mark.slow
def test_ray_cluster_of_two_nodes_gives_byte_identical_updates(
    tmp_path: Path, sequential_run
) -> None:
    digests, final = sequential_run
    cfg = {**SMALL, "out": str(tmp_path), "name": "cluster"}
    proc = subprocess.run(
        [sys.executable, "-c", CLUSTER_RUN, json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["nodes"] == 2  # workers started on both nodes
    run_dir = Path(out["run_dir"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["config"]["ray_address"].startswith("127.0.0.1:")
    assert _update_digests(run_dir) == digests
    assert summary["final_model_digest"] == final


def test_unreachable_ray_address_is_a_config_error(tmp_path: Path) -> None:
    engine = RayEngine(address="127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"--ray-address '127.0.0.1:1': cannot reach"):
        engine.bind(ModelSpec("logreg", (4,), 2), [])
    with pytest.raises(ConfigError, match="HOST:PORT"):
        RayEngine(address="no-port").bind(ModelSpec("logreg", (4,), 2), [])
    with pytest.raises(ConfigError, match="needs --engine ray"):
        Demo(DemoConfig(ray_address="127.0.0.1:6379", out=str(tmp_path)))
