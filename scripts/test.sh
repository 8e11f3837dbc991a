#!/usr/bin/env bash
# Sets everything up, then runs every check: formatting of the C++ (clang-format), Python lint
# (ruff), the C++ suite (ctest), mypy (configured in pyproject.toml) and the Python suite
# (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
git ls-files -- '*.h' '*.cc' | xargs clang-format --dry-run --Werror
.venv/bin/python -m ruff check
ctest --test-dir build/python --output-on-failure
.venv/bin/python -m mypy
HF_HUB_OFFLINE=1 .venv/bin/python -m pytest tests/python -q "$@"
