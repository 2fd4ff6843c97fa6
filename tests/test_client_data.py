"""Datasets, loaders and client partitions (clients/data.py)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.data import (
    MNIST_PATH_ENV,
    Dataset,
    label_histograms,
    label_skew,
    load_dataset,
    load_digits,
    load_mnist_idx,
    make_synthetic,
    partition,
    partition_dirichlet,
    partition_iid,
    partition_shards,
    read_idx,
    stratified_split,
)
from protocol.errors import ConfigError


def assert_disjoint_cover(parts: list[np.ndarray], n: int) -> None:
    for p in parts:
        assert p.dtype == np.int64
        assert np.all(np.diff(p) > 0), "each shard is sorted and duplicate-free"
    allidx = np.concatenate(parts)
    assert allidx.size == n, "shards are disjoint and cover every sample exactly once"
    assert np.array_equal(np.sort(allidx), np.arange(n))


# --- datasets ---------------------------------------------------------------------------------


def test_load_digits_shapes_scaling_and_stratification() -> None:
    train, test = load_digits(test_fraction=0.2, seed=0)
    assert len(train) + len(test) == 1797
    assert len(test) == pytest.approx(0.2 * 1797, abs=10)
    for ds in (train, test):
        assert ds.x.dtype == np.float32 and ds.y.dtype == np.int64
        assert ds.input_shape == (1, 8, 8) and ds.x.shape[1:] == (1, 8, 8)
        assert ds.num_classes == 10
        assert float(ds.x.min()) >= 0.0 and float(ds.x.max()) <= 1.0
    assert float(train.x.max()) == 1.0
    # Stratified: every class's test share is within one sample of 20 %.
    full = np.bincount(np.concatenate([train.y, test.y]), minlength=10)
    assert np.all(np.abs(np.bincount(test.y, minlength=10) - 0.2 * full) <= 1)


def test_load_digits_is_seeded() -> None:
    a_tr, _ = load_digits(seed=3)
    b_tr, _ = load_digits(seed=3)
    c_tr, _ = load_digits(seed=4)
    assert np.array_equal(a_tr.x, b_tr.x) and np.array_equal(a_tr.y, b_tr.y)
    assert not np.array_equal(a_tr.y, c_tr.y)


def test_stratified_split_disjoint_and_proportional() -> None:
    y = np.repeat(np.arange(4), [10, 20, 30, 40])
    tr, te = stratified_split(y, 0.25, seed=1)
    assert_disjoint_cover([np.sort(tr), np.sort(te)], y.size)
    assert list(np.bincount(y[te], minlength=4)) == [2, 5, 8, 10]  # round(0.25*m), half-even


def test_make_synthetic_is_learnable_and_seeded() -> None:
    from sklearn.linear_model import LogisticRegression

    train, test = make_synthetic(1000, 10, 4, seed=7, class_sep=2.0)
    assert train.input_shape == (10,) and train.x.shape == (800, 10)
    assert train.num_classes == 4 and set(np.unique(train.y)) == {0, 1, 2, 3}
    clf = LogisticRegression(max_iter=500).fit(train.x, train.y)
    assert clf.score(test.x, test.y) > 0.9
    again, _ = make_synthetic(1000, 10, 4, seed=7, class_sep=2.0)
    assert np.array_equal(again.x, train.x)
    other, _ = make_synthetic(1000, 10, 4, seed=8, class_sep=2.0)
    assert not np.array_equal(other.x, train.x)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_samples": 5, "num_features": 3, "num_classes": 4},
        {"num_samples": 100, "num_features": 0, "num_classes": 4},
        {"num_samples": 100, "num_features": 3, "num_classes": 1},
        {"num_samples": 100, "num_features": 3, "num_classes": 4, "test_fraction": 1.0},
        {"num_samples": 100, "num_features": 3, "num_classes": 4, "class_sep": 0.0},
    ],
)
def test_make_synthetic_rejects_bad_config(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        make_synthetic(**kwargs)  # type: ignore[arg-type]


def test_dataset_validates() -> None:
    x = np.zeros((3, 2), np.float32)
    with pytest.raises(ConfigError):
        Dataset(x.astype(np.float64), np.zeros(3, np.int64), 2, (2,))
    with pytest.raises(ConfigError):
        Dataset(x, np.zeros(3, np.int32), 2, (2,))
    with pytest.raises(ConfigError):
        Dataset(x, np.zeros(2, np.int64), 2, (2,))
    with pytest.raises(ConfigError):
        Dataset(x, np.zeros(3, np.int64), 2, (3,))
    with pytest.raises(ConfigError):
        Dataset(x, np.array([0, 1, 2], np.int64), 2, (2,))
    ds = Dataset(x, np.array([0, 1, 1], np.int64), 2, (2,))
    sub = ds.subset([2, 0])
    assert list(sub.y) == [1, 0] and len(sub) == 2
    with pytest.raises(ConfigError):
        ds.subset([3])


def _write_idx(path: Path, arr: np.ndarray, code: int, compress: bool = False) -> None:
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    payload = header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()
    path.write_bytes(gzip.compress(payload) if compress else payload)


def test_load_mnist_idx_from_tiny_generated_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    tr_x = rng.integers(0, 256, size=(12, 28, 28), dtype=np.uint8)
    tr_y = rng.integers(0, 10, size=12, dtype=np.uint8)
    te_x = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    te_y = rng.integers(0, 10, size=5, dtype=np.uint8)
    _write_idx(tmp_path / "train-images-idx3-ubyte", tr_x, 0x08)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", tr_y, 0x08)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", te_x, 0x08, compress=True)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", te_y, 0x08, compress=True)
    train, test = load_mnist_idx(tmp_path)
    assert train.x.shape == (12, 1, 28, 28) and train.input_shape == (1, 28, 28)
    assert test.x.shape == (5, 1, 28, 28)
    np.testing.assert_array_equal(train.y, tr_y.astype(np.int64))
    np.testing.assert_allclose(test.x[:, 0], te_x / 255.0, rtol=1e-6)
    assert train.x.dtype == np.float32 and train.num_classes == 10
    small, _ = load_dataset("mnist", path=str(tmp_path), limit_train=4, seed=1)
    assert len(small) == 4
    rows = [i for i in range(12) if any(np.array_equal(train.x[i], r) for r in small.x)]
    assert len(rows) == 4 and np.array_equal(small.y, train.y[rows])  # a subset, order kept
    again, _ = load_mnist_idx(tmp_path, limit_train=4, seed=1)
    assert np.array_equal(again.x, small.x)
    monkeypatch.setenv(MNIST_PATH_ENV, str(tmp_path))
    assert len(load_dataset("mnist", seed=0)[1]) == 5
    monkeypatch.delenv(MNIST_PATH_ENV)
    with pytest.raises(ConfigError, match=MNIST_PATH_ENV):
        load_dataset("mnist")


def test_read_idx_other_dtypes_and_errors(tmp_path: Path) -> None:
    arr = np.arange(6, dtype=np.int32).reshape(2, 3) - 3
    _write_idx(tmp_path / "a.idx", arr, 0x0C)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx"), arr)
    farr = np.linspace(-1, 1, 4).astype(np.float32)
    _write_idx(tmp_path / "f.idx", farr, 0x0D)
    np.testing.assert_array_equal(read_idx(tmp_path / "f.idx"), farr)
    good = (tmp_path / "a.idx").read_bytes()
    (tmp_path / "trunc.idx").write_bytes(good[:-1])
    (tmp_path / "magic.idx").write_bytes(b"\x01" + good[1:])
    (tmp_path / "code.idx").write_bytes(good[:2] + b"\x07" + good[3:])
    for bad in ("trunc.idx", "magic.idx", "code.idx", "missing.idx"):
        with pytest.raises(ConfigError):
            read_idx(tmp_path / bad)
    with pytest.raises(ConfigError):
        load_mnist_idx(tmp_path)  # directory lacks the MNIST files


def test_load_dataset_dispatch_and_errors() -> None:
    train, _ = load_dataset("digits", seed=1)
    assert train.input_shape == (1, 8, 8)
    syn, _ = load_dataset("synthetic", num_samples=200, num_features=5, num_classes=3)
    assert syn.input_shape == (5,)
    with pytest.raises(ConfigError, match="unknown dataset"):
        load_dataset("cifar")
    with pytest.raises(ConfigError, match="does not take"):
        load_dataset("digits", bogus=1)
    with pytest.raises(ConfigError, match="does not exist"):
        load_dataset("mnist", path="/nonexistent/mnist")


# --- partitions -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 500), k=st.integers(1, 50), seed=st.integers(0, 2**32 - 1))
def test_partition_iid_properties(n: int, k: int, seed: int) -> None:
    if k > n:
        with pytest.raises(ConfigError):
            partition_iid(n, k, seed)
        return
    parts = partition_iid(n, k, seed)
    assert len(parts) == k
    assert_disjoint_cover(parts, n)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert all(np.array_equal(a, b) for a, b in zip(parts, partition_iid(n, k, seed), strict=True))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(20, 400),
    c=st.integers(2, 10),
    k=st.integers(1, 20),
    alpha=st.sampled_from([0.01, 0.1, 0.5, 1.0, 100.0]),
    min_size=st.integers(0, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_partition_dirichlet_properties(
    n: int, c: int, k: int, alpha: float, min_size: int, seed: int
) -> None:
    labels = np.random.default_rng(seed).integers(0, c, size=n)
    if k * max(min_size, 1) > n:
        with pytest.raises(ConfigError):
            partition_dirichlet(labels, k, alpha, seed, min_size=min_size)
        return
    parts = partition_dirichlet(labels, k, alpha, seed, min_size=min_size)
    assert len(parts) == k
    assert_disjoint_cover(parts, n)
    assert min(p.size for p in parts) >= min_size
    again = partition_dirichlet(labels, k, alpha, seed, min_size=min_size)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_partition_dirichlet_repair_path_gives_min_size() -> None:
    # Tiny alpha with one retry almost surely leaves clients empty: the repair must fix it.
    labels = np.repeat(np.arange(3), 20)
    parts = partition_dirichlet(labels, 12, 0.001, seed=5, min_size=4, max_retries=1)
    assert_disjoint_cover(parts, labels.size)
    assert min(p.size for p in parts) >= 4


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    train, _ = load_digits()
    skews = []
    for alpha in (100.0, 1.0, 0.1):
        values = [
            label_skew(train.y, partition_dirichlet(train.y, 10, alpha, seed), 10)
            for seed in range(5)
        ]
        skews.append(float(np.mean(values)))
    iid = np.mean([label_skew(train.y, partition_iid(len(train), 10, s), 10) for s in range(5)])
    assert skews[0] < skews[1] < skews[2], skews
    # Large alpha splits each class almost evenly (like stratified sampling), so it is even
    # closer to the global mix than a random IID split; small alpha is far from both.
    assert skews[0] < 0.1 and iid < 0.15 and skews[2] > 0.5 and skews[1] > 2 * iid


def test_partition_seed_changes_result() -> None:
    y = np.arange(200) % 10
    a = partition_dirichlet(y, 5, 0.5, seed=1)
    b = partition_dirichlet(y, 5, 0.5, seed=2)
    assert any(not np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert any(
        not np.array_equal(p, q)
        for p, q in zip(partition_iid(200, 5, 1), partition_iid(200, 5, 2), strict=True)
    )


def test_partition_shards_is_pathological() -> None:
    train, _ = load_digits()
    parts = partition_shards(train.y, 10, seed=0, shards_per_client=2)
    assert_disjoint_cover(parts, len(train))
    hist = label_histograms(train.y, parts, 10)
    assert hist.shape == (10, 10) and hist.sum() == len(train)
    # Each client holds two label-sorted shards, so at most ~4 classes (shard boundaries).
    assert max(int((row > 0).sum()) for row in hist) <= 4
    assert label_skew(train.y, parts, 10) > 0.6


def test_partition_dispatcher_and_errors() -> None:
    y = np.arange(100) % 10
    assert_disjoint_cover(partition("iid", y, 7, seed=0), 100)
    assert_disjoint_cover(partition("dirichlet", y, 7, seed=0, alpha=0.3, min_size=2), 100)
    assert_disjoint_cover(partition("shards", y, 5, seed=0, shards_per_client=3), 100)
    with pytest.raises(ConfigError, match="unknown partition"):
        partition("powerlaw", y, 3, seed=0)
    with pytest.raises(ConfigError, match="requires"):
        partition("dirichlet", y, 3, seed=0)
    with pytest.raises(ConfigError, match="does not take"):
        partition("iid", y, 3, seed=0, alpha=1.0)
    with pytest.raises(ConfigError):
        partition_iid(5, 6, 0)
    with pytest.raises(ConfigError):
        partition_iid(5, 0, 0)
    for alpha in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError):
            partition_dirichlet(y, 3, alpha, 0)
    with pytest.raises(ConfigError):
        partition_dirichlet(y, 101, 1.0, 0)
    with pytest.raises(ConfigError):
        partition_dirichlet(y, 10, 1.0, 0, min_size=11)
    with pytest.raises(ConfigError):
        partition_shards(y, 60, 0, shards_per_client=2)
