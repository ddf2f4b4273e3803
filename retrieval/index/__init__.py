"""The index: the Milvus store, the embedders, index versions, syncing documents into Milvus,
rebuild, rollback, reconcile, recovery, the single-writer lock, health and index operations."""
