"""Datasets and client partitions for the FL clients.

Everything here is pure and seeded: the same arguments give the same arrays on every run.
Datasets are small immutable containers of ``float32`` features and ``int64`` labels;
partitions are lists of sorted ``int64`` index arrays into a dataset, one per client,
pairwise disjoint and together covering every sample. The only I/O is dataset loading
(scikit-learn's bundled digits, or MNIST-format IDX files from a local directory); the
synthetic tasks are generated from a seed.
"""

from __future__ import annotations

import gzip
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from protocol.errors import ConfigError

__all__ = [
    "DATASETS",
    "FASHION_MNIST_DIR",
    "MNIST_PATH_ENV",
    "PARTITIONS",
    "VALIDATION_SEED",
    "Dataset",
    "label_histograms",
    "label_skew",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_fashion_mnist_validation",
    "load_mnist_idx",
    "make_mixture",
    "make_synthetic",
    "partition",
    "partition_dirichlet",
    "partition_iid",
    "partition_shards",
    "read_idx",
    "stratified_split",
    "stratified_subset",
]

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Dataset:
    """A labelled dataset: ``x`` (float32, shape ``(n, *input_shape)``) and ``y`` (int64, ``(n,)``).

    ``num_classes`` is the number of classes of the task (labels lie in ``[0, num_classes)``),
    which may exceed the classes actually present in a client's shard. ``input_shape`` is the
    shape of one sample: ``(1, 8, 8)`` for digits, ``(1, 28, 28)`` for MNIST, ``(d,)`` for
    synthetic data. The constructor validates dtypes, shapes and label range and raises
    :class:`ConfigError` on a mismatch; it never copies the arrays.
    """

    x: FloatArray
    y: IntArray
    num_classes: int
    input_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.x, np.ndarray) or self.x.dtype != np.float32:
            raise ConfigError("Dataset.x must be a float32 numpy array")
        if not isinstance(self.y, np.ndarray) or self.y.dtype != np.int64 or self.y.ndim != 1:
            raise ConfigError("Dataset.y must be a one-dimensional int64 numpy array")
        if self.x.shape[0] != self.y.shape[0]:
            raise ConfigError(
                f"Dataset.x has {self.x.shape[0]} samples but Dataset.y has {self.y.shape[0]}"
            )
        shape = tuple(int(d) for d in self.input_shape)
        object.__setattr__(self, "input_shape", shape)
        if self.x.shape[1:] != shape:
            raise ConfigError(
                f"Dataset.x sample shape {self.x.shape[1:]} does not match input_shape {shape}"
            )
        if int(self.num_classes) < 2:
            raise ConfigError(f"num_classes must be at least 2, got {self.num_classes}")
        if self.y.size and (int(self.y.min()) < 0 or int(self.y.max()) >= self.num_classes):
            raise ConfigError(f"labels must lie in [0, {self.num_classes})")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, indices: npt.ArrayLike) -> Dataset:
        """Return the samples at ``indices`` (in that order) as a new dataset (copies the data)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1:
            raise ConfigError("subset indices must be one-dimensional")
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            raise ConfigError(f"subset index out of range for a dataset of {len(self)} samples")
        return Dataset(self.x[idx], self.y[idx], self.num_classes, self.input_shape)


# ---------------------------------------------------------------------------------------------
# Splitting and loading
# ---------------------------------------------------------------------------------------------


def _check_fraction(test_fraction: float) -> None:
    if not 0.0 < float(test_fraction) < 1.0:
        raise ConfigError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")


def stratified_split(
    labels: npt.ArrayLike, test_fraction: float, seed: int
) -> tuple[IntArray, IntArray]:
    """Split sample indices into (train, test) so each class keeps its proportion.

    For every class with ``m`` samples, ``round(test_fraction * m)`` of them (clamped to
    ``[1, m - 1]`` when ``m >= 2``) go to the test set, chosen by a NumPy generator seeded with
    ``seed``. Both returned index arrays are shuffled (not class-sorted) and deterministic.
    """
    _check_fraction(test_fraction)
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    train: list[IntArray] = []
    test: list[IntArray] = []
    for cls in np.unique(y):
        idx = np.flatnonzero(y == cls).astype(np.int64)
        idx = rng.permutation(idx)
        m = idx.size
        k = round(test_fraction * m)
        if m >= 2:
            k = min(max(k, 1), m - 1)
        test.append(idx[:k])
        train.append(idx[k:])
    train_idx = rng.permutation(np.concatenate(train)) if train else np.empty(0, np.int64)
    test_idx = rng.permutation(np.concatenate(test)) if test else np.empty(0, np.int64)
    return train_idx.astype(np.int64), test_idx.astype(np.int64)


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[Dataset, Dataset]:
    """Load scikit-learn's bundled handwritten digits (1797 images, 8x8, 10 classes).

    Pixel values (0..16) are scaled to ``[0, 1]`` and each image is shaped ``(1, 8, 8)`` so
    that every model kind accepts it. The data is split into (train, test) by
    :func:`stratified_split` with ``test_fraction`` and ``seed``; no download is needed.
    """
    from sklearn.datasets import load_digits as _sk_load_digits

    bunch = _sk_load_digits()
    x = (np.asarray(bunch.data, dtype=np.float64) / 16.0).astype(np.float32)
    x = x.reshape(-1, 1, 8, 8)
    y = np.asarray(bunch.target, dtype=np.int64)
    tr, te = stratified_split(y, test_fraction, seed)
    shape = (1, 8, 8)
    return Dataset(x[tr], y[tr], 10, shape), Dataset(x[te], y[te], 10, shape)


def make_synthetic(
    num_samples: int = 2000,
    num_features: int = 20,
    num_classes: int = 10,
    seed: int = 0,
    test_fraction: float = 0.2,
    class_sep: float = 1.0,
) -> tuple[Dataset, Dataset]:
    """Generate a learnable Gaussian-cluster classification task and split it (train, test).

    Each class ``c`` gets a mean ``mu_c ~ N(0, class_sep^2 I)`` in ``num_features`` dimensions,
    and its samples are ``mu_c + N(0, I)``; labels are balanced (``i mod num_classes``). Larger
    ``class_sep`` makes the task easier (at ``class_sep=1`` and 20 features a linear model
    reaches roughly 90 %). Everything is drawn from a NumPy generator seeded with ``seed``.
    """
    num_samples, num_features, num_classes = int(num_samples), int(num_features), int(num_classes)
    if num_classes < 2:
        raise ConfigError(f"num_classes must be at least 2, got {num_classes}")
    if num_features < 1:
        raise ConfigError(f"num_features must be positive, got {num_features}")
    if num_samples < 2 * num_classes:
        raise ConfigError(
            f"num_samples ({num_samples}) must be at least 2 * num_classes ({2 * num_classes})"
        )
    if not class_sep > 0:
        raise ConfigError(f"class_sep must be positive, got {class_sep}")
    _check_fraction(test_fraction)
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, class_sep, size=(num_classes, num_features))
    y = rng.permutation(np.arange(num_samples, dtype=np.int64) % num_classes)
    x = (means[y] + rng.normal(0.0, 1.0, size=(num_samples, num_features))).astype(np.float32)
    tr, te = stratified_split(y, test_fraction, seed)
    shape = (num_features,)
    return (
        Dataset(x[tr], y[tr], num_classes, shape),
        Dataset(x[te], y[te], num_classes, shape),
    )


def make_mixture(
    num_clients: int = 100,
    samples_per_client: int = 100,
    num_test: int = 5000,
    num_features: int = 32,
    num_classes: int = 10,
    clusters_per_class: int = 4,
    cluster_spread: float = 0.8,
    seed: int = 0,
) -> tuple[Dataset, Dataset]:
    """A Gaussian-mixture classification task sized for ``num_clients`` clients.

    Every class ``c`` owns ``clusters_per_class`` cluster centres ``mu ~ N(0,
    cluster_spread^2 I)`` in ``num_features`` dimensions; a sample draws a class and one of
    its clusters uniformly and is ``mu + N(0, I)``. Classes made of several scattered
    clusters are not linearly separable: with the defaults a centrally trained linear model
    reaches about 59 % test accuracy and a 64-unit MLP about 92 %, so federated training
    has something to learn. The training set has ``num_clients * samples_per_client``
    samples (every client gets about ``samples_per_client`` under an IID split), the test
    set ``num_test`` more from the same distribution. Seeded and pure, like every loader.
    """
    num_clients, per_client = int(num_clients), int(samples_per_client)
    num_test, num_features = int(num_test), int(num_features)
    num_classes, clusters = int(num_classes), int(clusters_per_class)
    if num_clients < 1:
        raise ConfigError(f"num_clients must be positive, got {num_clients}")
    if per_client < 1:
        raise ConfigError(f"samples_per_client must be positive, got {per_client}")
    if num_test < 1:
        raise ConfigError(f"num_test must be positive, got {num_test}")
    if num_features < 1:
        raise ConfigError(f"num_features must be positive, got {num_features}")
    if num_classes < 2:
        raise ConfigError(f"num_classes must be at least 2, got {num_classes}")
    if clusters < 1:
        raise ConfigError(f"clusters_per_class must be positive, got {clusters}")
    if not cluster_spread > 0:
        raise ConfigError(f"cluster_spread must be positive, got {cluster_spread}")
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, cluster_spread, size=(num_classes, clusters, num_features))
    n = num_clients * per_client + num_test
    y = rng.integers(0, num_classes, size=n).astype(np.int64)
    which = rng.integers(0, clusters, size=n)
    x = (centres[y, which] + rng.normal(0.0, 1.0, size=(n, num_features))).astype(np.float32)
    cut = n - num_test
    shape = (num_features,)
    return (
        Dataset(x[:cut], y[:cut], num_classes, shape),
        Dataset(x[cut:], y[cut:], num_classes, shape),
    )


_IDX_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read one IDX file (the MNIST container format), optionally gzip-compressed (``.gz``).

    The header is two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), the number of dimensions, then each dimension as a big-endian
    uint32; the payload must have exactly the announced size. Returns an array in native byte
    order; raises :class:`ConfigError` for a malformed or truncated file.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read IDX file {p}: {exc}") from exc
    if p.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ConfigError(f"{p} is not valid gzip: {exc}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ConfigError(f"{p} is not an IDX file (bad magic)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ConfigError(f"{p}: unknown IDX type code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ConfigError(f"{p}: truncated IDX header")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[code])
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ConfigError(
            f"{p}: IDX payload has {len(raw) - header} bytes, header announces {expected}"
        )
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="))


_MNIST_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def _find_idx(directory: Path, stem: str) -> Path:
    for candidate in (stem, stem + ".gz", stem.replace("-idx", ".idx")):
        if (directory / candidate).is_file():
            return directory / candidate
    raise ConfigError(f"MNIST file {stem}[.gz] not found in {directory}")


MNIST_PATH_ENV = "FEDCHAIN_MNIST_PATH"


def load_mnist_idx(
    path: str | os.PathLike[str] | None = None,
    limit_train: int | None = None,
    limit_test: int | None = None,
    seed: int = 0,
) -> tuple[Dataset, Dataset]:
    """Load MNIST (or Fashion-MNIST) from the four standard IDX files in a local directory.

    ``path`` (default: the ``FEDCHAIN_MNIST_PATH`` environment variable) must contain
    ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
    ``t10k-labels-idx1-ubyte``, each optionally gzip-compressed with a ``.gz`` suffix; nothing
    is downloaded. Pixels are scaled to ``[0, 1]``, images shaped ``(1, H, W)``, 10 classes,
    and the official train/test split is kept. ``limit_train``/``limit_test`` keep a random
    subset of that many samples per split (drawn with ``seed``, original order preserved).
    """
    if path is None:
        path = os.environ.get(MNIST_PATH_ENV)
        if not path:
            raise ConfigError(
                "MNIST needs a directory holding "
                + ", ".join(_MNIST_FILES.values())
                + f" (each optionally .gz): pass path= or set {MNIST_PATH_ENV}"
            )
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError(f"MNIST directory {directory} does not exist")
    rng = np.random.default_rng(seed)

    def load(x_stem: str, y_stem: str, limit: int | None) -> Dataset:
        images = read_idx(_find_idx(directory, x_stem))
        labels = read_idx(_find_idx(directory, y_stem))
        if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
            raise ConfigError(
                f"MNIST files {x_stem}/{y_stem} have inconsistent shapes "
                f"{images.shape} and {labels.shape}"
            )
        if labels.size and (int(labels.min()) < 0 or int(labels.max()) > 9):
            raise ConfigError(f"MNIST labels in {y_stem} must lie in [0, 9]")
        if limit is not None:
            if limit < 1:
                raise ConfigError(f"MNIST sample limit must be positive, got {limit}")
            if limit < labels.shape[0]:
                keep = np.sort(rng.choice(labels.shape[0], size=limit, replace=False))
                images, labels = images[keep], labels[keep]
        x = (images.astype(np.float32) / np.float32(255.0)).reshape(
            images.shape[0], 1, images.shape[1], images.shape[2]
        )
        return Dataset(x, labels.astype(np.int64), 10, x.shape[1:])

    train = load(_MNIST_FILES["train_x"], _MNIST_FILES["train_y"], limit_train)
    test = load(_MNIST_FILES["test_x"], _MNIST_FILES["test_y"], limit_test)
    return train, test


#: Where Debian's ``dataset-fashion-mnist`` package puts the four IDX files (``make data``).
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_ENV = "FEDCHAIN_FASHION_MNIST_PATH"
#: The validation split's fixed data seed: the same 10,000 training images are held out
#: in every run, whatever the run's seed (which only draws the partition and the models).
VALIDATION_SEED = 20_230
VALIDATION_SIZE = 10_000


def _fashion_splits(path: str | os.PathLike[str] | None) -> tuple[Dataset, Dataset, Dataset]:
    if path is None:
        path = os.environ.get(FASHION_MNIST_ENV, FASHION_MNIST_DIR)
    if not Path(path).is_dir():
        raise ConfigError(
            f"Fashion-MNIST directory {path} does not exist: run `make data` (installs "
            f"Debian's dataset-fashion-mnist) or set {FASHION_MNIST_ENV}"
        )
    full, test = load_mnist_idx(path)
    train_idx, val_idx = stratified_split(full.y, VALIDATION_SIZE / len(full), VALIDATION_SEED)
    return full.subset(np.sort(train_idx)), full.subset(np.sort(val_idx)), test


def load_fashion_mnist(
    path: str | os.PathLike[str] | None = None, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """Fashion-MNIST (Xiao et al. 2017): the official training set *minus* the validation
    split (50,000 images) and the official test set (10,000). ``seed`` is unused: the
    validation split is fixed (:data:`VALIDATION_SEED`). Files: ``path``, else
    ``$FEDCHAIN_FASHION_MNIST_PATH``, else :data:`FASHION_MNIST_DIR`."""
    train, _, test = _fashion_splits(path)
    return train, test


def load_fashion_mnist_validation(
    path: str | os.PathLike[str] | None = None, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """Fashion-MNIST for choosing hyperparameters: the same training images as
    :func:`load_fashion_mnist` and, instead of the test set, the validation split (10,000
    training images, stratified by class, :data:`VALIDATION_SEED`; never trained on)."""
    train, val, _ = _fashion_splits(path)
    return train, val


def stratified_subset(labels: npt.ArrayLike, size: int, seed: int) -> IntArray:
    """``size`` sample indices (sorted) keeping each class's proportion, drawn with
    ``seed`` (:func:`stratified_split`'s rule); all of them when ``size`` is not smaller."""
    y = np.asarray(labels)
    if size >= y.shape[0]:
        return np.arange(y.shape[0], dtype=np.int64)
    if size < 1:
        raise ConfigError(f"a subset needs at least one sample, got {size}")
    _, keep = stratified_split(y, size / y.shape[0], seed)
    return np.sort(keep)


DATASETS: dict[str, Callable[..., tuple[Dataset, Dataset]]] = {
    "digits": load_digits,
    "synthetic": make_synthetic,
    "mixture": make_mixture,
    "mnist": load_mnist_idx,
    "fashion": load_fashion_mnist,
    "fashion-val": load_fashion_mnist_validation,
}


def _call_checked(kind: str, name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    params = inspect.signature(fn).parameters
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise ConfigError(
            f"{kind} {name!r} does not take option(s) {unknown}; accepted: {sorted(params)}"
        )
    missing = sorted(
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and n not in kwargs
    )
    if missing:
        raise ConfigError(f"{kind} {name!r} requires option(s) {missing}")
    return fn(**kwargs)


def load_dataset(name: str, **kwargs: Any) -> tuple[Dataset, Dataset]:
    """Load a dataset by name and return ``(train, test)``.

    Known names: ``"digits"`` (:func:`load_digits`), ``"synthetic"`` (:func:`make_synthetic`),
    ``"mixture"`` (:func:`make_mixture`, sized by ``num_clients``) and ``"mnist"``
    (:func:`load_mnist_idx`, needs ``path=`` or ``FEDCHAIN_MNIST_PATH``). Keyword options are
    passed to the loader (all accept ``seed``); an unknown name or an option the loader does
    not accept raises :class:`ConfigError`.
    """
    fn = DATASETS.get(name)
    if fn is None:
        raise ConfigError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    result: tuple[Dataset, Dataset] = _call_checked("dataset", name, fn, kwargs)
    return result


# ---------------------------------------------------------------------------------------------
# Partitions
# ---------------------------------------------------------------------------------------------


def _check_clients(num_samples: int, num_clients: int) -> None:
    if int(num_clients) < 1:
        raise ConfigError(f"num_clients must be positive, got {num_clients}")
    if int(num_clients) > int(num_samples):
        raise ConfigError(
            f"cannot give {num_clients} clients at least one sample each from {num_samples} samples"
        )


def partition_iid(num_samples: int, num_clients: int, seed: int) -> list[IntArray]:
    """Split ``range(num_samples)`` uniformly at random into ``num_clients`` shards.

    Shards are disjoint, cover every index, differ in size by at most one, and are returned
    sorted. The permutation comes from a NumPy generator seeded with ``seed``.
    """
    _check_clients(num_samples, num_clients)
    perm = np.random.default_rng(seed).permutation(int(num_samples)).astype(np.int64)
    return [np.sort(part) for part in np.array_split(perm, int(num_clients))]


def partition_dirichlet(
    labels: npt.ArrayLike,
    num_clients: int,
    alpha: float,
    seed: int,
    min_size: int = 1,
    max_retries: int = 100,
) -> list[IntArray]:
    """Label-skewed non-IID split: per class, client shares are drawn from Dirichlet(alpha).

    This is the classic scheme of Hsu et al. (2019): for every class independently a vector
    ``p ~ Dir(alpha * 1_K)`` is drawn and that class's (shuffled) samples are cut into ``K``
    consecutive pieces with proportions ``p``. Small ``alpha`` (e.g. 0.1) gives clients few
    dominant classes, large ``alpha`` (e.g. 100) approaches IID. The draw is repeated (up to
    ``max_retries`` times) until every client holds at least ``min_size`` samples; if that
    still fails, samples are moved one at a time from the largest client to the smallest. The
    result is disjoint, covering, sorted per client, and deterministic given ``seed``.
    """
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ConfigError("labels must be a one-dimensional array")
    n, k = int(y.shape[0]), int(num_clients)
    _check_clients(n, k)
    if not float(alpha) > 0.0 or not np.isfinite(alpha):
        raise ConfigError(f"Dirichlet alpha must be a positive finite number, got {alpha}")
    if int(min_size) < 0:
        raise ConfigError(f"min_size must be non-negative, got {min_size}")
    if int(min_size) * k > n:
        raise ConfigError(
            f"cannot give {k} clients at least {min_size} samples each from {n} samples"
        )
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    best: list[list[int]] | None = None
    for _ in range(max(1, int(max_retries))):
        buckets: list[list[int]] = [[] for _ in range(k)]
        for cls in classes:
            idx = rng.permutation(np.flatnonzero(y == cls))
            p = rng.dirichlet(np.full(k, float(alpha)))
            cuts = (np.cumsum(p)[:-1] * idx.size).astype(np.int64)
            for client, piece in enumerate(np.split(idx, cuts)):
                buckets[client].extend(int(i) for i in piece)
        if best is None or min(map(len, buckets)) > min(map(len, best)):
            best = buckets
        if min(map(len, buckets)) >= min_size:
            break
    assert best is not None
    # Repair: move random samples from the currently largest client to the smallest one.
    sizes = [len(b) for b in best]
    while min(sizes) < min_size:
        small = int(np.argmin(sizes))
        large = int(np.argmax(sizes))
        j = int(rng.integers(sizes[large]))
        best[small].append(best[large].pop(j))
        sizes[small] += 1
        sizes[large] -= 1
    return [np.sort(np.asarray(b, dtype=np.int64)) for b in best]


def partition_shards(
    labels: npt.ArrayLike, num_clients: int, seed: int, shards_per_client: int = 2
) -> list[IntArray]:
    """Pathological non-IID split of McMahan et al. (2017): sort by label, deal out shards.

    Samples are sorted by label (ties broken by a seeded shuffle), cut into
    ``num_clients * shards_per_client`` equal-as-possible contiguous shards, and each client
    receives ``shards_per_client`` shards chosen by a seeded permutation, so most clients see
    only about ``shards_per_client`` classes. Disjoint, covering, sorted, deterministic.
    """
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ConfigError("labels must be a one-dimensional array")
    k, s = int(num_clients), int(shards_per_client)
    if s < 1:
        raise ConfigError(f"shards_per_client must be positive, got {shards_per_client}")
    _check_clients(y.shape[0], k)
    if k * s > y.shape[0]:
        raise ConfigError(f"cannot cut {y.shape[0]} samples into {k * s} non-empty shards")
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(y.shape[0])
    order = shuffled[np.argsort(y[shuffled], kind="stable")].astype(np.int64)
    shards = np.array_split(order, k * s)
    assignment = rng.permutation(k * s)
    return [
        np.sort(np.concatenate([shards[j] for j in assignment[c * s : (c + 1) * s]]))
        for c in range(k)
    ]


PARTITIONS = ("iid", "dirichlet", "shards")


def partition(
    name: str,
    labels: npt.ArrayLike,
    num_clients: int,
    seed: int,
    **kwargs: Any,
) -> list[IntArray]:
    """Partition a dataset's sample indices among clients by scheme name.

    ``"iid"`` (:func:`partition_iid`, no options), ``"dirichlet"``
    (:func:`partition_dirichlet`, requires ``alpha``, optional ``min_size``) or ``"shards"``
    (:func:`partition_shards`, optional ``shards_per_client``). ``labels`` are the dataset's
    labels (only their count is used by ``"iid"``). Unknown names or options raise
    :class:`ConfigError`.
    """
    y = np.asarray(labels)
    if name == "iid":
        return _call_checked(  # type: ignore[no-any-return]
            "partition",
            name,
            partition_iid,
            {"num_samples": int(y.shape[0]), "num_clients": num_clients, "seed": seed, **kwargs},
        )
    if name == "dirichlet":
        return _call_checked(  # type: ignore[no-any-return]
            "partition",
            name,
            partition_dirichlet,
            {"labels": y, "num_clients": num_clients, "seed": seed, **kwargs},
        )
    if name == "shards":
        return _call_checked(  # type: ignore[no-any-return]
            "partition",
            name,
            partition_shards,
            {"labels": y, "num_clients": num_clients, "seed": seed, **kwargs},
        )
    raise ConfigError(f"unknown partition {name!r}; known: {list(PARTITIONS)}")


def label_histograms(
    labels: npt.ArrayLike, parts: Sequence[npt.ArrayLike], num_classes: int
) -> IntArray:
    """Count each client's labels: an int64 array of shape ``(num_clients, num_classes)``."""
    y = np.asarray(labels, dtype=np.int64)
    return np.stack(
        [np.bincount(y[np.asarray(p, dtype=np.int64)], minlength=num_classes) for p in parts]
    ).astype(np.int64)


def label_skew(labels: npt.ArrayLike, parts: Sequence[npt.ArrayLike], num_classes: int) -> float:
    """Mean total-variation distance between each client's label distribution and the global one.

    0 means every client has exactly the global class mix; values near 1 mean clients hold
    classes the population barely has. Clients with no samples are skipped.
    """
    hist = label_histograms(labels, parts, num_classes).astype(np.float64)
    glob = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).astype(np.float64)
    glob /= glob.sum()
    sizes = hist.sum(axis=1)
    keep = sizes > 0
    dist = hist[keep] / sizes[keep, None]
    return float(np.mean(0.5 * np.abs(dist - glob).sum(axis=1)))
