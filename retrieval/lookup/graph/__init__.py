"""The retrieval graph of seed 003 §3/§6: RagConfig decides which stages run.

registry (what a retriever is) → retrievers (VECTOR, BM25, HYBRID) → plan (RagSettings → the
graph) → executor (runs it: transform, retrieve, aggregate, guard, rerank, gate, quality,
correction, neighbours, pack; deadline and fallback). `lookup_knowledge` runs it retrieval-only.
"""
