"""Milvus filter expressions, built here from typed values and never from request text."""

from __future__ import annotations

from retrieval.types import MetadataFilter, SearchFilters

# The Milvus Lite 3.x lexer (milvus_lite/search/filter/tokens.py) knows only the escapes
# \\ \" \' \n \r \t and rejects a raw CR or LF inside a literal; every other character (C0
# controls, NUL, DEL, CJK, emoji) is taken verbatim. JSON's \uXXXX is refused, so json.dumps
# broke every filter on a value holding a control character. Milvus 2.5's engine as the
# milvus-lite 2.5.1 wheel serves it knows \\ and \" only: a tab goes in raw, which every
# engine takes; CR and LF have no spelling there (such a value matches nothing on it).
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


READERS_FIELD = "readers"  # who may read a row's document (collections.py declares it)


def quote(value: str) -> str:
    """A string literal whose value is exactly `value`; it can never end early or add a clause."""
    return '"' + value.translate(_ESCAPES) + '"'


def ints(values: object) -> str:
    """`[1, 2]` from ints only (a str that happens to hold digits is refused)."""
    items = list(values)  # type: ignore[call-overload]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise TypeError("ids in a filter must be ints")
    return "[" + ", ".join(str(v) for v in items) + "]"


def filter_expression(filters: SearchFilters, *, readers_rows: bool = True) -> str:
    """Tenant, datasets, activation and the documents restricted to others on every search,
    from the caller's key and the person it acts for (seed 003 §7).

    Activation is a filter on doc_id, not the rows' `activated` field: on Milvus Lite 3.x any
    write of a row (a flip included) moves it into a new segment whose BM25 statistics are its
    own, and the document dropped out of BM25 results until a rebuild. Flipping a document
    therefore writes nothing to Milvus.

    Readers are the rows' own (`readers_rows`: the collection's rows name them), so that the
    clause costs the same whatever the number of restricted documents; the documents whose
    rows may not name their readers yet are decided by id. A collection built before rows
    named readers leaves out every document withheld, by id.
    """
    if not filters.dataset_ids:
        raise ValueError("a search needs at least one dataset")
    expr = f"tenant_id == {int(filters.tenant_id)} and dataset_id in {ints(filters.dataset_ids)}"
    if filters.excluded_doc_ids:
        expr += f" and doc_id not in {ints(filters.excluded_doc_ids)}"
    expr += readers_clauses(filters, readers_rows)
    if filters.category:
        expr += f" and category == {quote(filters.category)}"
    if filters.call.documents is not None:
        expr += f" and doc_id in {ints(filters.call.documents)}"
    return expr + metadata_clauses(filters.metadata) + metadata_clauses(filters.call.metadata)


def readers_clauses(filters: SearchFilters, readers_rows: bool) -> str:
    """What the search's access may read (nothing to add for the platform's own reads)."""
    principals, withheld = filters.access.principals, filters.withheld
    if principals is None or not withheld.restricted:
        return ""
    if not readers_rows:
        return f" and doc_id not in {ints(withheld.all)}" if withheld.all else ""
    readable = [f"array_length({READERS_FIELD}) == 0"]
    if principals:
        named = ", ".join(quote(p) for p in sorted(principals))
        readable.append(f"array_contains_any({READERS_FIELD}, [{named}])")
    if withheld.unsynced_readable:
        readable.append(f"doc_id in {ints(withheld.unsynced_readable)}")
    clauses = f" and ({' or '.join(readable)})"
    if withheld.unsynced:
        clauses += f" and doc_id not in {ints(withheld.unsynced)}"
    return clauses

# The entity fields behind RagConfig.metadata_filters (collections.py indexes them).
TEXT_FIELDS = ("category", "domain", "business_key", "file_name")
DATE_FIELD = "updated_at"  # epoch seconds of the document's last content change


def metadata_clauses(metadata: MetadataFilter) -> str:
    """RagConfig.metadata_filters: each value quoted, each key a scalar field of the entity."""
    clauses = [f"{field} in [{', '.join(quote(v) for v in getattr(metadata, field))}]"
               for field in TEXT_FIELDS if getattr(metadata, field)]
    if metadata.updated_after is not None:
        clauses.append(f"{DATE_FIELD} >= {int(metadata.updated_after)}")
    if metadata.updated_before is not None:
        clauses.append(f"{DATE_FIELD} < {int(metadata.updated_before)}")
    return "".join(f" and {clause}" for clause in clauses)


def fields_used(metadata: MetadataFilter) -> set[str]:
    """The entity fields `metadata_clauses` compares."""
    used = {field for field in TEXT_FIELDS if getattr(metadata, field)}
    if metadata.updated_after is not None or metadata.updated_before is not None:
        used.add(DATE_FIELD)
    return used
