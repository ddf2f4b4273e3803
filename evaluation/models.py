"""Evaluation runs of config versions, each query's outcome kept; stored question sets, some named
as a tenant's regression gate, the gate's rules as they stood when a config change was held,
and the gate's checks of held config changes."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from datasets.models import Dataset, Job, Tenant
from retrieval.ragconfig.models import RagConfigDraft


class EvaluationRun(models.Model):
    """One measurement of a config version: a batch of questions with their expected documents
    on the tenant's own index (what its agents get), or a BEIR-format suite in a collection of
    its own (how well the version ranks). Run as a job; every query's outcome is kept."""

    class Kind(models.TextChoices):
        BATCH = "batch", "batch hit test"
        SUITE = "suite", "BEIR suite"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="evaluation_runs",
                               help_text="Whose config version ran.")
    kind = models.CharField(max_length=5, choices=Kind.choices)
    name = models.CharField(max_length=200, help_text=(
        "The question set (its file's name) or the suite: the runs of one name form a series "
        "in the chart."))
    job = models.OneToOneField(Job, on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="evaluation_run")
    config_scope = models.CharField(
        max_length=200, blank=True,
        help_text="The config that ran (\"acme/default\", \"acme/runbooks\": a dataset's "
                  "own); empty: the built-in defaults (no config served).")
    config_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="That config's version; empty: the built-in "
                                         "defaults.")
    settings = models.JSONField(help_text="Every setting the run looked up with.")
    dataset_ids = models.JSONField(default=list, blank=True,
                                   help_text="A batch: the datasets its lookups searched.")
    questions = models.JSONField(default=list, blank=True,
                                 help_text="A batch: its questions, as parsed.")
    max_queries = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="A suite: its first N judged queries.")
    collection = models.CharField(max_length=200, blank=True,
                                  help_text="The Milvus collection searched.")
    embedder = models.CharField(max_length=200, blank=True)
    queries = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    latency_ms = models.JSONField(default=dict, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "retrieval_evaluationrun"  # created by the retrieval app; moved here
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "name", "created_at"],
                                name="evaluation_run_series")]
        constraints = [models.CheckConstraint(condition=Q(kind__in=["batch", "suite"]),
                                              name="evaluation_run_kind_valid")]

    def __str__(self) -> str:
        return f"run {self.pk}: {self.name} ({self.config_label})"

    @property
    def config_label(self) -> str:
        """"acme/runbooks, version 2", or "the built-in defaults"."""
        if self.config_version is None:  # a held change's run names it in its scope
            return self.config_scope or "the built-in defaults"
        scope = self.config_scope or f"{self.tenant.slug}/default"  # a run from before scopes
        return f"{scope}, version {self.config_version}"


class EvaluationQuery(models.Model):
    """One question of a run and what the lookup answered."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="results")
    position = models.PositiveIntegerField()
    query_id = models.CharField(max_length=200)
    query = models.TextField()
    expected = models.JSONField(default=list, blank=True,
                                help_text="The relevant documents; empty: off-topic, EMPTY "
                                          "is right.")
    ranking = models.JSONField(default=list, blank=True,
                               help_text="The documents found, best first (the first ten).")
    status = models.CharField(max_length=16, help_text="READY or EMPTY.")
    hit = models.BooleanField()
    reciprocal_rank = models.FloatField()
    ndcg = models.FloatField(help_text="nDCG@10")
    latency_ms = models.FloatField()
    trace = models.JSONField(null=True, blank=True,
                             help_text="A miss's retrievalDetails (the first misses of a run).")

    class Meta:
        db_table = "retrieval_evaluationquery"  # created by the retrieval app; moved here
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position"],
                                               name="evaluation_query_unique_position")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.position} {self.query_id}"


# The gate's metrics: the run's metric (evaluation/runs.py _run_batch) → its label and the
# set's column holding the largest drop allowed.
GATE_METRICS = {"first": ("right first", "max_drop_first"),
                "mrr@10": ("MRR@10", "max_drop_mrr"),
                "ndcg@10": ("nDCG@10", "max_drop_ndcg"),
                "off_topic_empty": ("off-topic EMPTY", "max_drop_off_topic_empty")}


def _tolerance(default: float, label: str) -> models.FloatField[float, float]:
    return models.FloatField(default=default, help_text=(
        f"The largest drop of {label} (0 to 1, absolute: 0.02 is two points) a change may "
        "cause on this set and still serve."))


class QuestionSet(models.Model):
    """A tenant's stored question set (questions with their expected documents, as a batch hit
    test takes them). Named as the gate, a change of a config that serves its lookups is held
    until this set scores no worse than the tolerances allow."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="question_sets")
    name = models.CharField(max_length=200)
    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, null=True, blank=True, related_name="question_sets",
        help_text="Its questions search this dataset alone, and as the gate it guards this "
                  "dataset's config (or the tenant default while the dataset has none). "
                  "Empty: every dataset of the tenant, and it guards the tenant default.")
    questions = models.JSONField(help_text="Its questions, as parsed.")
    gate = models.BooleanField(default=False, help_text=(
        "Part of the regression gate: a change of a config serving its lookups (an edit, a "
        "rollback, an A/B promotion) is held until it passes on this set."))
    max_drop_first = _tolerance(0.02, "right first (the right document ranked first)")
    max_drop_mrr = _tolerance(0.02, "MRR@10")
    max_drop_ndcg = _tolerance(0.02, "nDCG@10")
    max_drop_off_topic_empty = _tolerance(0.05, "off-topic EMPTY (off-topic questions "
                                                "answered EMPTY)")
    created_by = models.CharField(max_length=150, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"],
                                    name="question_set_unique_name_per_tenant"),
            models.CheckConstraint(
                condition=Q(max_drop_first__gte=0, max_drop_first__lte=1, max_drop_mrr__gte=0,
                            max_drop_mrr__lte=1, max_drop_ndcg__gte=0, max_drop_ndcg__lte=1,
                            max_drop_off_topic_empty__gte=0, max_drop_off_topic_empty__lte=1),
                name="question_set_tolerances_in_unit_range",
                violation_error_message="a tolerance lies between 0 and 1"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    def tolerances(self) -> dict[str, float]:
        return {metric: getattr(self, column) for metric, (_, column) in GATE_METRICS.items()}


class GateRule(models.Model):
    """One gate question set as it stood when a config change was held: its questions, the
    datasets they search and its tolerances. Every check of the change (the first, and each
    "check again") measures these, whatever has become of the set since: a change is decided
    under the rules in force when it was held (or by a superuser)."""

    draft = models.ForeignKey(RagConfigDraft, on_delete=models.CASCADE,
                              related_name="gate_rules")
    question_set = models.ForeignKey(QuestionSet, on_delete=models.SET_NULL, null=True,
                                     blank=True, related_name="+")
    name = models.CharField(max_length=200, help_text="The set's name when it was held.")
    # An id, not a key: the rule outlives its set and its dataset (a dataset deleted since
    # has no lookups to find anything, under either version).
    dataset_id = models.PositiveIntegerField(
        null=True, blank=True, help_text="The dataset its questions search; empty: every "
                                         "activated dataset of the tenant.")
    questions = models.JSONField(help_text="Its questions, as they were.")
    tolerances = models.JSONField(help_text="metric → the largest drop allowed, as it was")

    class Meta:
        ordering = ["draft", "id"]

    def __str__(self) -> str:
        return f"gate rule {self.name} of held change {self.draft_id}"

    @classmethod
    def of(cls, question_set: QuestionSet, draft: RagConfigDraft | None = None) -> GateRule:
        """The set's rule as it stands now (unsaved)."""
        return cls(draft=draft, question_set=question_set, name=question_set.name,
                   dataset_id=question_set.dataset_id, questions=question_set.questions,
                   tolerances=question_set.tolerances())


class GateCheck(models.Model):
    """One gate question set measured for a held config change: the version it was made over
    (baseline) and the change (candidate), each an evaluation run, and the verdict."""

    draft = models.ForeignKey(RagConfigDraft, on_delete=models.CASCADE,
                              related_name="gate_checks")
    question_set = models.ForeignKey(QuestionSet, on_delete=models.SET_NULL, null=True,
                                     blank=True, related_name="+")
    name = models.CharField(max_length=200, help_text="The set's name when it ran.")
    baseline = models.ForeignKey(EvaluationRun, on_delete=models.SET_NULL, null=True,
                                 related_name="+")
    candidate = models.ForeignKey(EvaluationRun, on_delete=models.SET_NULL, null=True,
                                  related_name="+")
    tolerances = models.JSONField(help_text="metric → the largest drop allowed, as it ran")
    drops = models.JSONField(help_text="metric → baseline minus candidate")
    passed = models.BooleanField()

    class Meta:
        ordering = ["draft", "id"]

    def __str__(self) -> str:
        return f"gate {self.name} of held change {self.draft_id}: " + (
            "passed" if self.passed else "regression")
