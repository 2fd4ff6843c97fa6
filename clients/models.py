"""Small torch models for the FL clients, and conversion between models and NumPy parameters.

Three model kinds cover the experiments: ``"logreg"`` (multinomial logistic regression),
``"mlp"`` (one ReLU hidden layer) and ``"cnn"`` (two conv/pool stages and two linear layers,
for image inputs such as 8x8 digits or 28x28 MNIST); ``"mlp-wide"`` (two ReLU hidden layers
of 3,200 units, 10.5 M parameters on 8x8 digits) exercises large payloads. None uses
BatchNorm or any other buffer, so every ``state_dict`` entry is a trained float32 parameter
and a model is fully described by :func:`param_spec` plus a ``dict[str, np.ndarray]`` of
float32 arrays. Initialisation is deterministic given ``seed`` and does not touch torch's
global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from protocol.errors import ConfigError

__all__ = [
    "CNN",
    "MLP",
    "MODELS",
    "RESNET_WIDTH",
    "WIDE_HIDDEN",
    "LogReg",
    "ParamSpec",
    "ResNet",
    "WideMLP",
    "build_model",
    "get_params",
    "num_parameters",
    "param_spec",
    "set_params",
]

ParamSpec = list[tuple[str, tuple[int, ...]]]
Params = dict[str, npt.NDArray[np.float32]]


def _flat_size(input_shape: tuple[int, ...]) -> int:
    return int(math.prod(input_shape))


class LogReg(nn.Module):
    """Flatten the input and apply one linear layer (logits of a softmax regression)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(_flat_size(input_shape), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(torch.flatten(x, 1))
        return out


class MLP(nn.Module):
    """Flatten, a ReLU hidden layer of ``hidden`` units, and a linear output layer."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(_flat_size(input_shape), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))
        return out


#: Width of both hidden layers of ``"mlp-wide"``: 64*3200 + 3200*3200 + 3200*10 weights plus
#: biases = 10,483,210 parameters on 8x8 digits (10 classes), a 42 MB update payload.
WIDE_HIDDEN = 3200


class WideMLP(nn.Module):
    """Flatten, two ReLU hidden layers of ``hidden`` units each, and a linear output layer."""

    def __init__(
        self, input_shape: tuple[int, ...], num_classes: int, hidden: int = WIDE_HIDDEN
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(_flat_size(input_shape), hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(torch.flatten(x, 1)))
        out: torch.Tensor = self.fc3(torch.relu(self.fc2(h)))
        return out


class CNN(nn.Module):
    """Two 3x3 conv (16, 32 channels) + ReLU + 2x2 max-pool stages, then a ReLU MLP head.

    Takes ``(C, H, W)`` inputs with ``H, W >= 4``: 8x8 digits become 32x2x2 features, 28x28
    MNIST 32x7x7, before a hidden linear layer of ``hidden`` units and the output layer.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 64) -> None:
        super().__init__()
        c, h, w = input_shape
        self.conv1 = nn.Conv2d(c, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * (h // 4) * (w // 4), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))
        return out


#: Channels of the residual network's first stage (the second has twice as many).
RESNET_WIDTH = 16


class _ResidualBlock(nn.Module):
    """Two 3x3 convolutions with GroupNorm, added to the (projected) input, then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(4, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(4, cout)
        self.project = (
            nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
            if stride != 1 or cin != cout
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        skip = x if self.project is None else self.project(x)
        result: torch.Tensor = torch.relu(out + skip)
        return result


class ResNet(nn.Module):
    """A small residual network (He et al. 2016) for 2 CPU cores: a 3x3 stem of
    :data:`RESNET_WIDTH` channels, one residual block at that width, one at twice the
    width with stride 2, global average pooling and a linear layer (about 24 k parameters
    on 28x28 images). GroupNorm instead of BatchNorm: no running-statistics buffers, so
    every tensor is a trained parameter that aggregation averages."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c = input_shape[0]
        w = RESNET_WIDTH
        self.stem = nn.Conv2d(c, w, 3, padding=1, bias=False)
        self.norm = nn.GroupNorm(4, w)
        self.block1 = _ResidualBlock(w, w, 1)
        self.block2 = _ResidualBlock(w, 2 * w, 2)
        self.fc = nn.Linear(2 * w, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.norm(self.stem(x)))
        x = self.block2(self.block1(x))
        out: torch.Tensor = self.fc(torch.flatten(torch.mean(x, dim=(2, 3)), 1))
        return out


def _make_resnet(shape: tuple[int, ...], num_classes: int, hidden: int) -> nn.Module:
    if len(shape) != 3 or shape[1] < 2 or shape[2] < 2:
        raise ConfigError(f"the resnet model needs (channels, height, width) inputs, got {shape}")
    return ResNet(shape, num_classes)


def _make_logreg(shape: tuple[int, ...], num_classes: int, hidden: int) -> nn.Module:
    return LogReg(shape, num_classes)


def _make_mlp(shape: tuple[int, ...], num_classes: int, hidden: int) -> nn.Module:
    return MLP(shape, num_classes, hidden)


def _make_mlp_wide(shape: tuple[int, ...], num_classes: int, hidden: int) -> nn.Module:
    return WideMLP(shape, num_classes)  # fixed width: a >= 10 M-parameter model


def _make_cnn(shape: tuple[int, ...], num_classes: int, hidden: int) -> nn.Module:
    if len(shape) != 3 or shape[1] < 4 or shape[2] < 4:
        raise ConfigError(
            f"the cnn model needs (channels, height, width) inputs of at least 4x4, got {shape}"
        )
    return CNN(shape, num_classes, hidden)


MODELS: dict[str, Callable[[tuple[int, ...], int, int], nn.Module]] = {
    "logreg": _make_logreg,
    "mlp": _make_mlp,
    "mlp-wide": _make_mlp_wide,
    "cnn": _make_cnn,
    "resnet": _make_resnet,
}


def _init_(module: nn.Module, generator: torch.Generator) -> None:
    """PyTorch's default Linear/Conv initialisation, drawn from an explicit generator."""
    for sub in module.modules():
        if isinstance(sub, nn.GroupNorm):  # built on the meta device: set PyTorch's defaults
            nn.init.ones_(sub.weight)
            nn.init.zeros_(sub.bias)
        if isinstance(sub, nn.Linear | nn.Conv2d):
            nn.init.kaiming_uniform_(sub.weight, a=math.sqrt(5), generator=generator)
            if sub.bias is not None:
                fan_in = sub.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                nn.init.uniform_(sub.bias, -bound, bound, generator=generator)


def build_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    seed: int = 0,
    hidden: int = 64,
) -> nn.Module:
    """Build a float32 CPU model by name (``"logreg"``, ``"mlp"``, ``"mlp-wide"`` or ``"cnn"``).

    ``input_shape`` is one sample's shape (e.g. ``(1, 8, 8)``), ``num_classes`` the number of
    logits, ``hidden`` the hidden width of ``"mlp"``/``"cnn"`` (``"mlp-wide"`` is always
    :data:`WIDE_HIDDEN` wide). Weights use PyTorch's default
    uniform (Kaiming, a=sqrt(5)) scheme drawn from a local ``torch.Generator`` seeded with
    ``seed``, so the same arguments always give bit-identical parameters and the global RNG is
    left untouched. Unknown names or unusable shapes raise :class:`ConfigError`.
    """
    builder = MODELS.get(name)
    if builder is None:
        raise ConfigError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d < 1 for d in shape):
        raise ConfigError(f"input_shape must be non-empty with positive sizes, got {input_shape}")
    if int(num_classes) < 2:
        raise ConfigError(f"num_classes must be at least 2, got {num_classes}")
    if int(hidden) < 1:
        raise ConfigError(f"hidden must be positive, got {hidden}")
    with torch.device("meta"):
        model = builder(shape, int(num_classes), int(hidden))
    model = model.to_empty(device="cpu").to(torch.float32)
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    with torch.no_grad():
        _init_(model, generator)
    return model


def param_spec(model: nn.Module) -> ParamSpec:
    """List ``(name, shape)`` of every floating-point ``state_dict`` entry, in ``state_dict`` order.

    This order is the canonical order of the model's tensors for codecs and aggregation.
    """
    return [
        (name, tuple(int(d) for d in t.shape))
        for name, t in model.state_dict().items()
        if t.is_floating_point()
    ]


def num_parameters(spec: ParamSpec) -> int:
    """Total number of scalar values described by a parameter spec."""
    return sum(int(math.prod(shape)) for _, shape in spec)


def get_params(model: nn.Module) -> Params:
    """Copy the model's floating-point tensors into a fresh ``dict`` of float32 NumPy arrays.

    Keys follow :func:`param_spec` order; arrays are C-contiguous copies that do not alias
    the model's storage, so later training does not change them.
    """
    return {
        name: np.array(t.detach().cpu().numpy(), dtype=np.float32, order="C", copy=True)
        for name, t in model.state_dict().items()
        if t.is_floating_point()
    }


def set_params(model: nn.Module, params: Mapping[str, npt.ArrayLike]) -> None:
    """Load ``params`` (name -> array) into the model in place, after validating them.

    The names must be exactly those of :func:`param_spec` and every shape must match; values
    must have a floating dtype and are converted to float32. Any mismatch raises
    :class:`ConfigError` before the model is modified.
    """
    spec = param_spec(model)
    expected = {name for name, _ in spec}
    missing = sorted(expected - set(params))
    unexpected = sorted(set(params) - expected)
    if missing or unexpected:
        raise ConfigError(
            f"parameter names do not match the model: missing {missing}, unexpected {unexpected}"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, shape in spec:
        arr = np.asarray(params[name])
        if not np.issubdtype(arr.dtype, np.floating):
            raise ConfigError(f"parameter {name!r} has non-float dtype {arr.dtype}")
        if tuple(arr.shape) != shape:
            raise ConfigError(f"parameter {name!r} has shape {tuple(arr.shape)}, expected {shape}")
        arrays[name] = np.ascontiguousarray(arr, dtype=np.float32)
    state = model.state_dict()
    with torch.no_grad():
        for name, arr in arrays.items():
            state[name].copy_(torch.from_numpy(arr))
