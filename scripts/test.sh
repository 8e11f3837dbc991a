#!/usr/bin/env bash
# Sets everything up, then runs every check: the C++ suite (ctest), mypy over python/fxopt and
# the Python suite (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build/python --output-on-failure
(cd python && python3 -m mypy -p fxopt --ignore-missing-imports --follow-imports=silent)
HF_HUB_OFFLINE=1 python3 -m pytest tests/python -q "$@"
