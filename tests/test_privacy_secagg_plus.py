"""SecAgg+ (issue 21 item 3): masking, dealing and unmasking along a random Harary graph
derived from on-chain randomness; the task options and manifest; an end-to-end round."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aggregators.private import PrivateInputs, private_sum
from fedchain.cli import main
from fedchain.config import DemoConfig
from privacy import secagg_round as sr
from privacy.client_keys import ClientSecrets
from privacy.mask_graph import graph_seed, harary_table, round_holders
from privacy.secagg import Reveal
from privacy.spec import PrivacySpec
from protocol.errors import ConfigError
from tests.private_rounds import manifest

TASK = "0x00000000000000000000000000000000000000ab"
K, DEGREE, T = 16, 6, 4
RANDOMNESS = bytes(range(32))


def _spec(**kw: object) -> PrivacySpec:
    base: dict[str, object] = {
        "mode": "secagg",
        "num_clients": K,
        "dropout_fraction": 0.25,
        "mask_graph": "harary",
        "graph_degree": DEGREE,
        "graph_threshold": T,
    }
    base.update(kw)
    return PrivacySpec(**base)  # type: ignore[arg-type]


def _graph(round_: int) -> sr.Holders:
    return round_holders(K, DEGREE, RANDOMNESS, TASK, round_)


def _federation() -> tuple[list[ClientSecrets], sr.SecAggContext, dict[int, sr.KeyRecord]]:
    secrets = [ClientSecrets(bytes([9, i + 1]) * 16, TASK, i) for i in range(K)]
    enc = {s.index: s.enc_public for s in secrets}
    ctx = sr.SecAggContext(TASK, T, enc, _graph)
    posted = {s.index: sr.client_key_record(s, 1, ctx) for s in secrets}
    peers, refused = sr.keys_in_force(1, {}, posted, ctx)
    assert not refused
    return secrets, ctx, peers


def test_the_graph_is_a_pure_function_of_the_pinned_randomness() -> None:
    table = harary_table(K, DEGREE, graph_seed(RANDOMNESS, TASK, 1))
    assert all(len(row) == DEGREE for row in table)
    assert all(u in table[v] for u, row in enumerate(table) for v in row)  # symmetric
    assert table == harary_table(K, DEGREE, graph_seed(RANDOMNESS, TASK, 1))
    others = {
        harary_table(K, DEGREE, graph_seed(RANDOMNESS, TASK, 2)),
        harary_table(K, DEGREE, graph_seed(RANDOMNESS, TASK.replace("ab", "cd"), 1)),
        harary_table(K, DEGREE, graph_seed(bytes(32), TASK, 1)),
    }
    assert table not in others and len(others) == 3
    with pytest.raises(ConfigError, match="graph degree"):
        harary_table(K, K - 1, RANDOMNESS)


def test_a_secagg_plus_round_with_dropouts_sums_exactly_and_deals_only_to_neighbours() -> None:
    secrets, ctx, peers = _federation()
    rng = np.random.default_rng(1)
    xs = {i: rng.integers(-(1 << 20), 1 << 20, 64) for i in range(K)}
    dropped = {2, 11}
    ups = {
        i: sr.client_masked_update(secrets[i], 1, xs[i], peers, ctx)
        for i in range(K)
        if i not in dropped
    }
    holders = _graph(1)
    for i, up in ups.items():
        up.check(i, peers, ctx)
        assert set(up.self_mask_shares.recipients) == set(holders(i)) | {i}
        assert len(up.self_mask_shares.recipients) == DEGREE + 1  # O(k), not O(K)
    shares = {i: m.self_mask_shares for i, m in ups.items()}
    reveals = [sr.client_reveal(secrets[i], 1, ups, peers, shares, ctx, 12) for i in ups]
    for rev in reveals:  # a client reveals only for its neighbours
        assert set(rev.self_mask_shares) | set(rev.mask_key_shares) <= set(holders(rev.revealer))
    result = sr.unmask_round(1, peers, ups, reveals, ctx)
    assert np.array_equal(result.total, sum(xs[i] for i in ups)) and not result.bad_shares


def test_unmasking_along_another_graph_gives_other_bytes() -> None:
    """An aggregator that ignores the pinned graph (here: the full graph) removes masks no
    client added: its sum differs from the honest re-execution's, so it is challenged."""
    secrets, ctx, peers = _federation()
    xs = {i: np.arange(8) + i for i in range(K)}
    ups = {i: sr.client_masked_update(secrets[i], 1, xs[i], peers, ctx) for i in range(K) if i}
    shares = {i: m.self_mask_shares for i, m in ups.items()}
    reveals = [sr.client_reveal(secrets[i], 1, ups, peers, shares, ctx, 12) for i in ups]
    honest = sr.unmask_round(1, peers, ups, reveals, ctx)
    assert np.array_equal(honest.total, sum(xs[i] for i in ups))
    full = sr.SecAggContext(TASK, T, ctx.enc_keys)
    assert honest.to_bytes() != sr.unmask_round(1, peers, ups, reveals, full).to_bytes()


def test_two_aggregators_derive_the_same_graph_and_the_same_bytes() -> None:
    spec = _spec()
    man = manifest(spec)
    secrets, ctx, peers = _federation()
    dim = man.layout.size
    rng = np.random.default_rng(2)
    payloads: list[bytes | None] = []
    for i in range(K):
        vec = rng.integers(-1000, 1000, dim)
        payloads.append(
            None if i == 4 else sr.client_masked_update(secrets[i], 1, vec, peers, ctx).to_bytes()
        )
    ups = {i: sr.MaskedUpdate.from_bytes(p, 1, dim, 1 << 26) for i, p in enumerate(payloads) if p}
    shares = {i: m.self_mask_shares for i, m in ups.items()}
    reveals = tuple(
        (i, sr.client_reveal(secrets[i], 1, ups, peers, shares, ctx, 12).to_bytes()) for i in ups
    )
    seeds = {1: RANDOMNESS, 2: RANDOMNESS}

    def aggregate() -> bytes:
        inputs = PrivateInputs(
            clients=tuple(range(K)),
            task=TASK,
            enc_keys=ctx.enc_keys,
            peers=peers,
            reveals=reveals,
            graph_seeds=dict(seeds),
        )
        out = private_sum(man, spec, 1, payloads, inputs)
        assert out.failure is None, out.failure
        assert out.total is not None
        return out.total.tobytes()

    assert aggregate() == aggregate()
    # without the next round's pinned seed an update's next key cannot be checked: refused
    seeds.pop(2)
    with pytest.raises(AssertionError, match="invalid"):
        aggregate()


def test_spec_options_are_validated_in_one_line_and_bound_into_the_manifest() -> None:
    spec = _spec(corrupt_fraction=0.1)
    spec.validate()
    agg = spec.to_manifest()["aggregation"]
    assert agg["threshold"] == T and agg["graph"] == {
        "kind": "harary",
        "version": "harary-sha256-v1",
        "degree": DEGREE,
        "threshold": T,
        "corrupt_fraction": 0.1,
        "min_included": 12,
    }
    assert PrivacySpec.from_manifest(spec.to_manifest()) == spec
    # the full graph's manifest did not change
    assert "graph" not in _spec(mask_graph="full").to_manifest()["aggregation"]
    bad = {
        "graph_degree": dict(graph_degree=K - 1),
        "graph_threshold": dict(graph_threshold=1),
    }
    for key, kw in bad.items():
        with pytest.raises(ConfigError, match=f"^{key} "):
            _spec(**kw).validate()
    with pytest.raises(ConfigError, match="corrupt neighbours could reconstruct"):
        _spec(graph_threshold=2, corrupt_fraction=0.3).validate()
    with pytest.raises(ConfigError, match=r"after 0\.25 dropouts"):
        _spec(graph_threshold=7).validate()
    with pytest.raises(ConfigError, match="only secure aggregation masks"):
        PrivacySpec(mode="he", num_clients=K, mask_graph="harary").validate()


def test_cli_options_refuse_infeasible_parameters_naming_the_option() -> None:
    ok = DemoConfig(
        clients=K,
        privacy="secagg",
        dropout_fraction=0.25,
        mask_graph="harary",
        graph_degree=DEGREE,
        graph_threshold=T,
    )
    ok.validate()
    assert ok.privacy_spec().secagg_plus
    with pytest.raises(ConfigError, match=r"^--graph-threshold 7: "):
        DemoConfig(
            clients=K,
            privacy="secagg",
            dropout_fraction=0.25,
            mask_graph="harary",
            graph_degree=DEGREE,
            graph_threshold=7,
        ).validate()
    with pytest.raises(ConfigError, match=r"^--mask-graph 'harary': needs --privacy secagg"):
        DemoConfig(clients=K, privacy="ldp", target_epsilon=1.0, mask_graph="harary").validate()
    assert (
        not DemoConfig(clients=K, privacy="secagg", dropout_fraction=0.25)
        .privacy_spec()
        .secagg_plus
    )


def test_a_reveal_digest_that_is_missing_from_storage_counts_as_no_reveal() -> None:
    from adapters.storage import LocalStore
    from fedchain.private_view import SecAggView

    view = SecAggView.__new__(SecAggView)
    view.spec = _spec()
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        view.store = LocalStore(root)
        payload = Reveal(3, 1, {1: 5}, {}).to_bytes()
        view.store.put(payload)
        from protocol.cid import content_digest

        assert view.reveal_payload(content_digest(payload)) == payload
        assert view.reveal_payload(bytes(32)) is None  # not in storage
        assert view.reveal_payload(payload) is None  # a reveal inline, not a digest


@pytest.mark.slow
def test_secagg_plus_round_with_dropouts_finalizes_on_the_embedded_chain(tmp_path: Path) -> None:
    out = tmp_path / "run"
    scenario = Path(__file__).parent.parent / "scenarios" / "secagg-plus-dropout.toml"
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--json"]) == 0
    run_dir = next(p for p in out.iterdir() if not p.name.endswith("-honest"))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["outcome"] == "safe" and verdict["identical_to_honest"] is True
    rounds = [json.loads(x) for x in (run_dir / "rounds.jsonl").read_text().splitlines()]
    first = rounds[0]["privacy"]["aggregation"]
    assert first["dropped"] == [0, 5] and first["peers"] == 16 and "failure" not in first
    assert all(r["finalized"] and len(r["included"]) == 14 for r in rounds)
    # every aggregator re-executed the unmasking to the same bytes
    assert all(r["verifiers_agreeing"] == 3 for r in rounds)
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    reveals = [e for e in events if e["kind"] == "records" and e["kinds"] == ["REVEAL"]]
    # O(K) records of 32 bytes each: the reveals themselves are in content storage
    assert all(e["bytes"] == 32 * e["count"] for e in reveals)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["gas_by_operation"]["pinGraphSeed"]["count"] == 3  # one per round, ahead
