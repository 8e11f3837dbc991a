"""What the machine running torch can do fast, as torch itself reports it.

Presets and passes pick kernels from these answers, never from assumptions about the CPU: a
bfloat16 GEMM is twice as fast as float32 on a CPU with AVX512-BF16 (or AMX), but emulated and
slower than float32 on one without.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import torch


def fast_bfloat16_cpu() -> bool:
    """True if this CPU has native bfloat16 dot products (AVX512-BF16 or AMX-BF16) and oneDNN,
    which runs torch's bfloat16 matrix products, may use them (`onednn_isa_cap`)."""
    return any(flag in cpu_flags() for flag in ("avx512_bf16", "amx_bf16"))


def bfloat16_native(device: torch.device) -> bool:
    """True if `device` computes bfloat16 matrix products natively: a CPU with AVX512-BF16 or
    AMX-BF16, an NVIDIA GPU of compute capability 8.0 (Ampere) or newer. Elsewhere bfloat16 is
    emulated (or absent) and slower than float32."""
    if device.type == "cpu":
        return fast_bfloat16_cpu()
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 0)
    return False


def model_device(model: object) -> torch.device:
    """Where `model` computes: the device of its first parameter or buffer (a module, or an
    ExportedProgram's state dict), the CPU if it holds no tensor. The presets pick their passes
    for that device; passes skip, saying so, any weight elsewhere that a kernel of theirs cannot
    run on."""
    if isinstance(model, torch.nn.Module):
        tensors: Iterable[object] = itertools.chain(model.parameters(), model.buffers())
    else:  # an ExportedProgram keeps its weights in a state_dict attribute
        state = getattr(model, "state_dict", None)
        tensors = state.values() if isinstance(state, dict) else ()
    first = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
    return first.device if first is not None else torch.device("cpu")


def fast_int8_cpu() -> bool:
    """True if this CPU has int8 dot products (AVX512-VNNI, AVX-VNNI or AMX-INT8) that oneDNN may
    use (`onednn_isa_cap`).

    Without them aten._int_mm has no fast kernel: 30-50x slower than float32 was measured on a
    Zen 3 (AVX2 only).
    """
    return any(flag in cpu_flags() for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


BENCH_FLAGS = ("avx2", "avx512_f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
"""The CPU features that decide which kernels pay, named in every benchmark and cache key."""


@functools.cache
def capabilities() -> dict[str, object]:
    """torch's own reading of this CPU (name, cache sizes, instruction-set flags)."""
    cpu = getattr(torch._C, "_cpu", None)
    info = cpu._get_cpu_capability() if cpu is not None else {}
    return info if isinstance(info, dict) else {}


@functools.cache
def cpu_model() -> str:
    """The CPU's model name as the OS reports it (torch's own name is often only the vendor's)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return str(capabilities().get("cpu_name", "unknown CPU"))


ONEDNN_ISAS = (
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16", "AVX10_1_512_AMX", "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16", "ALL",
)  # fmt: skip
"""oneDNN's instruction-set levels, lowest first, as `ONEDNN_MAX_CPU_ISA` names them."""

_FLAG_ISA = {
    "avx2": "AVX2",
    "avx_vnni": "AVX2_VNNI",
    "avx512_f": "AVX512_CORE",
    "avx512_vnni": "AVX512_CORE_VNNI",
    "avx512_bf16": "AVX512_CORE_BF16",
    "amx_bf16": "AVX512_CORE_AMX",
    "amx_int8": "AVX512_CORE_AMX",
}
"""The lowest oneDNN level that uses each of BENCH_FLAGS."""


def onednn_isa_cap() -> str | None:
    """The instruction-set level `ONEDNN_MAX_CPU_ISA` (or its old name `DNNL_MAX_CPU_ISA`) caps
    oneDNN at, None if uncapped. torch's bfloat16 and int8 matrix products run in oneDNN, so a
    CPU capped at AVX2 computes them like an AVX2-only CPU: bfloat16 emulated (a 128x384x384
    Linear 6x slower than native on a Zen 4, 3x slower than float32) or refused outright by
    oneDNN's packed Linear. fxopt then treats the CPU as one without the capped flags, its own
    kernels included, so an AVX2-only CPU's choices can be measured on a newer one."""
    for variable in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        value = os.environ.get(variable, "").strip().upper()
        if value in ONEDNN_ISAS and value != "ALL":
            return value
    return None


def fbgemm_isa_cap() -> str | None:
    """The instruction set fbgemm is confined to by its own variable, `FBGEMM_ENABLE_INSTRUCTIONS`
    (AVX2, AVX512, AVX512_E1 for VNNI, ...), None if unset: oneDNN's cap does not reach it, so
    emulating an AVX2-only CPU takes both."""
    value = os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS", "").strip().upper()
    return value or None


LAST_LEVEL_CACHE_GUESS = 32 << 20
"""What `last_level_cache_bytes` answers where the OS does not say: the largest L3 of the CPUs
measured (a Zen 4's, 32 MiB)."""


@functools.cache
def last_level_cache_bytes() -> int:
    """The size of the largest cache the OS lists for CPU 0 (the L3 a core shares), in bytes."""
    sizes = [0]
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes) or LAST_LEVEL_CACHE_GUESS


def cpu_flags() -> list[str]:
    """The flags of BENCH_FLAGS this CPU has, less those `onednn_isa_cap` rules out."""
    caps = capabilities()
    cap = onednn_isa_cap()
    allowed = ONEDNN_ISAS[: ONEDNN_ISAS.index(cap) + 1] if cap else ONEDNN_ISAS
    return [flag for flag in BENCH_FLAGS if caps.get(flag, False) and _FLAG_ISA[flag] in allowed]


def onednn_linear_available() -> bool:
    """True if this torch has oneDNN's fused linear op (`torch.ops.mkldnn._linear_pointwise`)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_bfloat16_available() -> bool:
    """True if oneDNN runs bfloat16 kernels natively on this CPU."""
    return onednn_linear_available() and fast_bfloat16_cpu() and bool(
        torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def onednn_conv_available() -> bool:
    """True if this torch has oneDNN's pointwise convolution and its weight packing
    (`torch.ops.mkldnn._convolution_pointwise`, `_reorder_convolution_weight`)."""
    mkldnn = torch.ops.mkldnn
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(mkldnn, "_convolution_pointwise")
        and hasattr(mkldnn, "_reorder_convolution_weight")
    )


def onednn_dtypes(op_available: bool) -> list[str]:
    """The weight dtypes a oneDNN fused op runs natively here, given whether this torch has it."""
    if not op_available:
        return []
    return ["float32", *(["bfloat16"] if onednn_bfloat16_available() else [])]


def describe() -> str:
    """One line for reports: the CPU and the fast paths fxopt may use on it."""
    flags = [
        flag
        for flag, present in (
            ("bf16", fast_bfloat16_cpu()),
            ("int8", fast_int8_cpu()),
            ("onednn-linear", onednn_linear_available()),
            ("onednn-conv", onednn_conv_available()),
        )
        if present
    ]
    capped = f"; oneDNN capped at {cap}" if (cap := onednn_isa_cap()) else ""
    capped += f"; fbgemm capped at {cap}" if (cap := fbgemm_isa_cap()) else ""
    return f"{cpu_model()} ({', '.join(cpu_flags()) or 'no AVX2'}{capped}), fast paths: {', '.join(flags) or 'none'}"


def threads_text() -> str:
    """torch's thread count and the CPUs this process may run on: a run pinned to one CPU
    (taskset) still gets torch's default of one thread per core, which the CPU count shows."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = torch.get_num_threads()
    return (
        f"{threads} torch thread{'s' if threads != 1 else ''} on {usable} usable "
        f"CPU{'s' if usable != 1 else ''}"
    )
