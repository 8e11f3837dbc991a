#!/usr/bin/env bash
# Installs everything fxopt needs on a fresh Debian machine into a project-local virtual
# environment (.venv, created here and reused by scripts/run.sh and scripts/test.sh, so a torch
# the user already has elsewhere is never replaced) and builds fxopt there as an editable install,
# with its GoogleTest suite. Idempotent: what is present is not fetched again and the build is
# incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

apt_packages=(libgtest-dev libbenchmark-dev clang-format libgomp1)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup [1/3]: installing ${missing[*]} with apt"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating the virtual environment .venv"
  python3 -m venv .venv
fi
py=.venv/bin/python
stamp=.venv/.requirements-installed
if ! cmp -s requirements.txt "$stamp"; then
  echo "setup [2/3]: installing the Python requirements into .venv (torch, transformers, ...: a few minutes)"
  # One line per package, not pip's full log, so the first run is not minutes of silence.
  "$py" -m pip install --progress-bar off -r requirements.txt 2>&1 | { grep --line-buffered -E '^(Collecting|Successfully|ERROR)' || true; }
  cp requirements.txt "$stamp"
fi

echo "setup [3/3]: building fxopt (C++ engine and tests)"
# The lock keeps concurrent builds of one checkout from sharing build/python at once.
flock /tmp/fxopt-build.lock "$py" -m pip install -q --no-build-isolation --no-deps \
  --config-settings=cmake.define.FXOPT_BUILD_TESTS=ON -e .
