"""Evaluation runs of config versions, each query's outcome kept."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from datasets.models import Job, Tenant


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
        if self.config_version is None:
            return "the built-in defaults"
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
