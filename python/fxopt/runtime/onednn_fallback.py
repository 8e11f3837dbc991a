"""What fxopt's oneDNN calls (onednn_linear.py, onednn_conv.py) do in a dtype this CPU's oneDNN
refuses: the same computation in ATen.

A graph is made where its dtypes run: FuseLinearActivationOneDnn and FuseConvActivationOneDnn
emit oneDNN calls only in the dtypes oneDNN runs here. But a later lowering
(`ChangePrecision(torch.float16)`) can put such a call in a dtype oneDNN refuses on this CPU
(float16 needs AVX512-FP16 or AVX-NE-CONVERT: torch raises "could not create a primitive
descriptor"), and a graph saved where bfloat16 is native can be loaded on a CPU where it is not.
Rather than fail, those calls run ATen's ops, slower and with the same results up to rounding.
Whether oneDNN runs a dtype is probed once per op and dtype, on a one-element call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

_RUNS: dict[tuple[str, torch.dtype], bool] = {}


def onednn_runs(op: str, dtype: torch.dtype, probe: Callable[[torch.dtype], object]) -> bool:
    """Whether oneDNN's `op` runs in `dtype` here: `probe(dtype)` (a one-element call) did not
    raise. A dictionary lookup after the first call: this runs at every call of a fused op."""
    runs = _RUNS.get((op, dtype))
    if runs is None:
        try:
            with torch.no_grad():
                probe(dtype)
            runs = True
        except RuntimeError:
            runs = False
        _RUNS[(op, dtype)] = runs
    return runs


def activation(y: torch.Tensor, attr: str, scalars: Sequence[float], algorithm: str | None) -> torch.Tensor:
    """oneDNN's post-op `attr` ("none", "relu", "gelu" with algorithm "tanh" or "none",
    "hardtanh" with its bounds, "swish", "sigmoid", "tanh", "hardswish") applied in ATen."""
    if attr == "none":
        return y
    if attr == "gelu":
        return F.gelu(y, approximate="tanh" if algorithm == "tanh" else "none")
    if attr == "hardtanh":
        return F.hardtanh(y, float(scalars[0]), float(scalars[1]))
    functions: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "relu": F.relu, "swish": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "hardswish": F.hardswish,
    }  # fmt: skip
    if attr not in functions:
        raise ValueError(f"oneDNN post-op {attr!r} has no ATen counterpart here")
    return functions[attr](y)
