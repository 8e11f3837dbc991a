"""Kernel choices kept on disk, so a second optimize of the same model on this machine tunes
nothing.

One JSON file per machine and torch version (`choices-<key>.json` in `$FXOPT_CACHE_DIR`, else
`~/.cache/fxopt`): the file name holds the CPU model, the flags that decide which kernels pay,
torch's version, the thread count, how measure.py times and the revision of the candidates'
kernels, so a choice measured elsewhere, or on another kernel, is never reused. Inside, entries
are keyed by the query (op, shape, dtype, variant and the candidates). A cache that
cannot be read or written is ignored: tuning then runs again, nothing fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..optimization import hardware


def cache_dir() -> Path:
    configured = os.environ.get("FXOPT_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "fxopt"


TIMING = "evicted+hot-activations+streamed"
"""How measure.py times (each call after a cache eviction, a convolution's activations read
back after it, a Linear of a few tokens on weights streamed from memory): choices timed another
way are not reused."""

KERNELS = "k9"
"""The revision of the candidates' kernels, raised whenever one of them changes what it runs
(k2: oneDNN's linear on a weight packed once; fxopt's int8 kernel prefetching into L2; k3: the
per-token int8 Linear in fxopt's kernels, in the activations' dtype; k5: the int8 Linears timed
with the outlier channels a query names; k6: the per-token int8 Linear on AVX2-only CPUs, with
fxopt's exact product; k7: that product prefetching the weight, the per-token GELU cheaper,
the float32 attention's unmasked softmax in one pass; k8: fxopt's int8 1x1 convolution; k9:
fxopt's kernels split over torch's OpenMP team), so a choice measured on the old kernel is not reused."""


def machine_key() -> str:
    """What a measurement depends on beyond the query itself."""
    threads = f"{torch.get_num_threads()}t"
    return "|".join([hardware.cpu_model(), ",".join(hardware.cpu_flags()), torch.__version__, threads, TIMING, KERNELS])


class ChoiceCache:
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else cache_dir()
        self._entries: dict[str, dict[str, Any]] | None = None
        self._machine = ""
        self._deferring = 0
        self._unwritten = False

    @property
    def path(self) -> Path:
        digest = hashlib.sha1(machine_key().encode()).hexdigest()[:16]
        return self.directory / f"choices-{digest}.json"

    def _load(self) -> dict[str, dict[str, Any]]:
        # The thread count is part of the key: reload when it changed since the last read.
        if self._entries is None or self._machine != machine_key():
            self._machine = machine_key()
            try:
                data = json.loads(self.path.read_text())
                self._entries = data["entries"] if data.get("machine") == self._machine else {}
            except (OSError, ValueError, KeyError, TypeError):
                self._entries = {}
        return self._entries

    def get(self, key: str) -> dict[str, Any] | None:
        return self._load().get(key)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self._load()[key] = entry
        if self._deferring:
            self._unwritten = True
        else:
            self._write()

    @contextlib.contextmanager
    def writes_deferred(self) -> Iterator[None]:
        """Entries put inside are written once, on leaving (even on an error: they were
        measured). Tuning a model puts 20-50 entries, and each write replaces the whole file:
        ext4 flushes a file renamed over another to disk first, which with a build writing to
        the same disk cost 34 ms a write, 0.85 s of ResNet-50's 2.2 s of `default` (on a quiet
        disk the difference was inside the noise)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if not self._deferring and self._unwritten:
                self._write()

    def _write(self) -> None:
        self._unwritten = False
        entries = self._load()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Written whole, then renamed: concurrent processes never read half a file.
            with tempfile.NamedTemporaryFile("w", dir=self.directory, delete=False, suffix=".tmp") as out:
                json.dump({"machine": self._machine, "entries": entries}, out, indent=1, sort_keys=True)
            os.replace(out.name, self.path)
        except OSError:
            pass
