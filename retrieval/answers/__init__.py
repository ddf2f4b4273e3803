"""Answers over the lookup's evidence: the standard RAG answer, agentic RAG and the RAG node."""
