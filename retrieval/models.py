"""The index (versions, embedding cache) and RagConfig with its change history.

RagConfig per tenant (default) or per dataset (override).

One tenant default per tenant (dataset IS NULL) is enforced by `rag_config_update`, which
serialises on the tenant row: a partial unique index on "dataset IS NULL" is not portable to
MariaDB, and a plain UniqueConstraint treats NULLs as distinct.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import F, Q

from datasets.models import Dataset, Tenant
from retrieval import config as cfg

D = cfg.RagSettings()  # the defaults, so that a column can never drift from the dataclass


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


def _default_retrievers() -> list[str]:
    return list(D.enabled_retrievers)


def _check(condition: Q, name: str, message: str) -> models.CheckConstraint:
    # The message is what an admin sees if a value slips past the converter's field errors.
    return models.CheckConstraint(condition=condition, name=f"rag_config_{name}",
                                  violation_error_message=message)


class RagConfig(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rag_configs")
    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, null=True, blank=True, related_name="rag_configs",
        help_text="Empty = the tenant default; set = an override for this dataset only.")

    # Graph / agentic options (seed 003 §3), stored for later stages.
    max_results = models.PositiveIntegerField(default=D.max_results)
    min_score = models.FloatField(default=D.min_score)
    enable_query_transform = models.BooleanField(default=D.enable_query_transform)
    query_transform_strategy = models.CharField(
        max_length=20, default=D.query_transform_strategy,
        choices=_choices(cfg.QUERY_TRANSFORM_STRATEGIES))
    enabled_retrievers = models.JSONField(default=_default_retrievers)
    retrieval_execution_mode = models.CharField(
        max_length=20, default=D.retrieval_execution_mode,
        choices=_choices(cfg.EXECUTION_MODES))
    enable_rerank = models.BooleanField(default=D.enable_rerank)
    rerank_top_n = models.PositiveIntegerField(default=D.rerank_top_n)
    enable_quality_assessment = models.BooleanField(default=D.enable_quality_assessment)
    quality_threshold = models.FloatField(default=D.quality_threshold)
    enable_correction = models.BooleanField(default=D.enable_correction)
    max_retry_count = models.PositiveIntegerField(default=D.max_retry_count)
    aggregation_strategy = models.CharField(
        max_length=20, default=D.aggregation_strategy,
        choices=_choices(cfg.AGGREGATION_STRATEGIES))
    metadata_filters = models.JSONField(default=dict, blank=True)
    enable_fallback = models.BooleanField(default=D.enable_fallback)
    timeout_millis = models.PositiveIntegerField(default=D.timeout_millis)

    # lookup_knowledge (seed 000 §6).
    search_mode = models.CharField(max_length=10, default=D.search_mode,
                                   choices=_choices(cfg.SEARCH_MODES))
    rrf_k = models.PositiveIntegerField(default=D.rrf_k)
    dense_weight = models.FloatField(default=D.dense_weight)
    bm25_weight = models.FloatField(default=D.bm25_weight)
    retrieve_k = models.PositiveIntegerField(default=D.retrieve_k)
    return_n = models.PositiveIntegerField(default=D.return_n)
    max_chunks_per_document = models.PositiveIntegerField(default=D.max_chunks_per_document)
    reference_threshold = models.FloatField(default=D.reference_threshold)
    precise_threshold = models.FloatField(default=D.precise_threshold)
    max_l2_distance = models.FloatField(
        null=True, blank=True, default=D.max_l2_distance,
        help_text="Empty: the embedder's calibration (recommended).")
    kb_scope = models.CharField(max_length=cfg.KB_SCOPE_MAX_CHARS, blank=True,
                                default=D.kb_scope)
    max_context_chars = models.PositiveIntegerField(default=D.max_context_chars)
    max_excerpt_chars = models.PositiveIntegerField(default=D.max_excerpt_chars)

    version = models.PositiveIntegerField(default=0, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        verbose_name = "RAG config"
        ordering = ["tenant_id", "dataset_id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "dataset"],
                                    name="rag_config_unique_tenant_dataset"),
            _check(Q(rrf_k__gt=0), "rrf_k_positive", "rrf_k must be positive"),
            _check(Q(dense_weight__gte=0, dense_weight__lte=1, bm25_weight__gte=0,
                     bm25_weight__lte=1) & (Q(dense_weight__gt=0) | Q(bm25_weight__gt=0)),
                   "hybrid_weights_valid", "weights lie in [0, 1] and are not both 0"),
            _check(Q(return_n__gt=0), "return_n_positive", "return_n must be positive"),
            _check(Q(retrieve_k__gte=F("return_n")), "retrieve_k_gte_return_n",
                   "retrieve_k must be at least return_n"),
            _check(Q(max_chunks_per_document__gt=0), "max_chunks_positive",
                   "max_chunks_per_document must be positive"),
            _check(Q(reference_threshold__gte=0, reference_threshold__lte=1,
                     precise_threshold__gte=0, precise_threshold__lte=1,
                     min_score__gte=0, min_score__lte=1,
                     quality_threshold__gte=0, quality_threshold__lte=1),
                   "thresholds_in_unit_range", "thresholds must lie between 0 and 1"),
            _check(Q(reference_threshold__lte=F("precise_threshold")), "reference_lte_precise",
                   "reference_threshold must not exceed precise_threshold"),
            _check(Q(max_l2_distance__isnull=True)
                   | Q(max_l2_distance__gt=0, max_l2_distance__lte=4), "max_l2_in_range",
                   "max_l2_distance must be in (0, 4]"),
            _check(Q(search_mode__in=list(cfg.SEARCH_MODES)), "search_mode_valid",
                   "search_mode must be dense or hybrid"),
        ]

    def __str__(self) -> str:
        scope = self.dataset.name if self.dataset_id and self.dataset else "default"
        return f"{self.tenant.slug}/{scope} v{self.version}"

    def setting_values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in cfg.SETTING_NAMES}

    def to_settings(self) -> cfg.RagSettings:
        """Through the converter, so a hand-edited row is rejected, never half-trusted."""
        return cfg.RagConfigConverter.to_settings(self.setting_values())


class RagConfigChange(models.Model):
    """One accepted change of a RagConfig: who, when, and the settings before and after."""

    config = models.ForeignKey(RagConfig, on_delete=models.CASCADE, related_name="changes")
    version = models.PositiveIntegerField()
    changed_by = models.CharField(max_length=150, blank=True)
    changed_at = models.DateTimeField(auto_now_add=True)
    before = models.JSONField(null=True, blank=True, help_text="null when the config was created")
    after = models.JSONField()

    class Meta:
        ordering = ["-changed_at", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["config", "version"],
                                    name="rag_config_change_unique_version"),
        ]

    def __str__(self) -> str:
        return f"{self.config_id} v{self.version} by {self.changed_by or '?'}"

    def changed_fields(self) -> dict[str, tuple[Any, Any]]:
        before = self.before or {}
        return {k: (before.get(k), v) for k, v in (self.after or {}).items()
                if before.get(k) != v}


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
