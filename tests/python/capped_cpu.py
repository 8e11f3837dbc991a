"""Runs a script in a fresh process whose libraries see an AVX2-only CPU: oneDNN, ATen and
fbgemm read their instruction-set caps once, at start-up, so a test cannot cap its own process."""

from __future__ import annotations

import os
import subprocess
import sys

AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}


def run_capped_at_avx2(script: str) -> None:
    """Runs `script` capped at AVX2, untuned; it must end by printing ok."""
    env = {**os.environ, **AVX2_ONLY, "FXOPT_TUNING": "static"}
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]
