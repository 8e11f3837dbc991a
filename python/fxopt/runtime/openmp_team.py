"""fxopt's kernels split their work on torch's own threads (cpp/kernels/row_split.h).

torch runs its ops on an OpenMP team whose threads keep spinning for a while after each op; a
kernel that split its work over threads of its own found the other cores held by them. Where
torch's ATen runs on OpenMP and its runtime is loaded from a file this process maps, the
kernels join that team; elsewhere they keep their own pool.
"""

from __future__ import annotations

import os

import torch

from .. import _core

_RUNTIMES = ("libgomp", "libiomp")


def torch_openmp_library() -> str | None:
    """The path of the OpenMP runtime this process loaded for torch, or None."""
    if not torch.backends.openmp.is_available():
        return None
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith(_RUNTIMES) and ".so" in path:
                    return path
    except OSError:  # no /proc (not Linux)
        return None
    return None


def join_torch_team() -> bool:
    """Whether the kernels now split their work on torch's OpenMP team."""
    library = torch_openmp_library()
    return library is not None and _core.use_openmp_team(library)
