"""RAG configuration: the typed settings and their converter, the RagConfig rows with history,
RAG agents and A/B tests, the tenants' synonym groups, and the reads and writes of them."""
