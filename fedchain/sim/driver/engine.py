"""Training engines: where the in-process clients' local training runs.

Local training is a pure function of (global parameters, client data, seed):
:func:`clients.training.train_local`. An engine runs a batch of such trainings and returns
their results in order; the client nodes then publish and register them
(:meth:`clients.node.ClientNode.finish_round`), so the bytes on chain do not depend on where
training ran. Two engines:

* :class:`SequentialEngine` trains one client after another in this process, with one
  model object reused for every client (training overwrites all its parameters).
* :class:`RayEngine` fans the batch out as `Ray <https://docs.ray.io>`_ tasks, on a local
  Ray instance started (bounded: ``num_cpus``, no dashboard, no usage reporting) and stopped
  by the run, or on an existing cluster (``--ray-address``). Client datasets are put in
  Ray's object store once; each round puts the global parameters once; each task trains a
  contiguous chunk of clients with one model.

Every worker trains under :func:`clients.training.deterministic_torch` (one intra-op
thread), so on the same machine and torch build the results are bit-identical to the
sequential engine's (``tests/test_engines.py`` checks digests on a local multi-process Ray
cluster). Across CPU families SIMD kernels may differ; the protocol does not need client
training to be reproducible elsewhere, only aggregation.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from torch import nn

from clients.data import Dataset
from clients.models import build_model
from clients.training import TrainConfig, TrainResult, train_local
from fedchain.config import ENGINES
from protocol.errors import ConfigError

__all__ = [
    "ENGINES",
    "ModelSpec",
    "RayEngine",
    "SequentialEngine",
    "TrainJob",
    "TrainingEngine",
    "make_engine",
    "train_jobs",
]


#: Object store of a local Ray instance: at least this, or a few times the bound data.
_MIN_OBJECT_STORE = 256 * 2**20


@dataclass(frozen=True)
class ModelSpec:
    """What every worker needs to build the task's model (its weights are overwritten)."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    seed: int = 0

    def build(self) -> nn.Module:
        return build_model(self.name, self.input_shape, self.num_classes, seed=self.seed)


@dataclass(frozen=True)
class TrainJob:
    """One client's training: its position among the bound datasets and its settings."""

    client: int
    config: TrainConfig


def train_jobs(
    model: nn.Module,
    global_params: Mapping[str, np.ndarray],
    datasets: Sequence[Dataset],
    jobs: Sequence[TrainJob],
) -> list[TrainResult]:
    """Run ``jobs`` one after another with one ``model`` (the body of every engine)."""
    return [train_local(model, global_params, datasets[j.client], j.config) for j in jobs]


class TrainingEngine(Protocol):
    """Runs batches of local trainings; results come back in job order."""

    name: str

    def bind(self, model: ModelSpec, datasets: Sequence[Dataset]) -> None:
        """Fix the model architecture and the clients' datasets (once per run)."""

    def train(
        self, global_params: Mapping[str, np.ndarray], jobs: Sequence[TrainJob]
    ) -> list[TrainResult]:
        """Train every job from ``global_params``; the i-th result belongs to ``jobs[i]``."""

    def close(self) -> None:
        """Release workers (idempotent)."""


class SequentialEngine:
    """Every training in this process, one after another, with one reused model."""

    name = "sequential"

    def __init__(self) -> None:
        self._model: nn.Module | None = None
        self._datasets: Sequence[Dataset] = ()

    def bind(self, model: ModelSpec, datasets: Sequence[Dataset]) -> None:
        self._model = model.build()
        self._datasets = datasets

    def train(
        self, global_params: Mapping[str, np.ndarray], jobs: Sequence[TrainJob]
    ) -> list[TrainResult]:
        if self._model is None:
            raise ConfigError("SequentialEngine.train before bind")
        return train_jobs(self._model, global_params, self._datasets, jobs)

    def close(self) -> None:
        self._model = None


def _ray_train(
    model: ModelSpec,
    global_params: Mapping[str, np.ndarray],
    datasets: Sequence[Dataset],
    jobs: Sequence[TrainJob],
) -> list[TrainResult]:
    """A Ray task: one chunk of clients with one model (Ray resolves the object refs)."""
    return train_jobs(model.build(), global_params, datasets, jobs)


def _ray_warm(model: ModelSpec, hold: float) -> str:
    """A Ray task that starts a worker up; returns its node's id.

    It imports the training code and builds the model once (torch's first use costs
    seconds), then holds its CPU for ``hold`` seconds so that concurrent warm-up tasks land
    on distinct workers: every worker is ready before the first round.
    """
    import time

    import ray

    model.build()
    time.sleep(hold)
    node: str = ray.get_runtime_context().get_node_id()
    return node


class RayEngine:
    """Trainings as Ray tasks, on a local instance (default) or an existing cluster.

    ``address`` None starts a private local instance with ``num_cpus`` CPUs (default: this
    machine's), no dashboard, usage reporting off, a bounded object store, and every server
    on 127.0.0.1; :meth:`close` shuts it down. With ``address`` (``HOST:PORT`` of a head
    node's GCS, or ``auto``) the engine joins that cluster and only disconnects on
    :meth:`close`. Every node of a cluster needs this project installed with the same pins
    (``make setup``): tasks import :mod:`fedchain.sim.driver.engine` there. Nothing is
    downloaded at run time (no ``runtime_env``).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        *,
        chunks_per_cpu: int = 2,
    ) -> None:
        # Never phone home: Ray's usage statistics are off unless the user turned them on.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - ray is a pinned dependency
            raise ConfigError(f"--engine 'ray': ray is not installed ({exc})") from exc
        self._ray: Any = ray
        self.address = address
        self.num_cpus = num_cpus
        self.chunks_per_cpu = chunks_per_cpu
        self._owns_instance = address is None
        self._model_ref: Any = None
        self._data_ref: Any = None
        self._remote: Any = None
        self._started = False
        self._temp_dir: str | None = None
        self._restore: Callable[[], None] | None = None
        #: Ids of the Ray nodes whose workers started up (spread over the cluster) in bind.
        self.nodes: list[str] = []

    def _start(self, data_bytes: int) -> None:
        ray = self._ray
        if ray.is_initialized():
            raise ConfigError("--engine 'ray': Ray is already initialised in this process")
        common: dict[str, Any] = {
            "log_to_driver": False,
            "logging_level": logging.WARNING,
            "configure_logging": True,
        }
        try:
            if self._owns_instance:
                self._restore = _single_machine()
                # Its session files (logs, sockets) live in a directory of its own, removed
                # by close(): runs do not pile sessions up under /tmp/ray.
                self._temp_dir = tempfile.mkdtemp(prefix="fedchain-ray-")
                with _quiet_token_notice():
                    ray.init(
                        address="local",
                        _temp_dir=self._temp_dir,
                        num_cpus=self.num_cpus or os.cpu_count() or 1,
                        include_dashboard=False,
                        object_store_memory=max(_MIN_OBJECT_STORE, 4 * data_bytes),
                        **common,
                    )
            else:
                _probe(str(self.address))
                ray.init(address=self.address, **common)
        except ConfigError:
            raise
        except Exception as exc:
            where = f"--ray-address {self.address!r}" if self.address else "--engine 'ray'"
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"{where}: cannot start or reach Ray ({first})") from exc
        self._started = True

    @property
    def cluster_cpus(self) -> int:
        """CPUs of the Ray cluster this engine uses."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def bind(self, model: ModelSpec, datasets: Sequence[Dataset]) -> None:
        data_bytes = sum(d.x.nbytes + d.y.nbytes for d in datasets)
        if not self._started:
            self._start(data_bytes)
        ray = self._ray
        self._remote = ray.remote(num_cpus=1)(_ray_train)
        self._model_ref = ray.put(model)
        self._data_ref = ray.put(list(datasets))
        warm = ray.remote(num_cpus=1)(_ray_warm)
        spread = warm.options(scheduling_strategy="SPREAD")
        warmed = ray.get([spread.remote(self._model_ref, 0.5) for _ in range(self.cluster_cpus)])
        self.nodes = sorted(set(warmed))

    def train(
        self, global_params: Mapping[str, np.ndarray], jobs: Sequence[TrainJob]
    ) -> list[TrainResult]:
        if self._remote is None:
            raise ConfigError("RayEngine.train before bind")
        if not jobs:
            return []
        ray = self._ray
        params_ref = ray.put(dict(global_params))
        chunks = min(len(jobs), self.chunks_per_cpu * self.cluster_cpus)
        size = math.ceil(len(jobs) / chunks)
        futures = [
            self._remote.remote(self._model_ref, params_ref, self._data_ref, jobs[i : i + size])
            for i in range(0, len(jobs), size)
        ]
        results: list[TrainResult] = [r for chunk in ray.get(futures) for r in chunk]
        return results

    def close(self) -> None:
        if self._started:
            self._started = False
            self._remote = self._model_ref = self._data_ref = None
            self._ray.shutdown()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        if self._restore is not None:
            self._restore()
            self._restore = None


_CLUSTER_FLAG = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _single_machine() -> Callable[[], None]:
    """Make Ray's next instance single-machine (node address 127.0.0.1, loopback servers).

    Ray's switch is ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read into
    ``ray_constants.ENABLE_RAY_CLUSTER`` when Ray is imported and inherited by the processes
    it starts; both are set here, whenever Ray was first imported. Returns the function
    that restores the previous settings (called when the instance is shut down, so that a
    later ``--ray-address`` in the same process joins a cluster as the user configured).
    """
    from ray._private import ray_constants

    env_before = os.environ.get(_CLUSTER_FLAG)
    constant_before = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_CLUSTER_FLAG] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False

    def restore() -> None:
        if env_before is None:
            os.environ.pop(_CLUSTER_FLAG, None)
        else:
            os.environ[_CLUSTER_FLAG] = env_before
        ray_constants.ENABLE_RAY_CLUSTER = constant_before

    return restore


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Token authentication is enabled" not in record.getMessage()


@contextlib.contextmanager
def _quiet_token_notice() -> Iterator[None]:
    """Ray's default token authentication for a new local instance, without its warning.

    Ray turns token authentication on for a new local instance (and refreshes its own
    configuration, whatever was imported before) unless ``RAY_AUTH_MODE`` says otherwise;
    it then logs a warning meant for people who start clusters by hand.
    """
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    notice = _DropTokenNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast on an unreachable ``HOST:PORT`` (Ray itself retries for minutes)."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"--ray-address {address!r}: expected HOST:PORT of a Ray head node")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(
            f"--ray-address {address!r}: cannot reach a Ray head node there ({exc.strerror or exc})"
        ) from exc


def make_engine(
    engine: str, *, ray_address: str | None = None, ray_cpus: int | None = None
) -> TrainingEngine:
    """The engine named by ``--engine`` (``ConfigError`` for an unknown name)."""
    if engine == "sequential":
        return SequentialEngine()
    if engine == "ray":
        return RayEngine(ray_address, ray_cpus)
    raise ConfigError(f"--engine {engine!r}: must be one of {list(ENGINES)}")
