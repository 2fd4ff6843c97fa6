"""Gradient inversion by an honest-but-curious aggregator: DLG with iDLG label recovery.

What the aggregator sees of a client is its registered update: the fixed-point delta
``local - global`` after local training (:mod:`protocol.fixedpoint`), decoded. With one
local step of plain SGD on one image, ``delta = -lr * grad``; the training settings
(``lr``, momentum, epochs, batch size) are public in the task manifest and the sample
count is registered on-chain, so the aggregator turns the delta back into a gradient,
``g = -delta / (lr * c)`` with ``c`` the momentum-weighted number of steps, and runs

* **iDLG** (Zhao et al. 2020) for the labels: with cross-entropy, the gradient of the
  output bias is ``softmax - onehot``, negative exactly at the true label; for a batch the
  count of each label is estimated from the same gradient (``n_c ≈ N/C - B * g_c``, as in
  Wainakh et al. 2022's label-count extension), and
* **DLG** (Zhu et al. 2019) for the images: dummy images are optimised with L-BFGS until
  their gradient matches ``g`` in squared L2 distance (relative to ``|g|^2``), from
  ``restarts`` random starts, keeping the best match (ReLU models have poor local minima).

Defences (the ``defence`` parameter, ``+``-joined): ``none``; ``batch(size=B)`` (the client
holds B images: one step on their mean gradient); ``steps(n=S)`` (S local steps, so the
delta is no longer one gradient); ``secagg(k=K)`` (the aggregator sees only the sum of K
clients' updates, computed here on plaintext integers: exactly what secure aggregation
reveals); ``ldp(epsilon=E)`` (every client releases its update through local DP as a
``--privacy ldp`` client does: L2 clip to ``clip_norm`` and Gaussian noise calibrated by
the accountant to (E, 1e-5) for this one round, before quantisation). Scores: for each
of the target client's images, the best PSNR and SSIM (scikit-image, pixel range [0, 1])
over the reconstructions, averaged; and the fraction of its labels recovered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from protocol.errors import ConfigError

__all__ = ["DEFENCES", "check_params", "parse_defence", "run_recovery"]

#: defence -> its parameter and that parameter's smallest value (``ldp``: ε > 0, a number)
DEFENCES: dict[str, tuple[str, int] | None] = {
    "none": None,
    "batch": ("size", 1),
    "steps": ("n", 1),
    "secagg": ("k", 1),
    "ldp": ("epsilon", 0),
}
#: the δ of the local-DP defence
LDP_DELTA = 1e-5
KEYS: dict[str, Any] = {
    "model": str,
    "dataset": str,
    "defence": str,
    "iterations": int,
    "restarts": int,
    "lr": float,
    "momentum": float,
    "frac_bits": int,
    "clip": float,
    "clip_norm": float,
}
DEFAULTS: dict[str, Any] = {
    "model": "mlp",
    "dataset": "digits",
    "defence": "none",
    "iterations": 200,
    "restarts": 3,
    "frac_bits": 16,
    "clip": 4.0,
    "clip_norm": 1.0,
}


def parse_defence(text: str) -> dict[str, Any]:
    """``"batch(size=4)+steps(n=5)"`` -> ``{"batch": 4, "steps": 5, "secagg": 1, "ldp":
    None}``; ``"ldp(epsilon=1)"`` sets ``"ldp": 1.0``."""
    from fedchain.experiments.grid import parse_call

    out: dict[str, Any] = {"batch": 1, "steps": 1, "secagg": 1, "ldp": None}
    for piece in text.split("+"):
        name, params = parse_call(piece)
        if name not in DEFENCES:
            raise ConfigError(f"unknown defence {name!r}; known: {sorted(DEFENCES)}")
        spec = DEFENCES[name]
        if spec is None:
            if params:
                raise ConfigError("'none' takes no parameters")
            continue
        key, low = spec
        if set(params) != {key}:
            raise ConfigError(f"{name} takes exactly one parameter, {key} (e.g. {name}({key}=4))")
        value = params[key]
        if name == "ldp":
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ConfigError(f"ldp(epsilon={value!r}): expected a number > 0")
            out[name] = float(value)
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"{name}({key}={value!r}): expected an integer >= {low}")
        out[name] = value
    return out


def check_known_keys(
    params: Mapping[str, Any], keys: Mapping[str, type], label: Callable[[str, Any], str]
) -> None:
    """Every key of a recovery cell (but ``kind``) is one of ``keys`` and of its type
    (one-line ``ConfigError`` naming the key); shared by both recovery experiments."""
    from fedchain.config import value_matches

    for key, value in params.items():
        if key == "kind":
            continue
        if key not in keys:
            raise ConfigError(f"{label(key, value)}: unknown setting; allowed: {sorted(keys)}")
        if not value_matches(value, keys[key]):
            word = {str: "a string", int: "an integer", float: "a number"}[keys[key]]
            raise ConfigError(f"{label(key, value)}: expected {word}")


def check_params(params: Mapping[str, Any], label: Callable[[str, Any], str]) -> None:
    """Check a recovery cell's parameters (one-line ``ConfigError`` naming the key)."""
    check_known_keys(params, KEYS, label)
    try:
        parse_defence(str(params.get("defence", "none")))
    except ConfigError as exc:
        raise ConfigError(f"{label('defence', params.get('defence'))}: {exc}") from exc
    model = params.get("model", "mlp")
    if model not in ("logreg", "mlp", "cnn"):
        raise ConfigError(f"{label('model', model)}: expected logreg, mlp or cnn")
    if params.get("dataset", "digits") != "digits":
        raise ConfigError(f"{label('dataset', params.get('dataset'))}: only 'digits' so far")
    for key in ("iterations", "restarts"):
        if int(params.get(key, 1)) < 1:
            raise ConfigError(f"{label(key, params.get(key))}: must be >= 1")
    if not float(params.get("clip_norm", 1.0)) > 0:
        raise ConfigError(f"{label('clip_norm', params.get('clip_norm'))}: must be > 0")


def ldp_release(
    delta: np.ndarray, epsilon: float, clip_norm: float, seed: int, client: int
) -> tuple[np.ndarray, float]:
    """What a ``--privacy ldp`` client (Gaussian) with budget (ε, 1e-5) for one round
    publishes instead of ``delta``, and the update's L2 norm before clipping. The noise
    generator is the client's own (:func:`privacy.local.noise_generator`, from a secret
    derived from the seed and the client)."""
    import hashlib

    from privacy.local import noise_generator, privatize
    from privacy.spec import PrivacySpec

    spec, _ = PrivacySpec(
        mode="ldp", target_epsilon=epsilon, target_delta=LDP_DELTA, clip_norm=clip_norm
    ).resolve(1)
    secret = hashlib.sha256(f"fedchain/recovery/{seed}/{client}".encode()).digest()
    noisy, norm = privatize(delta, spec, noise_generator(secret, "recovery", 1))
    return noisy, float(norm)


def _psnr(original: np.ndarray, recon: np.ndarray) -> float:
    """PSNR in dB for pixels in [0, 1] (scikit-image)."""
    from skimage.metrics import peak_signal_noise_ratio

    return float(peak_signal_noise_ratio(original, recon, data_range=1.0))  # type: ignore[no-untyped-call]


def _ssim(original: np.ndarray, recon: np.ndarray) -> float:
    """SSIM for pixels in [0, 1] with a 3x3 window (8x8 images; scikit-image)."""
    from skimage.metrics import structural_similarity

    return float(
        structural_similarity(original, recon, data_range=1.0, win_size=3)  # type: ignore[no-untyped-call]
    )


def _label_counts(bias_grad: np.ndarray, total: int, per_client: int) -> list[int]:
    """iDLG labels: the sign rule for one image, a count estimate for a batch."""
    c = bias_grad.shape[0]
    if total == 1:
        return [int(np.argmin(bias_grad))]
    est = np.clip(total / c - per_client * bias_grad, 0, None)
    est = est * total / max(est.sum(), 1e-12)
    counts = np.floor(est).astype(int)
    for i in np.argsort(-(est - counts))[: total - counts.sum()]:
        counts[i] += 1
    return [cls for cls in range(c) for _ in range(int(counts[cls]))]


def run_recovery(params: Mapping[str, Any], seed: int, unit_dir: Path) -> dict[str, Any]:
    """One gradient-inversion attack (see the module docstring); saves the images."""
    import torch

    from clients.data import load_digits
    from clients.models import build_model, get_params
    from clients.training import (
        TrainConfig,
        default_training,
        derive_seed,
        deterministic_torch,
        train_local,
    )
    from protocol.fixedpoint import dequantise, quantise
    from protocol.payloads import ModelLayout

    p = {**DEFAULTS, **params}
    d = parse_defence(str(p["defence"]))
    batch, steps, k, epsilon = d["batch"], d["steps"], d["secagg"], d["ldp"]
    base = default_training(str(p["model"]))
    lr = float(p.get("lr", base.lr))
    momentum = float(p.get("momentum", base.momentum))
    train, _ = load_digits(seed=0)
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(len(train))[: batch * k]  # the same first image for every defence
    model = build_model(str(p["model"]), train.input_shape, train.num_classes, seed=seed)
    global_params = get_params(model)
    from clients.models import param_spec

    layout = ModelLayout.from_spec(param_spec(model))
    frac_bits = int(p["frac_bits"])
    bound = round(float(p["clip"]) * 2**frac_bits)
    total_q = np.zeros(layout.size, dtype=np.int64)
    norms: list[float] = []
    for client in range(k):
        idx = chosen[client * batch : (client + 1) * batch]
        data = train.subset(idx)
        cfg = TrainConfig(
            epochs=steps,
            batch_size=batch,
            lr=lr,
            momentum=momentum,
            seed=derive_seed(seed, client),
        )
        res = train_local(model, global_params, data, cfg)
        delta = layout.flatten(res.params).astype(np.float64) - layout.flatten(
            global_params
        ).astype(np.float64)
        norms.append(float(np.linalg.norm(delta)))
        if epsilon is not None:
            delta, _ = ldp_release(delta, epsilon, float(p["clip_norm"]), seed, client)
        total_q += quantise(delta, frac_bits, bound).astype(np.int64)
    observed = dequantise(total_q, frac_bits)
    # the aggregator's view -> a gradient: delta = -lr * sum_t v_t, v_t = mu v_{t-1} + g_t
    c = sum((1 - momentum**t) / (1 - momentum) if momentum else 1.0 for t in range(1, steps + 1))
    target = {
        name: torch.from_numpy(np.asarray(v, dtype=np.float32))
        for name, v in layout.unflatten(-observed / (lr * c)).items()
    }
    total = batch * k
    names = [n for n, _ in model.named_parameters()]
    bias_name = names[-1]
    labels = torch.tensor(
        _label_counts(target[bias_name].numpy().astype(np.float64), total, batch),
        dtype=torch.int64,
    )
    truth = train.subset(chosen[:batch])
    with deterministic_torch():
        params_t = dict(model.named_parameters())
        for name, value in global_params.items():
            with torch.no_grad():
                params_t[name].copy_(torch.from_numpy(value))
        # relative squared error, so the stopping tolerances do not depend on the scale
        scale = float(sum(float((t**2).sum()) for t in target.values())) or 1.0

        def mismatch(dummy: torch.Tensor) -> torch.Tensor:
            logits = model(dummy)
            # K clients' mean gradients summed: (1/B) * sum of per-sample losses
            loss = torch.nn.functional.cross_entropy(logits, labels, reduction="sum") / batch
            grads = torch.autograd.grad(loss, list(params_t.values()), create_graph=True)
            diff = sum(((g - target[n]) ** 2).sum() for n, g in zip(params_t, grads, strict=True))
            assert isinstance(diff, torch.Tensor)
            return diff / scale

        best: tuple[float, np.ndarray] | None = None
        for restart in range(int(p["restarts"])):  # DLG from several random starts: keep the
            gen = torch.Generator().manual_seed(derive_seed(seed, "dummy", restart))  # best
            dummy = torch.rand((total, *train.input_shape), generator=gen).requires_grad_(True)
            opt = torch.optim.LBFGS(
                [dummy],
                lr=1.0,
                max_iter=int(p["iterations"]),
                history_size=50,
                tolerance_grad=1e-10,
                tolerance_change=1e-12,
                line_search_fn="strong_wolfe",
            )

            def closure(dummy: torch.Tensor = dummy, opt: Any = opt) -> torch.Tensor:
                opt.zero_grad()
                diff = mismatch(dummy)
                torch.autograd.backward(diff)
                return diff

            opt.step(closure)  # type: ignore[no-untyped-call]
            final = float(mismatch(dummy).detach())
            if best is None or final < best[0]:
                best = (final, dummy.detach().clamp(0, 1).numpy())
        assert best is not None
        final, recon = best
    originals = truth.x
    best_psnr, best_ssim, best_idx = [], [], []
    for img in originals:
        scores = [_psnr(img.squeeze(), r.squeeze()) for r in recon]
        j = int(np.argmax(scores))
        best_idx.append(j)
        best_psnr.append(min(float(scores[j]), 100.0))
        best_ssim.append(max(_ssim(img.squeeze(), r.squeeze()) for r in recon))
    recovered = list(labels.numpy())
    hits = 0
    for y in truth.y:
        if int(y) in recovered:
            recovered.remove(int(y))
            hits += 1
    np.savez_compressed(
        unit_dir / "reconstruction.npz",
        original=originals,
        reconstruction=recon[best_idx],
        labels=truth.y,
    )
    return {
        "psnr": float(np.mean(best_psnr)),
        "ssim": float(np.mean(best_ssim)),
        "label_accuracy": hits / batch,
        "matching_loss": final,
        "images_attacked": batch,
        "updates_summed": k,
        "local_steps": steps,
        "update_norm": float(np.median(norms)),
        "ldp_epsilon": epsilon,
    }
