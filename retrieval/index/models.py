"""The index: its versions (what a collection's vectors mean) and the embedding cache."""

from __future__ import annotations

from django.db import models

from datasets.ingestion.pipeline import Chunking


class IndexVersion(models.Model):
    """One Milvus collection and what its vectors mean: never mix two models in one search."""

    class Status(models.TextChoices):
        BUILDING = "building"
        ACTIVE = "active"
        RETIRED = "retired"  # kept for a rollback until an operator drops it
        FAILED = "failed"
        DROPPED = "dropped"  # its collection is gone; the row stays as history

    collection_name = models.CharField(max_length=100, unique=True)
    embedder = models.CharField(max_length=200)
    dimension = models.PositiveIntegerField()
    chunk_size = models.PositiveIntegerField()
    chunk_overlap = models.PositiveIntegerField()
    # Versions built before whole-document chunks existed cut every document (0).
    whole_document_chars = models.PositiveIntegerField(default=0)
    splitter = models.CharField(max_length=50, default="markdown-heading-v1")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.BUILDING)
    progress = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "datasets_indexversion"  # created by the datasets app; moved here
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["building", "active", "retired", "failed",
                                               "dropped"]),
                name="index_version_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.collection_name} ({self.embedder}, {self.dimension}d, {self.status})"

    @property
    def chunking(self) -> Chunking:
        return Chunking(size=self.chunk_size, overlap=self.chunk_overlap,
                        whole_document=self.whole_document_chars)


class EmbeddingCache(models.Model):
    """Vectors keyed by (model, text hash): rebuilds and re-imports don't pay for them again."""

    model = models.CharField(max_length=200)
    text_hash = models.CharField(max_length=64)
    vector = models.BinaryField()  # float32 little-endian
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "datasets_embeddingcache"  # created by the datasets app; moved here
        constraints = [
            models.UniqueConstraint(fields=["model", "text_hash"], name="embedding_cache_key"),
        ]

    def __str__(self) -> str:
        return f"{self.model}:{self.text_hash[:12]}"
