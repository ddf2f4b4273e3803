"""Tenants, API keys, datasets, sources, documents and chunks."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from datasets.documents.evidence import ANCHOR_DIGITS, EvidenceKey
from datasets.ingestion.formats import Format
from datasets.ingestion.language import UNKNOWN, Language
from datasets.ingestion.limits import FIELD_NAME
from datasets.ingestion.parse import KNOWN_FIELDS
from datasets.tenancy.permissions import principal
from kbplatform.env import SLUG_PATTERN

SLUG = RegexValidator(SLUG_PATTERN, "lowercase letters, digits, - and _")
REGION_PATTERN = r"^[a-z0-9-]{0,40}$"
REGION = RegexValidator(REGION_PATTERN, "lower-case letters, digits and -")


def upload_limit() -> int:
    """KB_MAX_UPLOAD_BYTES, as this process reads it (a source's max_page_bytes: its default
    and its bound)."""
    return int(settings.KB_MAX_UPLOAD_BYTES)


def new_doc_id() -> int:
    # A stable, globally unique id that is part of every Milvus primary key of the document;
    # 62 bits so that it fits a signed BIGINT. It travels as a string in JSON.
    return secrets.randbits(62) | 1 << 61


MAX_FILTERABLE_FIELDS = 10
# Names a declared field may not take: the frontmatter fields kept apart, the keys of a
# call's `filters` (retrieval/ragconfig/filters.py) and the names Dify's and OpenAI's filters
# give the built-in ones (retrieval/tools/compat.py); a test holds them to those.
RESERVED_FIELD_NAMES = KNOWN_FIELDS | {
    "document_ids", "source", "format", "tags", "file_name", "updated_after",
    "updated_before", "fields", "document_id", "updated_at"}


def validate_filterable_fields(value: object) -> None:
    """Names of frontmatter fields, each an identifier no other filter or field uses."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValidationError("a list of field names")
    if len(value) > MAX_FILTERABLE_FIELDS:
        raise ValidationError(f"{MAX_FILTERABLE_FIELDS} fields at most")
    for name in value:
        if not FIELD_NAME.fullmatch(name):
            raise ValidationError(f"{name[:40]!r}: a lower-case identifier (a-z, 0-9, _) of "
                                  "40 characters at most, starting with a letter")
        if name in KNOWN_FIELDS:
            raise ValidationError(f"{name!r} is a frontmatter field of its own (the filters "
                                  "domain, category, business_key and tags read those)")
        if name in RESERVED_FIELD_NAMES:
            raise ValidationError(f"{name!r} names a filter of its own (docs/api.md)")
    if len(set(value)) != len(value):
        raise ValidationError("a field is named twice")


class Tenant(models.Model):
    slug = models.CharField(max_length=63, unique=True, validators=[SLUG])
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    staff = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="staff_tenants",
        help_text="Staff users who work on this tenant in the admin: they see its data and no "
                  "other tenant's (datasets/admin/scope.py). Superusers see every tenant.")
    # The tenant's own opt-in to keeping its callers' questions (audit/privacy.py reads it):
    # a superuser switches it on; the tenant's staff may switch it off or shorten the days.
    store_raw_queries = models.BooleanField(
        default=False, db_default=False, verbose_name="keep raw queries",
        help_text="Keep the text of this tenant's questions in the audit (the knowledge gaps "
                  "then show example queries), for the retention below. Off: a keyed hash and "
                  "a length only. KB_AUDIT_STORE_RAW_QUERY keeps every tenant's.")
    raw_query_retention_days = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        verbose_name="raw query retention (days)",
        help_text="Kept question text is erased after this many days; empty: the deployment's "
                  "KB_AUDIT_RAW_QUERY_RETENTION_DAYS, which is also the most it can be.")
    filterable_fields = models.JSONField(
        default=list, db_default=[], blank=True, validators=[validate_filterable_fields],
        help_text="Frontmatter fields of this tenant's documents an agent's call may filter "
                  "on, as `filters: {\"fields\": {\"team\": [\"sre\"]}}` (docs/api.md).")

    class Meta:
        ordering = ["slug"]
        constraints = [models.CheckConstraint(
            condition=models.Q(raw_query_retention_days__isnull=True)
            | models.Q(raw_query_retention_days__gte=1),
            name="tenant_raw_query_retention_positive")]

    def __str__(self) -> str:
        return self.slug


class Dataset(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="datasets")
    name = models.CharField(max_length=100, validators=[SLUG])
    description = models.TextField(blank=True)
    kb_scope = models.CharField(max_length=100, blank=True)
    activated = models.BooleanField(default=True)
    evaluation = models.BooleanField(
        default=False, help_text="Loaded by `manage.py evaluate` into its own collection; "
                                 "never part of the serving index or a rebuild.")
    # Changed (to a fresh random value) by every change of a document that lookups must see
    # (content, activation, deletion): each process rebuilds its cached view of the dataset
    # (L0 hints, the documents to exclude and to serve) when it moves, with one small query
    # per lookup.
    documents_revision = models.PositiveBigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"],
                                    name="dataset_unique_name_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class ApiKey(models.Model):
    class Role(models.TextChoices):
        TOOL = "tool", "tool caller"
        ADMIN = "admin", "admin"
        # A tenant admin who may also run platform-wide index operations (rebuild, rollback,
        # reconcile): the platform's operators, not a tenant's.
        PLATFORM = "platform", "platform operator"

    class Origin(models.TextChoices):
        # Where the key was made: a platform key acts platform-wide only when an operator
        # made it (datasets/tenancy/keys.py, platform_key_vouched).
        COMMAND = "command", "a manage.py command (an operator's)"
        ADMIN = "admin", "the admin (by created_by)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    # No default: whoever creates a key says where it comes from (api_key_create).
    origin = models.CharField(max_length=10, choices=Origin.choices, editable=False)
    # A deleted maker leaves an admin-made key made by nobody: no operator vouches for it.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        editable=False, related_name="+",
        help_text="Who made the key in the admin; empty for a command's key.")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.TOOL)
    datasets = models.ManyToManyField(
        Dataset, blank=True, related_name="api_keys",
        help_text="Leave empty to allow every dataset of the tenant.",
    )
    # Set when the key was limited to some datasets: if they are all deleted later, the key
    # reads nothing, instead of falling back to "every dataset".
    scoped = models.BooleanField(default=False, editable=False)
    revoked = models.BooleanField(default=False)
    acts_for_people = models.BooleanField(
        default=False, db_default=False, verbose_name="may act for people",
        help_text="Its calls may name the person they are made for (`on_behalf_of`: a user "
                  "and groups), and read the documents restricted to them. Off: its calls read "
                  "only documents without readers.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant__slug", "-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(role__in=["tool", "admin", "platform"]),
                                   name="api_key_role_valid"),
            models.CheckConstraint(condition=models.Q(origin__in=["command", "admin"]),
                                   name="api_key_origin_valid"),
            models.CheckConstraint(
                condition=models.Q(origin="admin") | models.Q(created_by__isnull=True),
                name="api_key_command_keys_have_no_maker"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}:{self.prefix}… ({self.role})"


class PrincipalAlias(models.Model):
    """One person or group as a source names it and as the tenant's agents name it: a call
    made for `principal` also reads the documents whose readers name `alias`
    (datasets/tenancy/permissions.py)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="aliases")
    alias = models.CharField(max_length=200, help_text=(
        "As a source names it: `user:557058:f1c2…`, `group:confluence-sre`."))
    principal = models.CharField(max_length=200, help_text=(
        "As the agents name it in `on_behalf_of`: `user:alice@example.com`, `group:sre`."))

    class Meta:
        ordering = ["tenant_id", "principal", "alias"]
        verbose_name_plural = "principal aliases"
        constraints = [models.UniqueConstraint(fields=["tenant", "alias", "principal"],
                                               name="principal_alias_unique")]

    def __str__(self) -> str:
        return f"{self.alias} = {self.principal}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.clean()  # compared as written: never a row that no call could match
        super().save(*args, **kwargs)

    def clean(self) -> None:
        self.alias, self.principal = principal(self.alias), principal(self.principal)


class Source(models.Model):
    """Where a dataset's documents come from and are kept in sync with (datasets/sources/):
    the documents a source made are its own; a file gone from the source deletes its
    document, and only that one."""

    class Kind(models.TextChoices):
        GIT = "git", "git repository"
        FOLDER = "folder", "server folder"
        WEB = "web", "web page or sitemap"
        S3 = "s3", "S3-compatible bucket"
        CONFLUENCE = "confluence", "Confluence space"
        YUQUE = "yuque", "Yuque book"
        FEISHU = "feishu", "Feishu/Lark wiki space or folder"

    class Status(models.TextChoices):
        NEVER = "never", "never synced"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="sources")
    name = models.CharField(max_length=63, validators=[SLUG], help_text=(
        "Names the source's documents: each one's path is <name>/<path in the source>."))
    kind = models.CharField(max_length=10, choices=Kind.choices)
    location = models.CharField(max_length=1000, help_text=(
        "git: an http(s) URL, or a local path in its tenant's source folders (KB_SOURCE_ROOTS: "
        "a folder bound to the tenant's slug, or <parent>/<slug>/); folder: a path in them; "
        "web: the start page's or the sitemap's http(s) URL; s3: the bucket's URL, path style "
        "(https://<endpoint>/<bucket>); confluence: the space's URL "
        "(https://<site>/wiki/spaces/<KEY>, https://<host>/display/<KEY>); yuque: the book's "
        "URL (https://www.yuque.com/<group>/<book>); feishu: the wiki space's URL "
        "(https://<tenant>.feishu.cn/wiki/space/<space id>) or a Drive folder's "
        "(https://<tenant>.feishu.cn/drive/folder/<token>)."))
    branch = models.CharField(max_length=200, blank=True, default="main",
                              help_text="git: the branch to follow.")
    subfolder = models.CharField(max_length=500, blank=True,
                                 help_text="git and s3: only the files under this folder.")
    include = models.JSONField(default=list, blank=True, help_text=(
        "git, folder and s3: glob patterns of the files to take (`**/*.md`); confluence, "
        "yuque and feishu: of the pages' title paths (`Operations/**`); empty: every file."))
    max_depth = models.PositiveSmallIntegerField(
        default=2, validators=[MaxValueValidator(10)],
        help_text="web: how many links away from the start page a page may be.")
    max_pages = models.PositiveIntegerField(
        default=200, validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="web: the pages one sync fetches at most.")
    max_page_bytes = models.PositiveIntegerField(
        default=upload_limit, validators=[MinValueValidator(1024)],
        help_text="web: a larger page is not taken (a failed line in the sync's log); at most "
                  "KB_MAX_UPLOAD_BYTES, the default.")
    region = models.CharField(
        max_length=40, blank=True, default="", db_default="",
        validators=[REGION],
        help_text="s3: the region its requests' signatures name (`eu-west-1`); empty: an AWS "
                  "endpoint's (s3.<region>.amazonaws.com), otherwise us-east-1, which MinIO "
                  "and most S3-compatible stores take.")
    interval_minutes = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Sync every this many minutes; empty: only on demand.")
    secret_env = models.CharField(
        max_length=120, blank=True, default="", db_default="", verbose_name="credential variable",
        help_text="git over https: the environment variable holding the credential, "
                  "`token` or `user:token`; s3: `<access key id>:<secret access key>`; "
                  "confluence: `<email>:<API token>` (Cloud) or a personal access token "
                  "(Data Center); yuque: a token; feishu: `<app id>:<app secret>` (its name, "
                  "never the credential itself; "
                  "<VARIABLE>_FILE may name a file holding it): KB_SOURCE_SECRET_<SLUG>, or "
                  "KB_SOURCE_SECRET_<SLUG>_<NAME>, of the source's tenant. Empty: none.")
    readers = models.JSONField(
        default=list, db_default=[], blank=True,
        help_text="Who may read its documents: `user:<name>` and `group:<name>` principals "
                  "(docs/api.md, \"Document permissions\"); empty: every caller of the "
                  "dataset. Its documents take them at once.")
    last_revision = models.CharField(max_length=64, blank=True, editable=False,
                                     help_text="git: the commit the last sync reached.")
    last_sync_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_status = models.CharField(max_length=10, choices=Status.choices, default=Status.NEVER,
                                   editable=False)
    last_error = models.TextField(blank=True, editable=False)
    # The claim of the sync that runs (datasets/sources/sync.py): set by one conditional
    # UPDATE, so two workers never sync one source at once.
    syncing_since = models.DateTimeField(null=True, blank=True, editable=False)
    # web: the links each fetched page had, so that a page answering 304 still leads the
    # crawl to the pages below it.
    state = models.JSONField(default=dict, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["dataset_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "name"],
                                    name="source_unique_name_per_dataset"),
            models.CheckConstraint(
                condition=models.Q(kind__in=["git", "folder", "web", "s3", "confluence",
                                             "yuque", "feishu"]),
                name="source_kind_valid"),
            models.CheckConstraint(
                condition=models.Q(last_status__in=["never", "succeeded", "failed"]),
                name="source_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset}:{self.name}"


class Document(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        INDEXING = "indexing"
        READY = "ready"
        FAILED = "failed"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="documents")
    doc_id = models.BigIntegerField(unique=True, default=new_doc_id, editable=False)
    source_path = models.CharField(max_length=500)
    file_name = models.CharField(max_length=255)
    title = models.CharField(max_length=500, blank=True)
    business_key = models.CharField(max_length=200, blank=True)
    domain = models.CharField(max_length=100, blank=True)
    keywords = models.JSONField(default=list, blank=True)
    category = models.CharField(max_length=100, blank=True)
    format = models.CharField(max_length=10, choices=[(f.value, f.value) for f in Format],
                              default=Format.MARKDOWN.value, editable=False)
    source_text = models.TextField(
        blank=True, help_text="The markdown as uploaded, or as converted from the original "
                              "(empty until the worker converts it); indexing reads it.")
    # Every format but markdown keeps its original file (datasets/documents/originals.py): a
    # conversion reads it, a rebuild converts it again when the converters changed.
    original = models.CharField(max_length=300, blank=True, editable=False,
                                help_text="The original file's name in the storage.")
    converter_version = models.CharField(
        max_length=50, blank=True, editable=False,
        help_text="The converters' version that made source_text from the original.")
    conversion_notes = models.JSONField(default=list, blank=True, editable=False,
                                        help_text="What the conversion told the uploader.")
    content_updated_at = models.DateTimeField(
        default=timezone.now, editable=False,
        help_text="When the content last changed: what RagConfig.metadata_filters' "
                  "updated_after / updated_before compare.")
    # Which of the two languages the text is written in (datasets/ingestion/language.py): a
    # lookup translates a question only when the datasets it searches hold the other one.
    language = models.CharField(
        max_length=2, blank=True, editable=False,
        choices=[(lang.value, lang.value) for lang in Language],
        help_text="zh or en, from the text when it is stored (or converted); empty: no text "
                  "yet, or no letter of either.")
    content_hash = models.CharField(max_length=64)
    activated = models.BooleanField(default=True)
    deleted = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True, help_text="Why indexing failed, as the uploader may read "
                                                    "it; infrastructure details go to the logs.")
    chunk_count = models.PositiveIntegerField(default=0)
    indexed_hash = models.CharField(max_length=200, blank=True,
                                    help_text="content hash of what the serving index holds")
    # Every change the vector store must follow (content, activation, deletion) bumps
    # `revision`; the indexing worker records the revision it applied. Different means a sync
    # is due: the worker's recovery finds those documents after a crash or a lost message.
    revision = models.PositiveBigIntegerField(default=1)
    synced_revision = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # A deleted source's documents are deleted with it (source_delete); SET_NULL only keeps
    # the deleted rows' history.
    source = models.ForeignKey(Source, on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="documents", editable=False,
                               help_text="The source that made the document; empty: uploaded.")
    source_commit = models.CharField(
        max_length=64, blank=True, editable=False,
        help_text="git: the commit the document's content came from (agents see it).")
    reviewed_at = models.DateField(null=True, blank=True, editable=False,
                                   help_text="Frontmatter: when it was last reviewed.")
    valid_until = models.DateField(
        null=True, blank=True, editable=False,
        help_text="Frontmatter: until when it holds; past it, its evidence is served `stale`.")
    owner = models.CharField(max_length=200, blank=True, editable=False,
                             help_text="Frontmatter: who answers for it.")
    fields = models.JSONField(
        default=dict, db_default={}, blank=True, editable=False,
        help_text="Frontmatter: its other fields, {name: [values as text]}; the tenant's "
                  "filterable fields are read from them.")
    readers = models.JSONField(
        default=list, db_default=[], blank=True,
        help_text="Who may read it: `user:<name>` and `group:<name>` principals "
                  "(docs/api.md, \"Document permissions\"); a synced document's are its "
                  "source's within those the source keeps (readers at the source); empty: "
                  "every caller of the dataset; `none:`: no agent.")
    readers_at_source = models.JSONField(
        default=list, db_default=[], blank=True, editable=False,
        help_text="Who its source lets read it as the last sync read them (a Confluence "
                  "Cloud space's viewers, a page's restrictions and its ancestors', a Feishu "
                  "space's members, a Drive document's owner and collaborators, a private "
                  "Yuque book's team); empty: the source keeps none.")
    indexed_readers = models.JSONField(
        default=list, db_default=[], blank=True, editable=False,
        help_text="The readers its rows in the serving index name: a change of `readers` "
                  "is written there by the indexing worker (lookups hold the new readers "
                  "by the document's id until then).")
    url = models.CharField(
        max_length=2000, blank=True, editable=False,
        help_text="Where the original can be read, when it has an address: a web page's URL; "
                  "a git file's page at its commit on an http(s) host. Evidence links to it.")
    source_version = models.CharField(
        max_length=300, blank=True, editable=False,
        help_text="What the source said of the file when it was read: the git blob, the "
                  "folder's mtime and size, the page's ETag or Last-Modified.")

    class Meta:
        db_table = "api_document"
        ordering = ["dataset_id", "source_path"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "source_path"],
                                    name="document_unique_path_per_dataset"),
            models.CheckConstraint(
                condition=models.Q(status__in=["pending", "indexing", "ready", "failed"]),
                name="document_status_valid"),
            models.CheckConstraint(condition=models.Q(format__in=[f.value for f in Format]),
                                   name="document_format_valid"),
            models.CheckConstraint(
                condition=models.Q(language__in=[UNKNOWN, *(lang.value for lang in Language)]),
                name="document_language_valid"),
        ]
        indexes = [models.Index(fields=["dataset", "deleted", "activated"])]

    def __str__(self) -> str:
        return self.source_path

    @property
    def sync_pending(self) -> bool:
        return self.synced_revision != self.revision

    @property
    def doc_key(self) -> str:
        return str(self.doc_id)


class Chunk(models.Model):
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    chunk_index = models.PositiveIntegerField()
    content = models.TextField()
    breadcrumb = models.CharField(max_length=1000, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # The content-addressed part of its evidence id (datasets/documents/evidence.py); empty: indexed
    # before anchors were kept, served as `{docId}#chunk-{n}` until re-indexed.
    anchor = models.CharField(max_length=ANCHOR_DIGITS, blank=True)

    class Meta:
        ordering = ["document_id", "chunk_index"]
        constraints = [
            models.UniqueConstraint(fields=["document", "chunk_index"], name="chunk_unique_index"),
        ]
        indexes = [models.Index(fields=["document", "anchor"], name="chunk_anchor")]

    def __str__(self) -> str:
        return self.evidence_key

    @property
    def evidence_key(self) -> str:
        """The id it is served as."""
        return str(EvidenceKey.served(str(self.document.doc_id), self.chunk_index, self.anchor))


class Job(models.Model):
    """A background task people can follow: upload, import, rebuild (API and admin)."""

    class Kind(models.TextChoices):
        INDEX_DOCUMENT = "index_document"
        IMPORT = "import"
        REBUILD = "rebuild"
        ROLLBACK = "rollback"
        RECONCILE = "reconcile"
        EVALUATE = "evaluate"
        SYNC_SOURCE = "sync_source"
        GATE = "gate"  # a held RagConfig change checked by the tenant's regression gate
        CALIBRATE = "calibrate"  # a config's relevance gate refitted on the gate sets

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    # No tenant: a platform job (rebuild, rollback, reconcile), for platform operators only.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True,
                               related_name="jobs")
    # A dataset-scoped key sees the jobs of its datasets only.
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, null=True, blank=True,
                                related_name="jobs")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    document = models.ForeignKey(Document, on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="jobs")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, null=True, blank=True,
                               related_name="jobs", help_text="What a source's sync syncs.")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    detail = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, help_text="What the job's owner may read.")
    error_detail = models.TextField(blank=True, help_text="The exception, for operators only.")
    # Written by datasets/jobs/progress.py (job_update's `log`), LOG_LINES lines at most.
    log = models.JSONField(default=list, blank=True, help_text=(
        "What the job did, as its owner may read it: [{\"at\": ISO time, \"message\": …}], "
        "its last 200 lines."))
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["queued", "running", "succeeded", "failed"]),
                name="job_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"
