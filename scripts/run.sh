#!/usr/bin/env bash
# Sets everything up, then runs the main job: optimize the bundled MiniLM, verify, report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
HF_HUB_OFFLINE=1 python3 -m fxopt "$@"
