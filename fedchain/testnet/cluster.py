"""A local testnet on real parts: anvil, an IPFS daemon, and every node its own process.

``up`` starts the chain and the IPFS daemon (loopback only, data under the testnet
directory), creates the task exactly as ``fedchain demo`` does (same data split, model,
manifest and contract configuration), then launches each aggregator and each client as its
own OS process (``python -m fedchain.testnet.node``) with its own key. ``status`` reads the chain
and the PID files, ``wait`` blocks until the task completes, ``kill``/``start`` stop and
restart single nodes (crash tests), ``down`` stops everything by PID.

Everything the processes share is in ``DIR/testnet.json``; logs are ``DIR/logs/*.log``,
PID files ``DIR/pids/*.pid``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from adapters.services import is_running
from fedchain.config import DemoConfig
from protocol.errors import ConfigError, FedchainError

SPEC_FILE = "testnet.json"


def _spec_path(directory: Path) -> Path:
    return directory / SPEC_FILE


def write_private(path: Path, text: str) -> None:
    """Write ``path`` readable and writable by its owner only (mode 0600, also when it
    existed with a wider mode): ``testnet.json`` holds every node's account key and the HE
    key holder's Paillier secret."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def load_spec(directory: str | Path) -> dict[str, Any]:
    path = _spec_path(Path(directory))
    if not path.exists():
        raise ConfigError(f"no testnet at {directory} (missing {SPEC_FILE}); run 'testnet up'")
    spec: dict[str, Any] = json.loads(path.read_text())
    return spec


def _write_spec(directory: Path, spec: dict[str, Any]) -> None:
    write_private(_spec_path(directory), json.dumps(spec, indent=2))


def _pid_file(directory: Path, name: str) -> Path:
    return directory / "pids" / f"{name}.pid"


def node_pid(directory: Path, name: str) -> int | None:
    path = _pid_file(directory, name)
    if not path.exists():
        return None
    try:
        return int(path.read_text().strip())
    except ValueError:
        return None


def start_node(directory: Path, name: str, *, max_seconds: float | None = None) -> int:
    """Launch node ``name`` as its own process (own session), logging to DIR/logs."""
    spec = load_spec(directory)
    if name not in {n["name"] for n in spec["nodes"]}:
        raise ConfigError(f"no node named {name!r}; nodes: {[n['name'] for n in spec['nodes']]}")
    pid = node_pid(directory, name)
    if pid is not None and is_running(pid):
        raise FedchainError(f"{name} is already running (pid {pid})")
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "pids").mkdir(exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "fedchain.testnet.node",
        "--testnet",
        str(_spec_path(directory)),
        "--name",
        name,
    ]
    if max_seconds is not None:
        cmd += ["--max-seconds", str(max_seconds)]
    log = (directory / "logs" / f"{name}.log").open("ab")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    log.close()
    _pid_file(directory, name).write_text(str(proc.pid))
    return proc.pid


def kill_node(directory: Path, name: str, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to node ``name``'s process group (default: kill -9). True if it ran."""
    pid = node_pid(directory, name)
    if pid is None or not is_running(pid):
        return False
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    for _ in range(100):
        if not is_running(pid):
            break
        time.sleep(0.05)
    return True


def up(
    cfg: DemoConfig,
    directory: Path,
    *,
    use_ipfs: bool = True,
    block_time: float = 1.0,
    max_seconds: float | None = None,
    scenario: Any = None,
    pbft_netem: Any = None,
) -> dict[str, Any]:
    """Start services, create the task, launch every node process; return the spec.

    With ``pbft_netem`` (a :class:`fedchain.testnet.netem.LinkProfile`) the aggregators reach each
    other's PBFT ports only through delaying, lossy proxies (one process, ``DIR/netem``).
    """
    from adapters.services import AnvilService, IpfsService
    from fedchain.sim.runner import Demo
    from protocol.metrics import Progress

    cfg.validate()  # bad values (a committee below 4, say) before anything starts
    if cfg.he_threshold:
        raise ConfigError(
            "--he-threshold: threshold HE runs in-process only for now (the testnet's node "
            "processes run a single key holder)"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--dir {str(directory)!r}: cannot create it ({exc.strerror})") from exc
    if _spec_path(directory).exists():
        existing = load_spec(directory)
        if any(is_running(p) for p in _all_pids(directory, existing)):
            raise FedchainError(f"a testnet is already running in {directory}; 'testnet down'")
    # A new task: replicas start fresh. Votes kept from an earlier task were signed in another
    # EIP-712 domain (they cannot conflict with this task's) and would be refused on restore.
    shutil.rmtree(directory / "pbft", ignore_errors=True)
    services: dict[str, Any] = {}
    anvil = AnvilService(
        directory / "anvil", block_time=block_time, state_path=directory / "anvil" / "state.json"
    )
    anvil.start()
    services["anvil"] = {"pid": anvil.pid, "pid_file": str(anvil.pid_path), "url": anvil.url}
    anvil.detach()  # keep running after this process exits; stopped by its PID file
    spec: dict[str, Any] = {
        "version": 1,
        "dir": str(directory),
        "rpc_url": anvil.url,
        "block_time": block_time,
        "services": services,
    }
    _write_spec(directory, spec)  # so 'down' can find it
    try:
        if use_ipfs:
            ipfs = IpfsService(directory / "ipfs")
            ipfs.start()
            services["ipfs"] = {
                "pid": ipfs.pid,
                "pid_file": str(ipfs.pid_path),
                "api": ipfs.api_multiaddr,
            }
            ipfs.detach()
            spec["ipfs_api"] = ipfs.api_multiaddr
            store = "ipfs:" + ipfs.api_multiaddr
        else:
            spec["store_dir"] = str(directory / "store")
            store = spec["store_dir"]
        spec["services"] = services
        _write_spec(directory, spec)
        run_cfg = DemoConfig(
            **{
                **asdict(cfg),
                **reveal_timing(cfg, block_time),
                "rpc_url": anvil.url,
                "funding_key": anvil.funding_key,
                "store": store,
                "out": str(directory / "runs"),
            }
        )
        demo = Demo(run_cfg, Progress(quiet=True))
        # deploy and register: the same task a demo would create; a secure-aggregation task
        # starts once the client processes have registered their keys (below)
        demo.setup(start=False)
        behaviours = scenario.aggregators if scenario is not None else {}
        nodes = [
            {
                "name": f"aggregator-{i}",
                "role": "aggregator",
                "index": i,
                "address": a.address,
                "key": a.key.hex(),
                "pbft_port": 0,
                "behaviour": behaviour_json(behaviours[i]) if i in behaviours else {},
            }
            for i, a in enumerate(demo.agg_accounts)
        ] + [
            {
                "name": f"client-{i}",
                "role": "client",
                "index": i,
                "address": a.address,
                "key": a.key.hex(),
            }
            for i, a in enumerate(demo.client_accounts)
        ]
        holder = demo.deployment.key_holder
        if holder is not None:
            key = demo.deployment.he_private_key
            nodes.append(
                {
                    "name": "key-holder",
                    "role": "key-holder",
                    "index": len(demo.client_accounts),
                    "address": holder.address,
                    "key": holder.key.hex(),
                    "he_private_key": {
                        "n": format(int(key.public_key.n), "x"),
                        "p": format(int(key.p), "x"),
                        "q": format(int(key.q), "x"),
                    },
                }
            )
        spec.update(
            task=demo.task.address,
            chain_id=demo.chain.chain_id,
            manifest_digest=demo.manifest.digest.hex(),
            config=asdict(run_cfg),
            nodes=nodes,
            started=time.time(),
        )
        games = demo.deployment.games
        if games is not None:  # --dispute fault-proof | both: the nodes play the games
            spec["fault_games"] = games.address
        from fedchain.testnet.pbft_service import assign_ports

        assign_ports(spec)
        if pbft_netem is not None:
            from fedchain.testnet.netem import start_pbft_proxies

            start_pbft_proxies(spec, directory / "netem", pbft_netem, cfg.seed, max_seconds)
        _write_spec(directory, spec)
        for node in nodes:
            start_node(directory, str(node["name"]), max_seconds=max_seconds)
        _start_task(demo, spec, max_seconds)
    except BaseException:
        down(directory)
        raise
    return spec


#: Seconds a secure-aggregation or HE round's reveal window lasts on the testnet by default:
#: each client process fetches the included payloads and computes its reveal in it.
REVEAL_SECONDS = 10.0


def reveal_timing(cfg: DemoConfig, block_time: float) -> dict[str, int]:
    """A reveal window of :data:`REVEAL_SECONDS` (unless ``--reveal-window`` was given) and
    a submit timeout that still leaves the aggregator ``--submit-timeout`` blocks after it."""
    from privacy.spec import SUM_MODES, parse_mode

    if parse_mode(cfg.privacy) not in SUM_MODES or cfg.reveal_window != DemoConfig.reveal_window:
        return {}
    window = max(cfg.reveal_window, int(-(-REVEAL_SECONDS // block_time)))
    # SecAgg+: the committee attests the content-stored reveals in a second window after it
    windows = 2 if cfg.privacy_spec().secagg_plus else 1
    return {"reveal_window": window, "submit_timeout": cfg.submit_timeout + windows * window}


#: Seconds ``up`` waits for the client processes' secure-aggregation keys before it starts
#: the task with whoever registered (a client that comes later joins from a later round).
KEY_SETUP_TIMEOUT = 180.0


def _start_task(demo: Any, spec: dict[str, Any], max_seconds: float | None) -> None:
    """Start the task: at once, or (secure aggregation) once every client process has
    registered its encryption key and its first key record, or after the timeout."""
    from adapters.privacy_records import MASK_KEY

    view = demo.deployment.private_view()
    if demo.private_driver is not None and view is not None:
        wanted = len(demo.client_accounts)
        deadline = time.monotonic() + min(KEY_SETUP_TIMEOUT, max_seconds or KEY_SETUP_TIMEOUT)
        while time.monotonic() < deadline:
            if len(view.records.first_payloads(0, MASK_KEY)) >= wanted:
                break
            time.sleep(spec.get("block_time", 1.0))
    if demo.cfg.start_task:
        demo.task.start(demo.deployment.deployer)


def restart_chain(directory: Path, downtime: float = 0.0) -> dict[str, Any]:
    """Stop the testnet's anvil (it writes its chain to ``anvil/state.json``) and start it
    again on the same port from that state; the node processes reconnect and resume."""
    from urllib.parse import urlsplit

    from adapters.services import AnvilService, stop_pidfile

    spec = load_spec(directory)
    service = spec["services"]["anvil"]
    stop_pidfile(service["pid_file"])
    time.sleep(downtime)
    anvil = AnvilService(
        directory / "anvil",
        port=int(urlsplit(spec["rpc_url"]).port or 0),
        block_time=spec.get("block_time", 1.0),
        state_path=directory / "anvil" / "state.json",
    )
    anvil.start()
    service["pid"] = anvil.pid
    anvil.detach()
    _write_spec(directory, spec)
    return spec


def behaviour_json(b: Any) -> dict[str, Any]:
    """A Behaviour as JSON (rounds as a sorted list)."""
    return {
        "publish": b.publish,
        "params": dict(b.params),
        "rounds": sorted(b.rounds) if b.rounds is not None else None,
        "challenger": b.challenger,
        "pbft": b.pbft,
        "attest": b.attest,
        "crash_at": b.crash_at,
        "crash_round": b.crash_round,
    }


def _all_pids(directory: Path, spec: dict[str, Any]) -> list[int]:
    pids = [node_pid(directory, n["name"]) for n in spec.get("nodes", [])]
    pids += [s.get("pid") for s in spec.get("services", {}).values()]
    return [p for p in pids if p]


def status(directory: Path) -> dict[str, Any]:
    """Chain progress and which processes are alive."""
    spec = load_spec(directory)
    out: dict[str, Any] = {
        "dir": str(directory),
        "task": spec.get("task"),
        "rpc_url": spec.get("rpc_url"),
        "ipfs_api": spec.get("ipfs_api"),
    }
    out["services"] = {
        name: {"pid": s.get("pid"), "running": bool(s.get("pid")) and is_running(s["pid"])}
        for name, s in spec.get("services", {}).items()
    }
    out["nodes"] = {
        n["name"]: {
            "pid": node_pid(directory, n["name"]),
            "running": (p := node_pid(directory, n["name"])) is not None and is_running(p),
        }
        for n in spec.get("nodes", [])
    }
    if out["services"].get("anvil", {}).get("running") and spec.get("task"):
        from web3 import Web3

        from adapters.chain import Chain
        from adapters.contract import TaskContract

        chain = Chain(Web3(Web3.HTTPProvider(spec["rpc_url"])), [])
        task = TaskContract.at(chain, spec["task"])
        r = task.current_round()
        out["chain"] = {
            "block": chain.block_number(),
            "round": r,
            "phase": task.phase(r).name if r else "PENDING",
            "rounds": task.config().num_rounds,
            "completed": task.task_completed(),
            "global_model_digest": task.global_model_digest().hex(),
        }
    return out


def wait(directory: Path, timeout: float = 600.0, poll: float = 1.0) -> dict[str, Any]:
    """Block until the task completes (or ``timeout``); return the final status."""
    deadline = time.monotonic() + timeout
    while True:
        st = status(directory)
        if st.get("chain", {}).get("completed"):
            return st
        if time.monotonic() > deadline:
            raise FedchainError(
                f"testnet did not complete within {timeout:.0f}s: {st.get('chain')}"
            )
        time.sleep(poll)


def down(directory: Path) -> list[str]:
    """Stop every node, then the services, by PID (process groups). Returns what stopped."""
    stopped: list[str] = []
    path = _spec_path(directory)
    if not path.exists():
        return stopped
    spec = json.loads(path.read_text())
    for node in spec.get("nodes", []):
        if kill_node(directory, node["name"], signal.SIGTERM):
            stopped.append(node["name"])
        kill_node(directory, node["name"], signal.SIGKILL)
    from adapters.services import stop_pidfile

    for name, svc in spec.get("services", {}).items():
        if svc.get("pid_file") and stop_pidfile(svc["pid_file"]):
            stopped.append(name)
    return stopped
