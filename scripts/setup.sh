#!/usr/bin/env bash
# Installs everything fxopt needs on a fresh Debian machine and builds it (editable install).
# Idempotent: packages already present are not fetched again and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

apt_packages=(libgtest-dev libbenchmark-dev clang-format)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} with apt"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

stamp=build/.requirements-installed
mkdir -p build
if ! cmp -s requirements.txt "$stamp"; then
  echo "setup: installing Python requirements"
  python3 -m pip install -q -r requirements.txt
  cp requirements.txt "$stamp"
fi

echo "setup: building fxopt"
# The lock keeps concurrent builds of one checkout from sharing build/python at once.
flock /tmp/fxopt-build.lock python3 -m pip install -q --no-build-isolation --no-deps -e .
