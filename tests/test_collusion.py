"""The papers' collusion model for omniscient client attacks (issue 10's IPM anomaly).

Every colluder must register the identical vector, computed from the honest updates only:
for IPM ``-epsilon * mean(honest)``, for ALIE ``mean - z * std`` with ``z_max(n, m)`` and
``m`` the number of colluders. The old behaviour ("sequential") lets each attacker fold the
earlier attackers' vectors into its statistics, so their vectors differ.
"""

from __future__ import annotations

import numpy as np
import pytest

from adapters.storage import get_by_digest
from clients.attacks import alie_z, colluding_update
from fedchain.config import DemoConfig
from fedchain.sim.runner import Demo
from fedchain.sim.scenario import ClientBehaviour, Scenario, scenario_from_dict
from protocol.errors import ConfigError
from protocol.fixedpoint import dequantise
from protocol.metrics import Progress
from protocol.payloads import decode_update

CLIENTS, COLLUDERS = 6, 2


def _run(
    tmp_path, attack: str, params: dict, collusion: str, update_batch: int = 100
) -> tuple[list, list]:
    cfg = DemoConfig(
        update_batch=update_batch,
        clients=CLIENTS,
        rounds=1,
        epochs=1,
        aggregators=1,
        attest_window=0,
        challenge_window=1,
        out=str(tmp_path),
        name=f"{attack}-{collusion}",
    )
    bad = {
        i: ClientBehaviour(attack, params, collusion=collusion)
        for i in range(CLIENTS - COLLUDERS, CLIENTS)
    }
    demo = Demo(cfg, Progress(quiet=True), scenario=Scenario(cfg, clients=bad))
    demo.run()
    colluders = {demo.client_accounts[i].address for i in bad}
    fmt = demo.manifest.numeric
    honest, crafted = [], []
    for u in demo.task.updates(1):
        q = decode_update(demo.layout, fmt, 1, get_by_digest(demo.store, u.digest))
        (crafted if u.client in colluders else honest).append((u.digest, dequantise(q, 16)))
    assert len(honest) == CLIENTS - COLLUDERS and len(crafted) == COLLUDERS
    return honest, crafted


@pytest.mark.slow
def test_ipm_colluders_send_one_paper_vector(tmp_path):
    honest, crafted = _run(tmp_path, "inner_product_manipulation", {"epsilon": 10.0}, "paper")
    assert crafted[0][0] == crafted[1][0]  # identical bytes on chain
    expected = -10.0 * np.mean([d for _, d in honest], axis=0)
    # fixed point: 2^-17 per coordinate, float32 rounding of the crafted vector on top
    np.testing.assert_allclose(crafted[0][1], np.clip(expected, -4, 4), atol=1e-4, rtol=1e-5)


@pytest.mark.slow
def test_alie_colluders_use_m_and_send_one_vector(tmp_path):
    honest, crafted = _run(tmp_path, "alie", {}, "paper")
    assert crafted[0][0] == crafted[1][0]
    stack = np.stack([d for _, d in honest])
    z = alie_z(CLIENTS, COLLUDERS)
    expected = stack.mean(axis=0) - z * stack.std(axis=0)
    np.testing.assert_allclose(crafted[0][1], expected, atol=1e-4, rtol=1e-5)


@pytest.mark.slow
def test_sequential_mode_reproduces_the_old_drift(tmp_path):
    # The drift needs attackers registering one after the other (each its own submitUpdate):
    # in a relayed batch the second attacker cannot see the first one's vector yet.
    honest, crafted = _run(
        tmp_path, "inner_product_manipulation", {"epsilon": 10.0}, "sequential", update_batch=0
    )
    assert crafted[0][0] != crafted[1][0]
    first = -10.0 * np.mean([d for _, d in honest], axis=0)
    # the second attacker saw the first one's vector among the "honest" ones
    second = -10.0 * np.mean([d for _, d in honest] + [crafted[0][1]], axis=0)
    np.testing.assert_allclose(crafted[0][1], np.clip(first, -4, 4), atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(crafted[1][1], np.clip(second, -4, 4), atol=1e-4, rtol=1e-5)


def test_colluding_update_defaults_m_and_n_for_alie():
    rng = np.random.default_rng(0)
    honest = [{"w": rng.normal(size=5).astype(np.float32)} for _ in range(16)]
    out = colluding_update("alie", honest, num_colluders=4, num_clients=20)
    s = np.stack([h["w"].astype(np.float64) for h in honest])
    want = s.mean(axis=0) - alie_z(20, 4) * s.std(axis=0)
    np.testing.assert_allclose(out["w"], want.astype(np.float32))
    fixed_z = colluding_update("alie", honest, num_colluders=4, num_clients=20, z=1.5)
    np.testing.assert_allclose(
        fixed_z["w"], (s.mean(axis=0) - 1.5 * s.std(axis=0)).astype(np.float32)
    )
    with pytest.raises(ConfigError, match="not an omniscient"):
        colluding_update("sign_flip", honest, num_colluders=4, num_clients=20)


def test_scenario_collusion_key_is_checked():
    base = {"run": {"clients": 5}, "client": [{"index": 4, "attack": "alie", "collusion": "x"}]}
    with pytest.raises(ConfigError, match=r"x\.toml \[\[client\]\] #1: collusion = 'x'"):
        scenario_from_dict(base, "x.toml")
    base["client"][0]["collusion"] = 3
    with pytest.raises(ConfigError, match=r"collusion = 3: expected a string"):
        scenario_from_dict(base, "x.toml")
    base["client"][0]["collusion"] = "sequential"
    sc = scenario_from_dict(base, "x.toml")
    assert sc.clients[4].collusion == "sequential"
    assert sc.describe()["clients"]["4"]["collusion"] == "sequential"
