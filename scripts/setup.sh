#!/usr/bin/env bash
# Creates .venv and installs the project with the given extras (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".${extras:+[$extras]}"
