#!/usr/bin/env bash
# Usage: bash scripts/milvus-engine.sh [DIR]
# Milvus 2.5's own C++ engine, for the tests that hold the platform to a Milvus server's limits
# (kbplatform/processes.py MilvusEngineServer): the `milvus` program of the milvus-lite 2.5.1
# wheel (Apache-2.0, about 55 MB), unpacked into DIR (default .milvus-engine) without its Python
# dependencies (the program runs by itself). Quick when it is there already.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.milvus-engine}"
[ -x "$dir/milvus_lite/lib/milvus" ] && exit 0
echo "unpacking Milvus 2.5's engine (milvus-lite 2.5.1) into $dir…"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
  "milvus-lite==2.5.1"
