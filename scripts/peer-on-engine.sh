#!/usr/bin/env bash
# Usage: bash scripts/peer-on-engine.sh PEER_DIR VENV
# The peer of `bench_peer` (PEER_DIR: requirements-peer.txt, langchain_milvus_baseline.py) on
# the platform's own engine, Milvus 2.5's (milvus-lite 2.5.1), instead of the Milvus Lite 3.x
# it pins: the same requirements in VENV, then milvus-lite 2.5.1 over them (langchain-milvus
# 0.4.0 asks for 3.x but runs on it), and a copy of the script, VENV/peer_on_engine.py, whose
# RRF is Milvus 2.5's ranker type (the engine refuses 2.6's RERANK Function). Prints the
# bench_peer arguments to give.
set -euo pipefail
peer="${1:?PEER_DIR}" venv="${2:?VENV}"
python3.11 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$peer/requirements-peer.txt"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "milvus-lite==2.5.1" \
  "setuptools<81" tqdm
"$venv/bin/python" - "$peer/langchain_milvus_baseline.py" "$venv/peer_on_engine.py" <<'PY'
import sys
source, target = sys.argv[1:]
text = open(source, encoding="utf-8").read()
old = """            rrf = Function(name="rrf", input_field_names=[], function_type=FunctionType.RERANK,
                           params={"reranker": "rrf", "k": a.rrf_k})
            search_kw = dict(reranker=rrf, fetch_k=a.fetch_k or a.k)"""
new = """            search_kw = dict(ranker_type="rrf", ranker_params={"k": a.rrf_k},
                             fetch_k=a.fetch_k or a.k)"""
if old not in text:
    sys.exit(f"{source}: its RRF is not the one this script rewrites; nothing written")
open(target, "w", encoding="utf-8").write(text.replace(old, new))
PY
echo "--peer-python $venv/bin/python --peer-script $venv/peer_on_engine.py"
