"""RagConfig per tenant (default) or per dataset (override), its change history, the changes a
regression gate holds back (drafts), the RAG agents, the A/B tests of config versions, and the
tenants' synonym groups.

One tenant default per tenant (dataset IS NULL) is enforced by `rag_config_update`, which
serialises on the tenant row: a partial unique index on "dataset IS NULL" is not portable to
MariaDB, and a plain UniqueConstraint treats NULLs as distinct.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q

from datasets.models import Dataset, Job, Tenant
from retrieval.ragconfig import config as cfg
from retrieval.ragconfig.settings import AGENTIC_GRAPHS, KNOBS, SETTING_NAMES, RagSettings

D = RagSettings()  # the defaults, so that a column can never drift from the dataclass


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


def _default_retrievers() -> list[str]:
    return list(D.enabled_retrievers)


def _setting(name: str, **column: Any) -> dict[str, Any]:
    """A setting's column options from its declaration (default, help text, and choices for a
    text setting); `column` overrides them where the column stores the value differently."""
    declared = KNOBS[name]
    options: dict[str, Any] = {"default": getattr(D, name), "help_text": declared.help}
    if declared.choices and isinstance(options["default"], str):
        options["choices"] = _choices(declared.choices)
    return {**options, **column}


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
    # fields by the stage that reads them. Each column's default, help text and choices come
    # from the setting's declaration in RagSettings; here only how it is stored.
    enable_query_transform = models.BooleanField(**_setting("enable_query_transform"))
    query_transform_strategy = models.CharField(
        max_length=20, **_setting("query_transform_strategy"))
    bilingual_bm25 = models.BooleanField(**_setting("bilingual_bm25"))
    translate_query = models.BooleanField(**_setting("translate_query"))
    translation_budget_ms = models.PositiveIntegerField(**_setting("translation_budget_ms"))
    judge_translation = models.BooleanField(**_setting("judge_translation"))
    enabled_retrievers = models.JSONField(
        **_setting("enabled_retrievers", default=_default_retrievers))
    retrieval_execution_mode = models.CharField(
        max_length=20, **_setting("retrieval_execution_mode"))
    max_results = models.PositiveIntegerField(**_setting("max_results"))
    min_score = models.FloatField(**_setting("min_score"))
    aggregation_strategy = models.CharField(max_length=20, **_setting("aggregation_strategy"))
    enable_rerank = models.BooleanField(**_setting("enable_rerank"))
    rerank_top_n = models.PositiveIntegerField(**_setting("rerank_top_n"))
    enable_quality_assessment = models.BooleanField(**_setting("enable_quality_assessment"))
    quality_threshold = models.FloatField(**_setting("quality_threshold"))
    enable_correction = models.BooleanField(**_setting("enable_correction"))
    max_retry_count = models.PositiveIntegerField(**_setting("max_retry_count"))
    metadata_filters = models.JSONField(blank=True, **_setting("metadata_filters", default=dict))
    enable_fallback = models.BooleanField(**_setting("enable_fallback"))
    timeout_millis = models.PositiveIntegerField(**_setting("timeout_millis"))
    agentic_graph = models.CharField(max_length=10, **_setting("agentic_graph"))
    agentic_quality_threshold = models.FloatField(**_setting("agentic_quality_threshold"))
    agentic_max_retry_count = models.PositiveIntegerField(**_setting("agentic_max_retry_count"))
    chat_base_url = models.CharField(max_length=500, blank=True, **_setting("chat_base_url"))
    chat_model = models.CharField(max_length=200, blank=True, **_setting("chat_model"))
    chat_api_key_env = models.CharField(max_length=100, blank=True,
                                        **_setting("chat_api_key_env"))
    chat_timeout_seconds = models.FloatField(**_setting("chat_timeout_seconds"))
    chat_max_tokens = models.PositiveIntegerField(**_setting("chat_max_tokens"))
    neighbour_expansion = models.CharField(max_length=10, **_setting("neighbour_expansion"))
    neighbour_window = models.PositiveIntegerField(**_setting("neighbour_window"))

    # lookup_knowledge (seed 000 §6).
    fusion_method = models.CharField(max_length=20, **_setting("fusion_method"))
    rrf_k = models.PositiveIntegerField(**_setting("rrf_k"))
    dense_weight = models.FloatField(**_setting("dense_weight"))
    bm25_weight = models.FloatField(**_setting("bm25_weight"))
    retrieve_k = models.PositiveIntegerField(**_setting("retrieve_k"))
    return_n = models.PositiveIntegerField(**_setting("return_n"))
    max_chunks_per_document = models.PositiveIntegerField(**_setting("max_chunks_per_document"))
    recency_half_life_days = models.PositiveIntegerField(**_setting("recency_half_life_days"))
    reference_threshold = models.FloatField(**_setting("reference_threshold"))
    precise_threshold = models.FloatField(**_setting("precise_threshold"))
    model_reference_threshold = models.FloatField(**_setting("model_reference_threshold"))
    model_precise_threshold = models.FloatField(**_setting("model_precise_threshold"))
    max_l2_distance = models.FloatField(null=True, blank=True, **_setting("max_l2_distance"))
    relevance_gate = models.CharField(max_length=10, **_setting("relevance_gate"))
    relevance_order = models.BooleanField(**_setting("relevance_order"))
    kb_scope = models.CharField(max_length=cfg.KB_SCOPE_MAX_CHARS, blank=True,
                                **_setting("kb_scope"))
    max_context_chars = models.PositiveIntegerField(**_setting("max_context_chars"))
    max_excerpt_chars = models.PositiveIntegerField(**_setting("max_excerpt_chars"))

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
                     model_reference_threshold__gte=0, model_reference_threshold__lte=1,
                     model_precise_threshold__gte=0, model_precise_threshold__lte=1,
                     min_score__gte=0, min_score__lte=1,
                     quality_threshold__gte=0, quality_threshold__lte=1),
                   "thresholds_in_unit_range", "thresholds must lie between 0 and 1"),
            _check(Q(agentic_quality_threshold__gte=0, agentic_quality_threshold__lte=1),
                   "agentic_threshold_in_unit_range",
                   "agentic_quality_threshold must lie between 0 and 1"),
            _check(Q(recency_half_life_days__gte=0, recency_half_life_days__lte=3650),
                   "recency_half_life_in_range",
                   "recency_half_life_days must lie between 0 and 3650"),
            _check(Q(translation_budget_ms__gte=100, translation_budget_ms__lte=60_000),
                   "translation_budget_in_range",
                   "translation_budget_ms must lie between 100 and 60000"),
            _check(Q(reference_threshold__lte=F("precise_threshold")), "reference_lte_precise",
                   "reference_threshold must not exceed precise_threshold"),
            _check(Q(model_reference_threshold__lte=F("model_precise_threshold")),
                   "model_reference_lte_precise",
                   "model_reference_threshold must not exceed model_precise_threshold"),
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
        return {name: getattr(self, name) for name in SETTING_NAMES}

    def to_settings(self) -> RagSettings:
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
        max_length=10, blank=True, choices=_choices(AGENTIC_GRAPHS),
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


class RagConfigDraft(models.Model):
    """A change of a RagConfig (an edit, a rollback, an A/B promotion) held back, not served,
    while the tenant's regression gate checks it (ragconfig/drafts.py, evaluation/gate.py).
    One config has one held change at most: a later change supersedes it. An A/B test of a
    config the gate covers is held the same way (kind "experiment"): it routes no lookup to
    its candidate until the gate passes the candidate."""

    class Kind(models.TextChoices):
        EDIT = "edit"
        ROLLBACK = "rollback"
        PROMOTION = "promotion"
        EXPERIMENT = "experiment", "A/B test (its share of the lookups)"

    class Status(models.TextChoices):
        CHECKING = "checking", "checking: the gate runs"
        HELD = "held", "held: the gate found a regression, or could not run"
        APPLIED = "applied", "applied: the gate passed, or a superuser overrode it"
        SUPERSEDED = "superseded", "superseded by a later change of the config"
        DISCARDED = "discarded"

    config = models.ForeignKey(RagConfig, on_delete=models.CASCADE, related_name="drafts")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.EDIT)
    base_version = models.PositiveIntegerField(
        help_text="The config's version the change was made over: the gate's baseline.")
    settings = models.JSONField(help_text="Every setting of the changed config.")
    note = models.CharField(max_length=200, blank=True,
                            help_text="Goes to the change record when the draft is applied.")
    proposed_by = models.CharField(max_length=150, blank=True)
    proposed_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CHECKING)
    verdict = models.CharField(max_length=1000, blank=True,
                               help_text="The gate's figures in words, or why it could not run.")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True,
                            related_name="+", help_text="The gate's job (its progress).")
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    override_reason = models.CharField(max_length=200, blank=True)
    applied_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="The version it became, once applied.")
    experiment = models.ForeignKey(
        "ConfigExperiment", on_delete=models.CASCADE, null=True, blank=True,
        related_name="drafts", help_text="An A/B test's admission: the test whose share waits "
                                         "for the gate.")

    class Meta:
        verbose_name = "held config change"
        ordering = ["-proposed_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["checking", "held", "applied", "superseded",
                                        "discarded"]), name="rag_config_draft_status_valid"),
            # An override says why; only a superuser's override has a reason.
            models.CheckConstraint(condition=Q(override_reason="") | Q(status="applied"),
                                   name="rag_config_draft_override_applied"),
            # An A/B test's admission names its test; no other change does.
            models.CheckConstraint(
                condition=Q(kind="experiment", experiment__isnull=False)
                | (~Q(kind="experiment") & Q(experiment__isnull=True)),
                name="rag_config_draft_experiment_named"),
        ]

    def __str__(self) -> str:
        return f"held change {self.pk} of {self.config.scope_label} ({self.status})"

    @property
    def held(self) -> bool:
        return self.status in DRAFT_HELD

    @property
    def recheckable(self) -> bool:
        """Held by a verdict, or checking with a gate job that failed (its worker died)."""
        return self.status == self.Status.HELD or (
            self.status == self.Status.CHECKING and self.job is not None
            and self.job.status == Job.Status.FAILED)

    def changed_fields(self) -> dict[str, tuple[Any, Any]]:
        """The settings it changes against the version it was made over."""
        base = self.config.changes.filter(version=self.base_version).first()
        before = base.settings() if base is not None else {}
        return {k: (before.get(k), v) for k, v in self.settings.items() if before.get(k) != v}


DRAFT_HELD = (RagConfigDraft.Status.CHECKING, RagConfigDraft.Status.HELD)


class ConfigExperiment(models.Model):
    """An A/B test of a config: `share` per cent of its lookups (by session, else by call) run
    with a candidate version instead of the config as it serves; the audit records each call's
    arm, so both arms' figures come from the audit. On a config the regression gate covers,
    the test starts at 0 % and takes the share asked for once the gate passes its candidate
    (ragconfig/drafts.py `experiment_start`)."""

    class Arm(models.TextChoices):
        CONTROL = "control"
        CANDIDATE = "candidate"

    config = models.ForeignKey(RagConfig, on_delete=models.CASCADE, related_name="experiments")
    candidate = models.ForeignKey(RagConfigChange, on_delete=models.CASCADE, related_name="+",
                                  help_text="The version the candidate arm runs with.")
    share = models.PositiveSmallIntegerField(
        help_text="The per cent of the config's lookups that run with the candidate now: the "
                  "share asked for, or 0 while the regression gate holds the candidate.")
    asked_share = models.PositiveSmallIntegerField(
        help_text="The share asked for when it started (1–99).")
    started_at = models.DateTimeField(auto_now_add=True)
    started_by = models.CharField(max_length=150, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stopped_by = models.CharField(max_length=150, blank=True)
    outcome = models.CharField(max_length=200, blank=True,
                               help_text="How it ended: stopped, or its candidate promoted.")

    class Meta:
        verbose_name = "A/B test"
        ordering = ["-started_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(asked_share__gte=1, asked_share__lte=99),
                                   name="config_experiment_asked_share_1_99"),
            # Nothing between: the share asked for, or none while the gate holds it.
            models.CheckConstraint(condition=Q(share=0) | Q(share=F("asked_share")),
                                   name="config_experiment_share_asked_or_0"),
        ]

    def __str__(self) -> str:
        return f"A/B {self.pk}: version {self.candidate.version} for {self.share} %"

    @property
    def running(self) -> bool:
        return self.stopped_at is None

    @property
    def awaiting_gate(self) -> bool:
        """Started on a config the gate covers, its candidate not passed yet: no lookup runs
        with it."""
        return self.running and self.share == 0


# A tenant's synonyms (ragconfig/synonyms.py validates and writes them; lookup/synonyms.py
# applies them to the BM25 query).
MAX_SYNONYM_TERM_CHARS = 64
MAX_SYNONYM_TERMS = 20
SYNONYM_SEPARATOR = " = "


class SynonymGroup(models.Model):
    """Terms one tenant's documents and questions use for the same thing (从库 = replica =
    slave): a lookup whose question names one also searches BM25 for the others."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="synonym_groups")
    terms = models.CharField(
        max_length=MAX_SYNONYM_TERMS * (MAX_SYNONYM_TERM_CHARS + len(SYNONYM_SEPARATOR)),
        help_text=f'Equivalent terms separated by "=" or ",", e.g. "从库 = replica = slave": '
                  f"2 to {MAX_SYNONYM_TERMS} terms of 2 to {MAX_SYNONYM_TERM_CHARS} "
                  "characters, matched without regard to case or full-width forms.")
    # The group's normalised terms, sorted, hashed: one group per set of terms and tenant.
    terms_key = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        ordering = ["tenant_id", "terms"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "terms_key"],
                                    name="synonym_group_unique_terms_per_tenant"),
            models.CheckConstraint(condition=Q(terms__contains=SYNONYM_SEPARATOR.strip()),
                                   name="synonym_group_two_terms_at_least",
                                   violation_error_message="a group has two terms at least"),
        ]

    def __str__(self) -> str:
        return self.terms

    def term_list(self) -> tuple[str, ...]:
        return tuple(self.terms.split(SYNONYM_SEPARATOR))


class SynonymRevision(models.Model):
    """Changes with every write of the tenant's synonym groups: a lookup process keeps the
    groups it read until this says they changed (lookup/synonyms.py)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True,
                                  related_name="+")
    # Random, not a counter: a rolled-back write cannot leave a cache that looks current.
    revision = models.CharField(max_length=32)

    def __str__(self) -> str:
        return f"synonyms of tenant {self.tenant_id}: {self.revision}"
