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
LATER = "Not used by lookups yet (stored for the planned graph stages)."


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


def _default_retrievers() -> list[str]:
    return list(D.enabled_retrievers)


def _check(condition: Q, name: str, message: str) -> models.CheckConstraint:
    # The message is what an admin sees if a value slips past the converter's field errors.
    return models.CheckConstraint(condition=condition, name=f"rag_config_{name}",
                                  violation_error_message=message)


class RagConfig(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rag_configs",
                               help_text="The tenant whose lookups use this config.")
    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, null=True, blank=True, related_name="rag_configs",
        help_text="Empty: the tenant's default, for every lookup of the tenant. Set: an "
                  "override, used only by lookups that search this one dataset alone.")

    # Graph / agentic options (seed 003 §3), stored and validated for later stages: the help
    # texts say so, and must change when a stage starts reading one.
    max_results = models.PositiveIntegerField(
        default=D.max_results,
        help_text=f"{LATER} Lookups return at most return_n items instead.")
    min_score = models.FloatField(
        default=D.min_score,
        help_text=f"{LATER} Lookups judge relevance with reference_threshold and "
                  "precise_threshold instead.")
    enable_query_transform = models.BooleanField(
        default=D.enable_query_transform,
        help_text=f"{LATER} No model rewrites the query; lookups always derive domain, "
                  "keyword and category hints from it.")
    query_transform_strategy = models.CharField(
        max_length=20, default=D.query_transform_strategy,
        choices=_choices(cfg.QUERY_TRANSFORM_STRATEGIES),
        help_text=f"{LATER} How a query transform would rewrite the query.")
    enabled_retrievers = models.JSONField(
        default=_default_retrievers,
        help_text=f"{LATER} search_mode decides how lookups search.")
    retrieval_execution_mode = models.CharField(
        max_length=20, default=D.retrieval_execution_mode,
        choices=_choices(cfg.EXECUTION_MODES),
        help_text=f"{LATER} How several retrievers would run (one, in parallel, in turn).")
    enable_rerank = models.BooleanField(
        default=D.enable_rerank, help_text=f"{LATER} No reranker is called.")
    rerank_top_n = models.PositiveIntegerField(
        default=D.rerank_top_n,
        help_text=f"{LATER} How many candidates a reranker would reorder (at most "
                  "retrieve_k when rerank is on).")
    enable_quality_assessment = models.BooleanField(
        default=D.enable_quality_assessment,
        help_text=f"{LATER} Lookups always grade their results with the thresholds.")
    quality_threshold = models.FloatField(
        default=D.quality_threshold,
        help_text=f"{LATER} The score (0–1) a quality assessment would ask for.")
    enable_correction = models.BooleanField(
        default=D.enable_correction,
        help_text=f"{LATER} Retry with a corrected query when the quality is low; needs "
                  "enable_quality_assessment.")
    max_retry_count = models.PositiveIntegerField(
        default=D.max_retry_count,
        help_text=f"{LATER} How many corrected queries would be tried.")
    aggregation_strategy = models.CharField(
        max_length=20, default=D.aggregation_strategy,
        choices=_choices(cfg.AGGREGATION_STRATEGIES),
        help_text=f"{LATER} How the results of several retrievers would be combined.")
    metadata_filters = models.JSONField(
        default=dict, blank=True,
        help_text=f"{LATER} Would limit searches to chunks whose metadata match, e.g. "
                  '{"category": "ops"} or {"domain": ["cache", "db"]}; keys: category, '
                  "domain, business_key, file_name.")
    enable_fallback = models.BooleanField(
        default=D.enable_fallback,
        help_text=f"{LATER} A fallback answer when the graph fails or runs out of time.")
    timeout_millis = models.PositiveIntegerField(
        default=D.timeout_millis,
        help_text=f"{LATER} One deadline for the whole graph, in milliseconds (each Milvus "
                  "call has its own: MILVUS_TIMEOUT_SECONDS).")

    # lookup_knowledge (seed 000 §6).
    search_mode = models.CharField(
        max_length=10, default=D.search_mode, choices=_choices(cfg.SEARCH_MODES),
        help_text="How lookups search. hybrid: vector similarity and BM25 keyword search, "
                  "fused by rank (recommended); dense: vector similarity only.")
    rrf_k = models.PositiveIntegerField(
        default=D.rrf_k,
        help_text="Hybrid only: each search adds weight / (rrf_k + rank) to a chunk's fused "
                  "score. Smaller values favour the top few of each search more.")
    dense_weight = models.FloatField(
        default=D.dense_weight,
        help_text="Hybrid only: how much the vector search counts in the fusion (0–1).")
    bm25_weight = models.FloatField(
        default=D.bm25_weight,
        help_text="Hybrid only: how much the BM25 keyword search counts in the fusion (0–1).")
    retrieve_k = models.PositiveIntegerField(
        default=D.retrieve_k,
        help_text="How many candidates a search fetches before they are filtered down to "
                  "return_n (at least return_n). More may find more, and takes longer.")
    return_n = models.PositiveIntegerField(
        default=D.return_n, help_text="The most evidence items a lookup hands the agent.")
    max_chunks_per_document = models.PositiveIntegerField(
        default=D.max_chunks_per_document,
        help_text="The most items one document may give one answer, so that a long document "
                  "does not crowd out the others.")
    reference_threshold = models.FloatField(
        default=D.reference_threshold,
        help_text="The quality (0–1) a chunk needs to be returned at all. When no chunk "
                  "reaches it the answer is EMPTY; a category-filtered search below it is "
                  "run again without the category.")
    precise_threshold = models.FloatField(
        default=D.precise_threshold,
        help_text="The quality (0–1) at which the best chunk makes the answer PRECISE rather "
                  "than REFERENCE.")
    max_l2_distance = models.FloatField(
        null=True, blank=True, default=D.max_l2_distance,
        help_text="Empty: the embedder's calibration (recommended). Otherwise the vector "
                  "distance (squared L2, up to 4) at which a chunk's quality falls to 0.")
    kb_scope = models.CharField(
        max_length=cfg.KB_SCOPE_MAX_CHARS, blank=True, default=D.kb_scope,
        help_text=f"{LATER} The kb_scope stored with indexed chunks is the dataset's own.")
    max_context_chars = models.PositiveIntegerField(
        default=D.max_context_chars,
        help_text="The most characters of evidence text one answer carries: the item that "
                  "does not fit is cut, later ones are left out, and the answer says "
                  "truncated.")
    max_excerpt_chars = models.PositiveIntegerField(
        default=D.max_excerpt_chars,
        help_text="The most characters of one evidence item; a longer chunk is cut at a "
                  "sentence or line end. At most max_context_chars.")

    version = models.PositiveIntegerField(
        default=0, editable=False,
        help_text="Counts the saved changes; the audit of each lookup records the version "
                  "it used.")
    updated_at = models.DateTimeField(auto_now=True, help_text="When the last change was saved.")
    updated_by = models.CharField(max_length=150, blank=True, editable=False,
                                  help_text="Who saved the last change.")

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
        return f"{self.scope_label} v{self.version}"

    @property
    def scope_label(self) -> str:
        """Which config this is, without its version: "acme/default" or "acme/runbooks"."""
        scope = self.dataset.name if self.dataset_id and self.dataset else "default"
        return f"{self.tenant.slug}/{scope}"

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
