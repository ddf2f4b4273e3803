#!/usr/bin/env bash
# Usage: bash scripts/milvus-lite3.sh [DIR]
# Milvus Lite 3.x (milvus-lite 3.2.2, Apache-2.0, written in Python), for the tests that need
# what Milvus 2.5's engine as the platform's milvus-lite 2.5.1 serves it lacks: aliases,
# partitions, a collection's properties (tests marked lite3; tests/milvus.py Lite3Server).
# Both packages are named milvus_lite, so this one is installed with its dependencies into DIR
# (default .milvus-lite3, about 330 MB) and run from there. Quick when it is there already.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.milvus-lite3}"
[ -f "$dir/milvus_lite-3.2.2.dist-info/METADATA" ] && exit 0
echo "installing Milvus Lite 3.x (milvus-lite 3.2.2) into $dir for the tests…"
python3 -m pip install --quiet --disable-pip-version-check --target "$dir" "milvus-lite==3.2.2"
