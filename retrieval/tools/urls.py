import re

from django.urls import path

from retrieval.index import apis as index_apis
from retrieval.ragconfig import apis as ragconfig_apis
from retrieval.tools import compat
from retrieval.tools import views as apis
from retrieval.tools.registry import SERVED


def _route(documented: str) -> str:
    """A tool's route from its path as OpenAPI writes it: `{name}` → `<str:name>`."""
    return re.sub(r"\{(\w+)\}", r"<str:\1>", documented.removeprefix("/api/"))


urlpatterns = [
    *(path(_route(tool.path), apis.tool_api(tool).as_view()) for tool in SERVED
      if tool.operation),
    path("tools/schema", apis.ToolSchemaApi.as_view()),
    path("dify/retrieval", compat.DifyApi.as_view()),
    path("openai/vector_stores/<str:vector_store_id>/search", compat.VectorSearchApi.as_view()),
    path("knowledge/rebuild-hybrid", index_apis.RebuildApi.as_view()),
    path("knowledge/rollback", index_apis.RollbackApi.as_view()),
    path("knowledge/reconcile", index_apis.ReconcileApi.as_view()),
    path("knowledge/index-versions", index_apis.IndexVersionListApi.as_view()),
    path("rag/experiments/<str:experiment_id>/cited-rates",
         ragconfig_apis.ExperimentCitedApi.as_view()),
    path("health", index_apis.HealthApi.as_view(), name="health"),
]
