"""fxopt's kernels split their work on torch's OpenMP team (runtime/openmp_team.py,
cpp/kernels/row_split.h), with the bits one thread gives."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
import torch

from fxopt import _core
from fxopt.runtime import openmp_team
from fxopt.runtime.pointwise_conv import pointwise_conv2d
from fxopt.tuning.kernels import int8_linear


@pytest.fixture
def two_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        openmp_team.join_torch_team()


@pytest.mark.skipif(not torch.backends.openmp.is_available(), reason="this torch's ATen does not run on OpenMP")
def test_the_kernels_join_the_openmp_runtime_torch_loaded() -> None:
    library = openmp_team.torch_openmp_library()
    assert library is not None and os.path.basename(library).startswith(("libgomp", "libiomp"))
    with open("/proc/self/maps") as maps:
        assert library in {line.split()[-1] for line in maps}
    assert openmp_team.join_torch_team()
    assert not _core.use_openmp_team("/nonexistent/libgomp.so.1")


def _kernels() -> list[Callable[[], torch.Tensor]]:
    """fxopt kernels on inputs large enough that both the team (parts of 64 KB) and the own pool
    (1 MB) split them over two threads: a per-token int8 Linear (row quantization, int8 product,
    dequantization) and a 1x1 convolution with its residual and ReLU6."""
    torch.manual_seed(0)
    x, weight, bias = torch.randn(2048, 384), torch.randn(1152, 384) * 0.05, torch.randn(1152)
    linear = int8_linear("int8_per_token", weight, bias)
    image = torch.randn(1, 48, 112, 112).contiguous(memory_format=torch.channels_last)
    conv_weight, conv_bias = torch.randn(72, 48, 1, 1) * 0.2, torch.randn(72)
    residual = torch.randn(1, 72, 112, 112).contiguous(memory_format=torch.channels_last)
    return [
        lambda: linear(x),
        lambda: pointwise_conv2d(image, conv_weight, conv_bias, residual, 0.0, 6.0),
    ]


@pytest.mark.usefixtures("two_threads")
def test_the_team_and_the_own_pool_give_one_threads_bits() -> None:
    kernels = _kernels()
    torch.set_num_threads(1)
    one = [kernel() for kernel in kernels]
    torch.set_num_threads(2)
    library = openmp_team.torch_openmp_library()
    for runtime in ([library] if library else []) + [""]:
        assert _core.use_openmp_team(runtime)
        for kernel, expected in zip(kernels, one):
            assert torch.equal(kernel(), expected), f"runtime {runtime or 'own pool'}"
