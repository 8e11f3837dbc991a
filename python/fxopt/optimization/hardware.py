"""What the machine running torch can do fast, as torch itself reports it.

Presets and passes pick kernels from these answers, never from assumptions about the CPU: a
bfloat16 GEMM is twice as fast as float32 on a CPU with AVX512-BF16 (or AMX), but emulated and
slower than float32 on one without.
"""

from __future__ import annotations

import os

import torch


def fast_bfloat16_cpu() -> bool:
    """True if this CPU has native bfloat16 dot products (AVX512-BF16 or AMX-BF16)."""
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def onednn_linear_available() -> bool:
    """True if this torch has oneDNN's fused linear op (`torch.ops.mkldnn._linear_pointwise`)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_bfloat16_available() -> bool:
    """True if oneDNN runs bfloat16 kernels natively on this CPU."""
    return onednn_linear_available() and fast_bfloat16_cpu() and bool(
        torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def describe() -> str:
    """One line for reports: the CPU and the fast paths fxopt may use on it."""
    info = torch._C._cpu._get_cpu_capability() if hasattr(torch._C, "_cpu") else {}
    name = info.get("cpu_name", "unknown CPU") if isinstance(info, dict) else "unknown CPU"
    flags = [
        flag
        for flag, present in (
            ("bf16", fast_bfloat16_cpu()),
            ("vnni", bool(getattr(torch.cpu, "_is_vnni_supported", lambda: False)())),
            ("onednn-linear", onednn_linear_available()),
        )
        if present
    ]
    return f"{name}, fast paths: {', '.join(flags) or 'none'}"


def threads_text() -> str:
    """torch's thread count and the CPUs this process may run on: a run pinned to one CPU
    (taskset) still gets torch's default of one thread per core, which the CPU count shows."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = torch.get_num_threads()
    return (
        f"{threads} torch thread{'s' if threads != 1 else ''} on {usable} usable "
        f"CPU{'s' if usable != 1 else ''}"
    )
