"""What a lookup's set-up is built from, read in one statement per lookup.

A lookup needs the config that serves, the serving index version, the view of the searched
documents and the tenant's synonyms. Each process keeps each of them, built, next to the
revision it was built from (ragconfig/selectors.py, index/versions.py, l0.py, synonyms.py);
whether they are all still current is this one statement over the rows that say so, however
many documents there are. Written once by hand from the models' own table and column names:
building four ORM queries cost every lookup 1.6 ms (docs/benchmarks.md), reading them 0.1 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection, models

from datasets.models import Dataset
from retrieval.index.models import IndexVersion
from retrieval.index.versions import ActiveIndex
from retrieval.ragconfig.models import RagConfig, SynonymRevision
from retrieval.ragconfig.selectors import ConfigRevision, override_dataset

_DATASET, _SYNONYMS, _CONFIG, _INDEX = "dataset", "synonyms", "config", "index"


@dataclass(frozen=True)
class Revisions:
    """The rows a lookup's set-up is built from, as the database holds them now."""

    # The searched datasets' (pk, created_at, documents_revision), by pk: as this statement
    # returns them, compared only with what it returned before.
    datasets: tuple[tuple[Any, ...], ...]
    synonyms: str | None  # the tenant's synonym revision; None: it never had a group
    configs: tuple[ConfigRevision, ...]  # the tenant's default and the dataset's override
    index: ActiveIndex | None  # the active index version; None: nothing indexed yet


def lookup_revisions(*, tenant_id: int, dataset_ids: Sequence[int]) -> Revisions:
    """The revisions of one lookup over `dataset_ids` of `tenant_id`."""
    datasets = sorted(set(dataset_ids))
    override = override_dataset(datasets)
    with connection.cursor() as cursor:
        cursor.execute(_statement(len(datasets), override is not None),
                       [*datasets, tenant_id, tenant_id,
                        *([override] if override is not None else []),
                        IndexVersion.Status.ACTIVE])
        rows = cursor.fetchall()
    synonyms = [revision for kind, _, _, revision, *_ in rows if kind == _SYNONYMS]
    actives = sorted(((at, pk, name) for kind, pk, _, _, name, at, *_ in rows
                      if kind == _INDEX), reverse=True)
    return Revisions(
        datasets=tuple(sorted((pk, at, number) for kind, pk, number, _, _, at, *_ in rows
                              if kind == _DATASET)),
        synonyms=synonyms[0] if synonyms else None,
        configs=tuple(ConfigRevision.of(pk, dataset, number, at, experiment)
                      for kind, pk, number, _, _, at, dataset, experiment in rows
                      if kind == _CONFIG),
        # The newest active version, as active_version() reads it.
        index=ActiveIndex(pk=actives[0][1], collection=actives[0][2], created_at=actives[0][0])
        if actives else None)


@cache
def _statement(datasets: int, override: bool) -> str:
    """Every row as (kind, pk, number, revision, name, at, ref, ref2): a column per kind of
    value, so that no column mixes two tables' collations."""

    def table(model: type[models.Model]) -> str:
        return connection.ops.quote_name(model._meta.db_table)

    def column(model: type[models.Model], name: str) -> str:
        field = model._meta.get_field(name)
        assert isinstance(field, models.Field) and field.column
        return connection.ops.quote_name(field.column)

    def part(kind: str, model: type[models.Model], fields: Sequence[str | None],
             where: str) -> str:
        values = ", ".join(column(model, f) if f else "NULL" for f in fields)
        return f"SELECT '{kind}', {values} FROM {table(model)} WHERE {where}"

    config_scope = f"{column(RagConfig, 'dataset')} IS NULL"
    if override:
        config_scope = f"({config_scope} OR {column(RagConfig, 'dataset')} = %s)"
    parts = [
        part(_SYNONYMS, SynonymRevision,
             ("tenant", None, "revision", None, None, None, None),
             f"{column(SynonymRevision, 'tenant')} = %s"),
        part(_CONFIG, RagConfig,
             ("id", "version", None, None, "updated_at", "dataset", "experiment"),
             f"{column(RagConfig, 'tenant')} = %s AND {config_scope}"),
        part(_INDEX, IndexVersion,
             ("id", None, None, "collection_name", "created_at", None, None),
             f"{column(IndexVersion, 'status')} = %s"),
    ]
    if datasets:
        placeholders = ", ".join(["%s"] * datasets)
        parts.insert(0, part(_DATASET, Dataset,
                             ("id", "documents_revision", None, None, "created_at", None, None),
                             f"{column(Dataset, 'id')} IN ({placeholders})"))
    return " UNION ALL ".join(parts)
