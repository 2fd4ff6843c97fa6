"""Data recovery against the update a fedchain client really sends (issue 23).

The ``recovery`` cells attack one image after one SGD step; fedchain's clients send the
delta of ``epochs`` local epochs over their ``samples`` images in batches of
``batch_size`` (lr and momentum from the task manifest), often from a global model that
has already been trained for some rounds. A ``recovery-real`` cell attacks exactly that:

* **The update.** A global model trained centrally for ``round - 1`` epochs on other
  images stands in for round ``round``'s global model; the target client trains on its
  ``samples`` digits images with the manifest's settings and its own (private) shuffling,
  and the aggregator sees the fixed-point delta (decoded).
* **The attack** (Geiping et al. 2020, "Inverting Gradients", multi-step): dummy images
  (labels estimated from the output-bias delta, iDLG's count rule) are trained through the
  same unrolled local SGD with momentum (batches in index order: the client's shuffling is
  secret), and Adam (lr ``attack_lr``) minimises ``1 - cos(dummy delta, observed delta) +
  tv * TV(dummy)`` for ``iterations`` steps from ``restarts`` random starts; the restart
  with the lowest final matching loss is kept and that loss is reported.
* **The baseline.** The class-mean prior: each image guessed as the mean training image of
  its class (the aggregator knows the label counts from the update). An attack that does
  not beat it recovers nothing beyond the label.

Scores as in ``recovery``: per original image the best PSNR / SSIM over the
reconstructions (scikit-image, pixels in [0, 1]), averaged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from protocol.errors import ConfigError

__all__ = ["KEYS", "check_params", "run_recovery_real"]

KEYS: dict[str, Any] = {
    "model": str,
    "samples": int,
    "epochs": int,
    "batch_size": int,
    "round": int,
    "iterations": int,
    "restarts": int,
    "attack_lr": float,
    "tv": float,
    "frac_bits": int,
    "clip": float,
}
DEFAULTS: dict[str, Any] = {
    "model": "mlp",
    "samples": 16,
    "epochs": 10,
    "batch_size": 16,
    "round": 1,
    "iterations": 300,
    "restarts": 3,
    "attack_lr": 0.1,
    "tv": 1e-3,
    "frac_bits": 16,
    "clip": 4.0,
}


def check_params(params: Mapping[str, Any], label: Callable[[str, Any], str]) -> None:
    """Check a ``recovery-real`` cell (one-line ``ConfigError`` naming the key)."""
    from fedchain.experiments.inversion import check_known_keys

    check_known_keys(params, KEYS, label)
    for key, value in params.items():
        if key != "kind" and KEYS[key] is int and int(value) < 1:
            raise ConfigError(f"{label(key, value)}: must be >= 1")
    if params.get("model", "mlp") not in ("logreg", "mlp"):
        raise ConfigError(f"{label('model', params.get('model'))}: expected logreg or mlp")


def _tv(x: Any) -> Any:
    """Anisotropic total variation of a batch of (C, H, W) images (mean absolute step)."""
    import torch

    dh = torch.abs(x[:, :, 1:, :] - x[:, :, :-1, :]).mean()
    dw = torch.abs(x[:, :, :, 1:] - x[:, :, :, :-1]).mean()
    return dh + dw


def run_recovery_real(params: Mapping[str, Any], seed: int, unit_dir: Path) -> dict[str, Any]:
    """One attack on a realistic client update (see the module docstring)."""
    import torch
    from torch.func import functional_call

    from clients.data import load_digits
    from clients.models import build_model, get_params, param_spec
    from clients.training import (
        TrainConfig,
        default_training,
        derive_seed,
        deterministic_torch,
        train_local,
    )
    from fedchain.experiments.inversion import _label_counts, _psnr, _ssim
    from protocol.fixedpoint import dequantise, quantise
    from protocol.payloads import ModelLayout

    p = {**DEFAULTS, **params}
    n, epochs, batch = int(p["samples"]), int(p["epochs"]), int(p["batch_size"])
    base = default_training(str(p["model"]))
    lr, momentum = float(base.lr), float(base.momentum)
    train, _ = load_digits(seed=0)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train))
    target_idx, other_idx = order[:n], order[n:]
    truth = train.subset(target_idx)
    others = train.subset(other_idx)
    model = build_model(str(p["model"]), train.input_shape, train.num_classes, seed=seed)
    global_params = get_params(model)
    if int(p["round"]) > 1:  # a later round's global model: trained on the other images
        warm = TrainConfig(
            epochs=int(p["round"]) - 1,
            batch_size=32,
            lr=lr,
            momentum=momentum,
            seed=derive_seed(seed, "warm"),
        )
        global_params = train_local(model, global_params, others, warm).params
    layout = ModelLayout.from_spec(param_spec(model))
    cfg = TrainConfig(
        epochs=epochs,
        batch_size=batch,
        lr=lr,
        momentum=momentum,
        seed=derive_seed(seed, "client"),
    )
    res = train_local(model, global_params, truth, cfg)
    g_flat = layout.flatten(global_params).astype(np.float64)
    delta = layout.flatten(res.params).astype(np.float64) - g_flat
    fb = int(p["frac_bits"])
    observed = dequantise(quantise(delta, fb, round(float(p["clip"]) * 2**fb)), fb)
    steps_per_epoch = -(-n // batch)
    steps = epochs * steps_per_epoch
    # labels: iDLG's count rule on the bias delta turned into an average gradient
    c = sum((1 - momentum**t) / (1 - momentum) if momentum else 1.0 for t in range(1, steps + 1))
    bias_name = [name for name, _ in model.named_parameters()][-1]
    bias_grad = layout.unflatten(-observed / (lr * c))[bias_name].astype(np.float64)
    labels = torch.tensor(_label_counts(bias_grad, n, n), dtype=torch.int64)
    names = [name for name, _ in model.named_parameters()]
    g0 = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in global_params.items()}
    target = torch.from_numpy(observed.astype(np.float32))

    def simulate(dummy: torch.Tensor) -> torch.Tensor:
        """The dummy data's delta through the unrolled local training (differentiable)."""
        w = dict(g0)
        vel = {k: torch.zeros_like(v) for k, v in w.items()}
        for _ in range(epochs):
            for s in range(0, n, batch):
                xb, yb = dummy[s : s + batch], labels[s : s + batch]
                loss = torch.nn.functional.cross_entropy(functional_call(model, w, (xb,)), yb)
                grads = torch.autograd.grad(loss, [w[k] for k in names], create_graph=True)
                for k, g in zip(names, grads, strict=True):
                    vel[k] = momentum * vel[k] + g
                    w[k] = w[k] - lr * vel[k]
        return torch.cat([(w[k] - g0[k]).reshape(-1) for k in names])

    with deterministic_torch():
        for v in g0.values():
            v.requires_grad_(True)
        best: tuple[float, np.ndarray] | None = None
        for restart in range(int(p["restarts"])):
            gen = torch.Generator().manual_seed(derive_seed(seed, "dummy", restart))
            dummy = torch.rand((n, *train.input_shape), generator=gen).requires_grad_(True)
            opt = torch.optim.Adam([dummy], lr=float(p["attack_lr"]))
            loss_value = float("inf")
            for _ in range(int(p["iterations"])):
                opt.zero_grad()
                sim = simulate(dummy)
                match = 1 - torch.nn.functional.cosine_similarity(sim, target, dim=0)
                loss = match + float(p["tv"]) * _tv(dummy)
                loss.backward()
                opt.step()
                with torch.no_grad():
                    dummy.clamp_(0, 1)
                loss_value = float(match.detach())
            if best is None or loss_value < best[0]:
                best = (loss_value, dummy.detach().numpy().copy())
        assert best is not None
        final, recon = best
    # the class-mean prior: each image guessed as its class's mean (other images)
    means = {
        cls: others.x[others.y == cls].mean(axis=0) if np.any(others.y == cls) else None
        for cls in range(train.num_classes)
    }
    prior_psnr, best_psnr, best_ssim, best_idx = [], [], [], []
    for img, y in zip(truth.x, truth.y, strict=True):
        scores = [_psnr(img.squeeze(), r.squeeze()) for r in recon]
        j = int(np.argmax(scores))
        best_idx.append(j)
        best_psnr.append(min(float(scores[j]), 100.0))
        best_ssim.append(max(_ssim(img.squeeze(), r.squeeze()) for r in recon))
        mean = means[int(y)]
        if mean is not None:
            prior_psnr.append(_psnr(img.squeeze(), mean.squeeze()))
    recovered = list(labels.numpy())
    hits = 0
    for y in truth.y:
        if int(y) in recovered:
            recovered.remove(int(y))
            hits += 1
    np.savez_compressed(
        unit_dir / "reconstruction.npz",
        original=truth.x,
        reconstruction=recon[best_idx],
        labels=truth.y,
    )
    psnr = float(np.mean(best_psnr))
    prior = float(np.mean(prior_psnr))
    return {
        "psnr": psnr,
        "ssim": float(np.mean(best_ssim)),
        "prior_psnr": prior,
        "psnr_over_prior": psnr - prior,
        "label_accuracy": hits / n,
        "matching_loss": final,
        "local_steps": steps,
        "update_norm": float(np.linalg.norm(delta)),
    }
