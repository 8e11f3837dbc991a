#!/usr/bin/env bash
# Builds the wheel as a user's `pip install .` / `pip wheel .` does (isolated build environment
# from PyPI, no test build) with GoogleTest hidden from CMake, and checks that it holds the engine.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
# A relative build-dir would reuse the editable build's CMake cache (tests on): build elsewhere.
"$work/venv/bin/python" -m pip wheel -q --no-deps . -w "$work/dist" \
  --config-settings=build-dir="$work/build" \
  --config-settings=cmake.define.CMAKE_DISABLE_FIND_PACKAGE_GTest=ON
wheel=$(ls "$work"/dist/fxopt-*.whl)
# The whole listing first: `grep -q` stops reading at its match, and the lister's broken pipe
# would then fail the pipeline (pipefail) although the engine is there.
listing=$(python3 -m zipfile -l "$wheel")
grep 'fxopt/_core' <<<"$listing" >/dev/null || { echo "check_wheel: no fxopt/_core in $wheel"; exit 1; }
echo "check_wheel: $(basename "$wheel") builds without GoogleTest and holds fxopt/_core"
