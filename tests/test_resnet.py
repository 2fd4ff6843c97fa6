"""Issue 23: the small residual network (clients.models ``resnet``)."""

from __future__ import annotations

import numpy as np
import torch

from clients.data import load_digits
from clients.models import ResNet, build_model, get_params, num_parameters, param_spec
from clients.training import TrainConfig, evaluate, train_local


def test_resnet_is_small_deterministic_and_buffer_free() -> None:
    """About 20 k parameters, the same for every input size; bit-identical per seed; every
    state_dict entry is a parameter (GroupNorm, no BatchNorm buffers)."""
    a = build_model("resnet", (1, 28, 28), 10, seed=3)
    b = build_model("resnet", (1, 28, 28), 10, seed=3)
    assert isinstance(a, ResNet)
    assert 15_000 < num_parameters(param_spec(a)) < 30_000
    pa, pb = get_params(a), get_params(b)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    assert len(list(a.buffers())) == 0
    assert len(a.state_dict()) == len(list(a.parameters()))
    assert np.all(pa["norm.weight"] == 1.0) and np.all(pa["norm.bias"] == 0.0)
    out = a(torch.zeros(2, 1, 28, 28))
    assert out.shape == (2, 10)


def test_resnet_block_adds_its_input() -> None:
    """A residual block with zero convolutions passes ReLU(input) through (the skip)."""
    m = build_model("resnet", (1, 8, 8), 10, seed=0)
    assert isinstance(m, ResNet)
    block = m.block1
    with torch.no_grad():
        block.conv2.weight.zero_()
        x = torch.randn(1, 16, 8, 8)
        assert torch.allclose(block(x), torch.relu(x))


def test_resnet_learns_digits_on_one_core() -> None:
    """Three local epochs on digits take it well above chance (0.1)."""
    train, test = load_digits()
    model = build_model("resnet", train.input_shape, 10, seed=0)
    res = train_local(
        model,
        get_params(model),
        train,
        TrainConfig(epochs=3, batch_size=32, lr=0.05, momentum=0.9, seed=0),
    )
    assert evaluate(model, res.params, test).accuracy > 0.5
