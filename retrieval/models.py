"""The retrieval app's models, by package: the RAG configs and synonyms (ragconfig/models.py)
and the index (index/models.py). Django finds them here."""

from retrieval.index.models import EmbeddingCache, IndexVersion
from retrieval.ragconfig.models import (
    ConfigExperiment,
    RagAgent,
    RagConfig,
    RagConfigChange,
    RagConfigDraft,
    SynonymGroup,
    SynonymRevision,
    _default_retrievers,  # named by the migrations
)

__all__ = ["ConfigExperiment", "EmbeddingCache", "IndexVersion", "RagAgent", "RagConfig",
           "RagConfigChange", "RagConfigDraft", "SynonymGroup", "SynonymRevision",
           "_default_retrievers"]
