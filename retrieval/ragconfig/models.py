"""RagConfig per tenant (default) or per dataset (override), its change history, the RAG agents
and the A/B tests of config versions.

One tenant default per tenant (dataset IS NULL) is enforced by `rag_config_update`, which
serialises on the tenant row: a partial unique index on "dataset IS NULL" is not portable to
MariaDB, and a plain UniqueConstraint treats NULLs as distinct.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q

from datasets.models import Dataset, Tenant
from retrieval.ragconfig import config as cfg

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
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rag_configs",
                               help_text="The tenant whose lookups use this config.")
    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, null=True, blank=True, related_name="rag_configs",
        help_text="Empty: the tenant's default, for every lookup of the tenant. Set: an "
                  "override, used only by lookups that search this one dataset alone.")

    # The retrieval graph (seed 003 §3, docs/retrieval-graph.md); the admin groups the
    # fields by the stage that reads them.
    enable_query_transform = models.BooleanField(
        default=D.enable_query_transform,
        help_text="Rewrite the query before searching, with query_transform_strategy (no "
                  "model: deterministic rules and the documents' frontmatter keywords).")
    query_transform_strategy = models.CharField(
        max_length=20, default=D.query_transform_strategy,
        choices=_choices(cfg.QUERY_TRANSFORM_STRATEGIES),
        help_text="REWRITE: strip filler words; EXPAND: add the matched domain's keywords; "
                  "DECOMPOSE: one search per sub-question; MULTI_QUERY: the original, "
                  "rewritten and expanded queries, each searched and the results aggregated.")
    enabled_retrievers = models.JSONField(
        default=_default_retrievers,
        help_text="Which retrievers run: VECTOR (vector similarity), BM25 (keywords, "
                  "identifiers), HYBRID (both, fused by rank; recommended). SIMPLE takes "
                  "one, PARALLEL and SEQUENTIAL several, HYBRID exactly VECTOR and BM25.")
    retrieval_execution_mode = models.CharField(
        max_length=20, default=D.retrieval_execution_mode,
        choices=_choices(cfg.EXECUTION_MODES),
        help_text="SIMPLE: one retriever. PARALLEL: all at once, within timeout_millis. "
                  "SEQUENTIAL: the next only when the evidence so far scores below "
                  "quality_threshold. HYBRID: Milvus fuses VECTOR and BM25 in one request.")
    max_results = models.PositiveIntegerField(
        default=D.max_results,
        help_text="How many candidates each retriever fetches (per query).")
    min_score = models.FloatField(
        default=D.min_score,
        help_text="The vector similarity (0–1, the scale of the thresholds) a retriever's "
                  "candidate needs to be kept; 0 keeps all. BM25-only candidates have no "
                  "similarity and are kept.")
    aggregation_strategy = models.CharField(
        max_length=20, default=D.aggregation_strategy,
        choices=_choices(cfg.AGGREGATION_STRATEGIES),
        help_text="How several candidate lists (retrievers × queries) become one: RANK by "
                  "weighted rank fusion (recommended), MERGE by vector similarity, "
                  "DEDUPLICATE list after list. Each chunk appears once.")
    enable_rerank = models.BooleanField(
        default=D.enable_rerank,
        help_text="Reorder the candidates with the reranker of KB_RERANK_BASE_URL; without "
                  "one the lookup falls back (enable_fallback) or answers UNAVAILABLE.")
    rerank_top_n = models.PositiveIntegerField(
        default=D.rerank_top_n,
        help_text="With rerank on: how many of the reranked candidates go on to the "
                  "relevance gate (at most retrieve_k).")
    enable_quality_assessment = models.BooleanField(
        default=D.enable_quality_assessment,
        help_text="Score the evidence set (top similarity, query-term coverage, rank "
                  "agreement; recorded in the trace). Below quality_threshold the answer is "
                  "never PRECISE.")
    quality_threshold = models.FloatField(
        default=D.quality_threshold,
        help_text="The evidence score (0–1) that counts as good enough: for the quality "
                  "assessment, SEQUENTIAL execution and correction.")
    enable_correction = models.BooleanField(
        default=D.enable_correction,
        help_text="Below quality_threshold, search again with a changed plan (wider, then "
                  "other retrievers and an expanded query) and keep the best attempt; needs "
                  "enable_quality_assessment.")
    max_retry_count = models.PositiveIntegerField(
        default=D.max_retry_count,
        help_text="How many corrected attempts a lookup may make.")
    metadata_filters = models.JSONField(
        default=dict, blank=True,
        help_text='Only chunks whose document matches, e.g. {"category": "ops"} or '
                  '{"domain": ["cache", "db"]}; applied inside the vector store query. '
                  "Keys: category, domain, file_name, business_key (a value or a list of "
                  "values), updated_after, updated_before (ISO dates: when the document's "
                  "content last changed).")
    enable_fallback = models.BooleanField(
        default=D.enable_fallback,
        help_text="When a stage fails or the deadline passes, answer with the plain "
                  "hybrid search instead of UNAVAILABLE (the trace says why).")
    timeout_millis = models.PositiveIntegerField(
        default=D.timeout_millis,
        help_text="One deadline for the whole lookup, in milliseconds (each Milvus call "
                  "also has its own: MILVUS_TIMEOUT_SECONDS).")
    agentic_graph = models.CharField(
        max_length=10, default=D.agentic_graph, choices=_choices(cfg.AGENTIC_GRAPHS),
        help_text="The agentic RAG graph of /api/rag/agentic: FULL plans sub-questions, grades "
                  "each retrieval and corrects weak ones (up to max_retry_count); SIMPLIFIED "
                  "searches once and answers (no evaluation, no query optimisation: fewer "
                  "model calls).")
    agentic_quality_threshold = models.FloatField(
        default=D.agentic_quality_threshold,
        help_text="The agentic graph's own: the grade (0-1) of a sub-question's evidence below "
                  "which it searches a corrected query. The lookup's quality_threshold does "
                  "not apply here; without a chat model the rules grade a search that found "
                  "the right runbook 0.44-0.82.")
    agentic_max_retry_count = models.PositiveIntegerField(
        default=D.agentic_max_retry_count,
        help_text="The agentic graph's own: how many corrected searches one call may make, "
                  "over all its sub-questions (the lookup's max_retry_count does not apply "
                  "here).")
    chat_base_url = models.CharField(
        max_length=500, blank=True, default=D.chat_base_url,
        help_text="This tenant's OpenAI-compatible endpoint for the LLM stages (query "
                  "transformation, judge, answers), e.g. https://llm.example.com/v1. Empty: "
                  "KB_CHAT_BASE_URL (none: the offline fallbacks).")
    chat_model = models.CharField(
        max_length=200, blank=True, default=D.chat_model,
        help_text="The model name sent to the endpoint. Empty: KB_CHAT_MODEL.")
    chat_api_key_env = models.CharField(
        max_length=100, blank=True, default=D.chat_api_key_env,
        help_text="The name of the environment variable holding this tenant's key, "
                  "KB_CHAT_API_KEY_<NAME> (the key itself is never stored). Empty: "
                  "KB_CHAT_API_KEY - but only for KB_CHAT_BASE_URL: a tenant's own endpoint "
                  "never receives the platform's key. Only the tenant's own may be named: "
                  "KB_CHAT_API_KEY_<TENANT> (its slug in capitals, - as _).")
    chat_timeout_seconds = models.FloatField(
        default=D.chat_timeout_seconds,
        help_text="The longest wait for one model reply, in seconds; 0: "
                  "KB_CHAT_TIMEOUT_SECONDS. timeout_millis still bounds the whole call.")
    chat_max_tokens = models.PositiveIntegerField(
        default=D.chat_max_tokens,
        help_text="The most tokens one reply may have; 0: KB_CHAT_MAX_TOKENS.")
    neighbour_expansion = models.CharField(
        max_length=10, default=D.neighbour_expansion,
        choices=_choices(cfg.NEIGHBOUR_EXPANSIONS),
        help_text="Add context after each hit: ADJACENT, the chunks before and after it "
                  "(neighbour_window each side); SECTION, the rest of its section. Within "
                  "max_context_chars.")
    neighbour_window = models.PositiveIntegerField(
        default=D.neighbour_window,
        help_text="ADJACENT: how many chunks on each side; SECTION: at most twice this many.")

    # lookup_knowledge (seed 000 §6).
    fusion_method = models.CharField(
        max_length=20, default=D.fusion_method, choices=_choices(cfg.FUSION_METHODS),
        help_text="How the HYBRID retriever fuses its vector and BM25 lists: RRF, weighted "
                  "reciprocal rank fusion with rrf_k; CONVEX, each list's scores normalised "
                  "to 0–1 within the query and combined dense_weight : bm25_weight. "
                  "(HYBRID execution: Milvus's RRF.)")
    rrf_k = models.PositiveIntegerField(
        default=D.rrf_k,
        help_text="HYBRID retriever and RANK aggregation: each list adds weight / (rrf_k + "
                  "rank) to a chunk's fused score. Smaller values favour the top few of each "
                  "list more.")
    dense_weight = models.FloatField(
        default=D.dense_weight,
        help_text="How much the vector search counts in fusion (HYBRID retriever, RANK "
                  "aggregation), 0–1; with CONVEX, the ratio dense_weight : bm25_weight is "
                  "what counts.")
    bm25_weight = models.FloatField(
        default=D.bm25_weight,
        help_text="How much the BM25 keyword search counts in fusion (HYBRID retriever, "
                  "RANK aggregation), 0–1.")
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
        help_text="Empty: every dataset. Set: only datasets whose kb_scope is this value; "
                  "applied inside the vector store query.")
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
    # The A/B test running on this config, if any (ragconfig/services.py experiment_start):
    # joined to the row, so a lookup reads it with its config in one query.
    experiment = models.ForeignKey(
        "ConfigExperiment", on_delete=models.SET_NULL, null=True, blank=True, editable=False,
        related_name="+", help_text="The A/B test running on this config: a share of its "
                                    "lookups run with another version.")

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
            _check(Q(agentic_quality_threshold__gte=0, agentic_quality_threshold__lte=1),
                   "agentic_threshold_in_unit_range",
                   "agentic_quality_threshold must lie between 0 and 1"),
            _check(Q(reference_threshold__lte=F("precise_threshold")), "reference_lte_precise",
                   "reference_threshold must not exceed precise_threshold"),
            _check(Q(max_l2_distance__isnull=True)
                   | Q(max_l2_distance__gt=0, max_l2_distance__lte=4), "max_l2_in_range",
                   "max_l2_distance must be in (0, 4]"),
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


AGENT_NAME = RegexValidator(r"^[\w .:-]{1,100}$", "Letters, digits, spaces and ._:- only.")


class RagAgent(models.Model):
    """An agentic-RAG agent a RAG node delegates to by name (seed 003 §5): the agentic graph
    with its own settings over the tenant's config, not the node's."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rag_agents")
    name = models.CharField(
        max_length=100, validators=[AGENT_NAME],
        help_text="What an agent loop names it by (`agent` or `sub_agents` of "
                  "/api/rag/node), matched without regard to case.")
    description = models.TextField(blank=True)
    agentic_graph = models.CharField(
        max_length=10, blank=True, choices=_choices(cfg.AGENTIC_GRAPHS),
        help_text="Empty: the RagConfig's.")
    max_retry_count = models.PositiveIntegerField(
        null=True, blank=True, help_text="Corrections of one call (over its sub-questions). "
                                         "Empty: the RagConfig's agentic_max_retry_count.")
    chat_model = models.CharField(
        max_length=200, blank=True,
        help_text="Another model on the config's endpoint. Empty: the RagConfig's.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "RAG agent"
        ordering = ["tenant_id", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"],
                                               name="rag_agent_unique_name_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    # The RagConfig setting each of its fields sets: the agentic graph's own, never the
    # lookup's (an agent's max_retry_count does not change its lookups' corrections).
    SETTING_FIELDS: ClassVar[dict[str, str]] = {"agentic_graph": "agentic_graph",
                      "agentic_max_retry_count": "max_retry_count", "chat_model": "chat_model"}

    def overrides(self) -> dict[str, Any]:
        """The settings it sets, over the tenant's RagConfig."""
        values = {setting: getattr(self, name) for setting, name in self.SETTING_FIELDS.items()}
        return {name: value for name, value in values.items() if value not in ("", None)}


class RagConfigChange(models.Model):
    """One accepted change of a RagConfig: who, when, and the settings before and after."""

    config = models.ForeignKey(RagConfig, on_delete=models.CASCADE, related_name="changes")
    version = models.PositiveIntegerField()
    changed_by = models.CharField(max_length=150, blank=True)
    changed_at = models.DateTimeField(auto_now_add=True)
    before = models.JSONField(null=True, blank=True, help_text="null when the config was created")
    after = models.JSONField()
    note = models.CharField(max_length=200, blank=True,
                            help_text="Why, when the platform knows: a rollback names its version.")

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

    def settings(self) -> dict[str, Any]:
        """Every setting of this version: fields added since take their built-in defaults, as
        they had then."""
        return {**cfg.RagConfigConverter.to_dict(D), **(self.after or {})}


class ConfigExperiment(models.Model):
    """An A/B test of a config: `share` per cent of its lookups (by session, else by call) run
    with a candidate version instead of the config as it serves; the audit records each call's
    arm, so both arms' figures come from the audit."""

    class Arm(models.TextChoices):
        CONTROL = "control"
        CANDIDATE = "candidate"

    config = models.ForeignKey(RagConfig, on_delete=models.CASCADE, related_name="experiments")
    candidate = models.ForeignKey(RagConfigChange, on_delete=models.CASCADE, related_name="+",
                                  help_text="The version the candidate arm runs with.")
    share = models.PositiveSmallIntegerField(
        help_text="The per cent of the config's lookups that run with the candidate (1–99).")
    started_at = models.DateTimeField(auto_now_add=True)
    started_by = models.CharField(max_length=150, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stopped_by = models.CharField(max_length=150, blank=True)
    outcome = models.CharField(max_length=200, blank=True,
                               help_text="How it ended: stopped, or its candidate promoted.")

    class Meta:
        verbose_name = "A/B test"
        ordering = ["-started_at", "-id"]
        constraints = [models.CheckConstraint(condition=Q(share__gte=1, share__lte=99),
                                              name="config_experiment_share_1_99")]

    def __str__(self) -> str:
        return f"A/B {self.pk}: version {self.candidate.version} for {self.share} %"

    @property
    def running(self) -> bool:
        return self.stopped_at is None
