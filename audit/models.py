"""ToolInvocation: one row per tool call, for people to replay what the agent saw (seed 000 §9.1).

The agent never reads this table. It keeps how an answer was made, not what it said: the query
is a keyed hash and a length unless the tenant keeps raw queries (audit/privacy.py), and
excerpts are never kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import models
from django.db.models import Q
from django.utils import timezone

from audit import types
from datasets.models import ApiKey, Dataset, Tenant

# "" = the call failed before a result existed.
EVIDENCE_STATUSES = ["", *types.EVIDENCE_STATUSES]
RELEVANCE_LEVELS = ["", *types.RELEVANCE_LEVELS]


class Outcome(models.TextChoices):
    OK = "ok", "ok (READY)"
    EMPTY = "empty", "empty (EMPTY)"
    UNAVAILABLE = "unavailable", "unavailable (a backend failed)"
    INVALID = "invalid", "invalid request (4xx)"
    UNAUTHENTICATED = "unauthenticated", "unauthenticated (401)"
    FORBIDDEN = "forbidden", "forbidden (403)"
    ERROR = "error", "internal error (5xx)"


class Channel(models.TextChoices):
    REST = "rest", "REST API"
    MCP = "mcp", "MCP"


class ToolInvocation(models.Model):
    created_at = models.DateTimeField(default=timezone.now)
    tool_call_id = models.CharField(max_length=128, blank=True)
    session_id = models.CharField(max_length=128, blank=True)
    # A tenant's audit goes with the tenant; a deleted key leaves its history behind.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True,
                               related_name="tool_invocations")
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="tool_invocations")
    tool_name = models.CharField(max_length=64, default="lookup_knowledge")
    channel = models.CharField(max_length=8, choices=Channel.choices, default=Channel.REST,
                               help_text="How the agent called: the REST API or MCP.")
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    evidence_status = models.CharField(max_length=16, blank=True)
    relevance_level = models.CharField(max_length=16, blank=True)
    returned_count = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField()
    config_version = models.PositiveIntegerField(null=True, blank=True)
    # The config (retrieval's RagConfig, by id: the audit sits below retrieval) whose version
    # served. None with a version: recorded before config ids were (which config is unknown).
    config_id = models.PositiveIntegerField(null=True, blank=True)
    # The A/B test (retrieval's ConfigExperiment, by id: the audit sits below retrieval) that
    # routed the call, and its arm: both arms' figures are read from here.
    experiment_id = models.PositiveIntegerField(null=True, blank=True)
    experiment_arm = models.CharField(max_length=9, blank=True)
    query_hash = models.CharField(max_length=64, blank=True)
    query_length = models.PositiveIntegerField(null=True, blank=True)
    query_text = models.TextField(blank=True, help_text=(
        "Only where the tenant keeps raw queries, until its retention ends."))
    # The row holds question text (query_text, or texts made of it in `details`) until its
    # retention ends: what the erasing pass reads, from an index, whatever the table's size.
    query_kept = models.BooleanField(default=False)
    error = models.CharField(max_length=200, blank=True)
    details = models.JSONField(default=dict, blank=True)
    # The datasets the call's lookup searched, sorted ([] for a failed call): read as a field,
    # so that the audit never decodes retrieval's trace.
    dataset_ids = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "tool_invocation"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["created_at"], name="tool_inv_created"),
            # A tenant's calls, newest first (the admin's list filtered by tenant).
            models.Index(fields=["tenant", "created_at"], name="tool_inv_tenant_created"),
            models.Index(fields=["tenant", "session_id", "created_at"],
                         name="tool_inv_tenant_session"),
            models.Index(fields=["tool_call_id"], name="tool_inv_call"),
            models.Index(fields=["query_kept", "tenant", "created_at"],
                         name="tool_inv_query_kept"),
            models.Index(fields=["session_id"], name="tool_inv_session"),
            # Covers everything an A/B test's figures read: its calls are counted from the index
            # alone, never from the rows (and their traces).
            models.Index(fields=["experiment_id", "experiment_arm", "outcome", "relevance_level",
                                 "config_version", "returned_count", "latency_ms"],
                         name="tool_inv_experiment"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(outcome__in=Outcome.values),
                                   name="tool_invocation_outcome_valid"),
            models.CheckConstraint(condition=Q(evidence_status__in=EVIDENCE_STATUSES),
                                   name="tool_invocation_evidence_status_valid"),
            models.CheckConstraint(condition=Q(relevance_level__in=RELEVANCE_LEVELS),
                                   name="tool_invocation_relevance_level_valid"),
            models.CheckConstraint(condition=Q(latency_ms__gte=0),
                                   name="tool_invocation_latency_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.tool_call_id or '#' + str(self.pk)} ({self.outcome})"


class InvocationDataset(models.Model):
    """One dataset a call searched: what "datasets at a glance" counts per dataset and day
    without reading every call's trace. `created_at` and `outcome` are the call's, copied, and
    `day` its local date: counted per day from an index alone, with no date function per row
    (TruncDate ran one in Python per row on SQLite: 2 s over 150k rows)."""

    invocation = models.ForeignKey(ToolInvocation, on_delete=models.CASCADE,
                                   related_name="searched")
    # No constraint: the audit must not lose a call to a dataset deleted meanwhile (its rows
    # stay until the call is pruned; nothing reads a deleted dataset's figures).
    dataset = models.ForeignKey(Dataset, on_delete=models.DO_NOTHING, db_constraint=False,
                                related_name="+")
    created_at = models.DateTimeField()
    day = models.DateField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    # The call's relevance level and its topic terms (words of the tenant's documents, at most
    # a few): the knowledge gaps page (audit/gaps.py) reads them with the dataset's calls.
    relevance_level = models.CharField(max_length=16, blank=True)
    terms = models.JSONField(default=list, blank=True)
    # The call narrowed its own search (its `filters`): an EMPTY then says nothing of what the
    # dataset covers, so it is no knowledge gap.
    narrowed = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["dataset", "day", "outcome"],
                                name="inv_dataset_day"),
                   models.Index(fields=["dataset", "created_at"], name="inv_dataset_created")]

    def __str__(self) -> str:
        return f"{self.invocation_id} searched dataset {self.dataset_id}"

    @classmethod
    def of(cls, invocation: ToolInvocation, dataset_id: int,
           terms: Sequence[str] = (), narrowed: bool = False) -> InvocationDataset:
        return cls(invocation=invocation, dataset_id=dataset_id,
                   created_at=invocation.created_at, outcome=invocation.outcome,
                   day=timezone.localtime(invocation.created_at).date(),
                   relevance_level=invocation.relevance_level, terms=list(terms),
                   narrowed=narrowed)


class CanonicalInvocation(models.Model):
    """What one tool call handed out as READY evidence, kept for the evidence guard.

    Used when there is no Redis. Unlike a cache, nothing is evicted before `expires_at`;
    `prune_tool_invocations` deletes expired rows. The record holds ids, never excerpts or
    the query.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE,
                               related_name="canonical_invocations")
    tool_call_id = models.CharField(max_length=128)
    session_id = models.CharField(max_length=128, blank=True)
    record = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "canonical_invocation"
        indexes = [
            models.Index(fields=["tenant", "tool_call_id"], name="canonical_call"),
            models.Index(fields=["tenant", "session_id"], name="canonical_session"),
            models.Index(fields=["expires_at"], name="canonical_expires"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_call_id} ({self.tenant_id})"


class EvidenceReplay(models.Model):
    """What one tool call handed out, byte for byte, kept as long as its canonical record
    (KB_CANONICAL_TTL_SECONDS): GET /api/evidence/{tool_call_id} replays it after the
    documents changed and the index was rebuilt. Excerpts of the tenant's own documents,
    never the query; `prune_tool_invocations` deletes expired rows."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="replays")
    tool_call_id = models.CharField(max_length=128)
    evidence_status = models.CharField(max_length=16)
    config_version = models.PositiveIntegerField(null=True, blank=True)
    index_version = models.PositiveIntegerField(null=True, blank=True)
    dataset_ids = models.JSONField(default=list, help_text="The datasets the call searched.")
    evidence = models.JSONField(default=list, help_text="Each piece as the agent received it.")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "evidence_replay"
        indexes = [
            models.Index(fields=["tenant", "tool_call_id"], name="replay_call"),
            models.Index(fields=["expires_at"], name="replay_expires"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_call_id} ({self.tenant_id})"


class Rating(models.TextChoices):
    """What the `rate_evidence` tool says of one served evidence item."""

    HELPFUL = "helpful", "helpful"
    NOT_HELPFUL = "not_helpful", "not helpful"


class ServedEvidence(models.Model):
    """One evidence item one call handed out as READY, at its rank, and whether the caller
    cited it (the evidence guard, or the call's own answer confirmed it) or rated it: the cited
    rates are counted from these rows. Ids and counts only, never text.

    The call's tenant, config and its version, A/B arm, ids and day are copied from its
    ToolInvocation
    (written in the same statement batch), so that the figures group from an index alone; the
    rows go when the call is pruned."""

    invocation = models.ForeignKey(ToolInvocation, on_delete=models.CASCADE,
                                   related_name="served")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    # Ids only, no constraint (as InvocationDataset): the audit keeps a call whose dataset or
    # document was deleted meanwhile.
    dataset = models.ForeignKey(Dataset, on_delete=models.DO_NOTHING, db_constraint=False,
                                related_name="+")
    document_id = models.PositiveBigIntegerField(
        help_text="The Document's doc_id, as the evidence key names it.")
    evidence_key = models.CharField(max_length=200, help_text="{docId}#chunk-{n}")
    rank = models.PositiveSmallIntegerField(help_text="1 = the first item handed out.")
    tool_call_id = models.CharField(max_length=128, blank=True)
    session_id = models.CharField(max_length=128, blank=True)
    config_id = models.PositiveIntegerField(null=True, blank=True)
    config_version = models.PositiveIntegerField(null=True, blank=True)
    experiment_id = models.PositiveIntegerField(null=True, blank=True)
    experiment_arm = models.CharField(max_length=9, blank=True)
    day = models.DateField()
    cited = models.BooleanField(default=False)
    cited_at = models.DateTimeField(null=True, blank=True)
    rating = models.CharField(max_length=11, choices=Rating.choices, blank=True)
    rated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The guard's and rate_evidence's matches: a call's, a session's evidence.
            models.Index(fields=["tenant", "tool_call_id"], name="served_call"),
            models.Index(fields=["tenant", "session_id"], name="served_session"),
            # The figures: per config and version, per dataset and day, per document, per arm.
            models.Index(fields=["tenant", "config_id", "config_version", "rank", "cited",
                                 "rating"], name="served_config_version"),
            models.Index(fields=["dataset", "day", "cited", "rating"], name="served_dataset"),
            models.Index(fields=["document_id", "cited"], name="served_document"),
            models.Index(fields=["experiment_id", "experiment_arm", "invocation", "cited"],
                         name="served_experiment"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["invocation", "evidence_key"],
                                    name="served_once_per_call"),
            models.CheckConstraint(condition=Q(rank__gte=1), name="served_rank_positive"),
            models.CheckConstraint(condition=Q(rating__in=["", *Rating.values]),
                                   name="served_rating_valid"),
            models.CheckConstraint(condition=Q(cited=False) | Q(cited_at__isnull=False),
                                   name="served_cited_has_time"),
        ]

    def __str__(self) -> str:
        return f"{self.evidence_key} at rank {self.rank} of call {self.invocation_id}"


class AnswerCheck(models.Model):
    """One verify_answer of an agent's answer: how many of its sentences were checked and how
    many nothing served to the call (or session) supports, under the config version that
    served that call (copied from the verifying ToolInvocation, and gone with it). Counts
    only, never text: the per-version unsupported rate beside the cited rate
    (audit/cited.py)."""

    invocation = models.OneToOneField(ToolInvocation, on_delete=models.CASCADE,
                                      related_name="answer_check")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    config_id = models.PositiveIntegerField(null=True, blank=True)
    config_version = models.PositiveIntegerField(null=True, blank=True)
    sentences = models.PositiveIntegerField()
    unsupported = models.PositiveIntegerField()
    day = models.DateField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "day", "config_id", "config_version"],
                                name="answer_check_version")]
        constraints = [models.CheckConstraint(
            condition=Q(unsupported__lte=models.F("sentences")), name="answer_check_counts")]

    def __str__(self) -> str:
        return f"{self.unsupported} of {self.sentences} unsupported"
