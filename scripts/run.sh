#!/usr/bin/env bash
# Sets everything up, then runs the main job: optimize the bundled real MiniLM with the `fast`
# preset, verify it against its declared accuracy (a non-zero exit if it falls outside), time it.
# With arguments, runs `fxopt` with them instead (e.g. scripts/run.sh passes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -eq 0 ]; then
  set -- optimize minilm --preset fast --verify --bench
fi
HF_HUB_OFFLINE=1 .venv/bin/python -m fxopt "$@"
