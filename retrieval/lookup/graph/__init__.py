"""The retrieval graph of seed 003 §3/§6: RagConfig decides which stages run.

registry (what a retriever is) → retrievers (VECTOR, BM25, HYBRID) → plan (RagSettings → the
graph) → executor (runs it: transform, retrieve, aggregate, guard, rerank, gate, quality,
correction, neighbours, pack; fallback), over run (its parts and outcome, the deadline, the
stage clock, the audit's account). `lookup_knowledge` runs it retrieval-only.
"""
